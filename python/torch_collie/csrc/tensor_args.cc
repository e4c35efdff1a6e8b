#include "tensor_args.h"

#include <c10/util/Exception.h>

namespace torch_collie {

namespace {

std::optional<collie::DataType> toCollie(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return collie::DataType::kFloat32;
    case at::kDouble:
      return collie::DataType::kFloat64;
    case at::kHalf:
      return collie::DataType::kFloat16;
    case at::kBFloat16:
      return collie::DataType::kBFloat16;
    case at::kChar:
      return collie::DataType::kInt8;
    case at::kByte:
    case at::kBool:  // 0 or 1 per byte; the ops are mapped in reduction()
      return collie::DataType::kUint8;
    case at::kInt:
      return collie::DataType::kInt32;
    case at::kLong:
      return collie::DataType::kInt64;
    case at::kUInt32:
      return collie::DataType::kUint32;
    case at::kUInt64:
      return collie::DataType::kUint64;
    default:
      return std::nullopt;
  }
}

const char* opName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNUSED";
  }
}

std::string typeName(const at::Tensor& t) { return std::string(c10::toString(t.scalar_type())); }

}  // namespace

std::string prefix(const char* what, int rank) {
  return std::string("collie: ") + what + " on rank " + std::to_string(rank) + ": ";
}

void invalid(const char* what, int rank, const std::string& message) {
  TORCH_CHECK(false, prefix(what, rank) + message);
}

void checkCpu(const at::Tensor& t, const char* what, int rank) {
  checkTensor(t, what, rank, false);
}

void checkTensor(const at::Tensor& t, const char* what, int rank, bool allowCuda) {
  if (!t.device().is_cpu() && !(allowCuda && t.is_cuda())) {
    invalid(what, rank,
            "tensor is on " + t.device().str() +
                "; the collie backend takes CPU tensors here (CUDA tensors: all_reduce, reduce, "
                "broadcast and reduce_scatter of one tensor, all_gather of one input, "
                "all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single, send, recv)");
  }
  if (t.layout() != at::kStrided) {
    invalid(what, rank, "unsupported layout (collie takes dense tensors here)");
  }
}

void checkNonEmpty(c10::ArrayRef<at::Tensor> tensors, const char* what, int rank) {
  if (tensors.empty()) invalid(what, rank, "requires non-empty tensor list");
  for (const auto& t : tensors) checkCpu(t, what, rank);
}

void checkSingle(const std::vector<at::Tensor>& tensors, const char* what, int rank,
                 const char* list, bool allowCuda) {
  if (tensors.size() != 1) {
    invalid(what, rank,
            std::string("requires a single-element ") + list + ", got " +
                std::to_string(tensors.size()));
  }
  checkTensor(tensors[0], what, rank, allowCuda);
}

void checkTypeAndSize(c10::ArrayRef<at::Tensor> tensors, const at::Tensor& ref, const char* what,
                      int rank, bool allowCuda) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    checkTensor(t, what, rank, allowCuda);
    if (t.scalar_type() != ref.scalar_type()) {
      invalid(what, rank,
              "invalid tensor type at index " + std::to_string(i) + " (expected " + typeName(ref) +
                  ", got " + typeName(t) + ")");
    }
    if (t.sizes() != ref.sizes()) {
      invalid(what, rank,
              "invalid tensor size at index " + std::to_string(i) + " (expected " +
                  c10::str(ref.sizes()) + ", got " + c10::str(t.sizes()) + ")");
    }
  }
}

void checkRoot(int64_t root, int size, const char* what, int rank) {
  if (root < 0 || root >= size) {
    invalid(what, rank,
            "invalid root rank: " + std::to_string(root) + " (the group has " +
                std::to_string(size) + " ranks)");
  }
}

void checkScaledPairs(c10::ArrayRef<at::Tensor> outputs, c10::ArrayRef<at::Tensor> inputs,
                      bool outputLarger, int size, const char* what, int rank) {
  if (outputs.empty() || outputs.size() != inputs.size()) {
    invalid(what, rank, "requires non-empty input and output lists of the same length");
  }
  for (size_t j = 0; j < outputs.size(); ++j) {
    checkCpu(outputs[j], what, rank);
    checkCpu(inputs[j], what, rank);
    const at::Tensor& large = outputLarger ? outputs[j] : inputs[j];
    const at::Tensor& small = outputLarger ? inputs[j] : outputs[j];
    if (large.numel() != small.numel() * size || large.scalar_type() != small.scalar_type()) {
      invalid(what, rank,
              std::string(outputLarger ? "output" : "input") + " " + std::to_string(j) +
                  " must hold world_size * " + (outputLarger ? "input" : "output") +
                  ".numel() elements of its dtype");
    }
  }
}

void checkRootTensor(int64_t rootTensor, size_t count, const char* what, int rank) {
  if (rootTensor < 0 || rootTensor >= static_cast<int64_t>(count)) {
    invalid(what, rank,
            "invalid root tensor: " + std::to_string(rootTensor) + " (" + std::to_string(count) +
                " tensors given)");
  }
}

Reduction reduction(const at::Tensor& t, const c10d::ReduceOp& op, const char* what, int rank) {
  auto dtype = toCollie(t.scalar_type());
  if (!dtype) {
    invalid(what, rank,
            "dtype " + typeName(t) +
                " is not supported for reductions (use float32/64, float16, bfloat16, int8, "
                "uint8, int32, int64, uint32, uint64, bool, or complex with SUM/AVG)");
  }
  const bool isBool = t.scalar_type() == at::kBool;
  const bool integral = !at::isFloatingType(t.scalar_type());
  Reduction r{*dtype, collie::ReduceOp::kSum, std::nullopt, at::Tensor()};
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      r.op = isBool ? collie::ReduceOp::kMax : collie::ReduceOp::kSum;  // OR
      break;
    case c10d::ReduceOp::AVG:
      if (isBool) invalid(what, rank, "ReduceOp.AVG is not defined for bool tensors");
      r.op = collie::ReduceOp::kAvg;
      break;
    case c10d::ReduceOp::PRODUCT:
      r.op = isBool ? collie::ReduceOp::kMin : collie::ReduceOp::kProd;  // AND
      break;
    case c10d::ReduceOp::MIN:
      r.op = collie::ReduceOp::kMin;
      break;
    case c10d::ReduceOp::MAX:
      r.op = collie::ReduceOp::kMax;
      break;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      if (!integral) {
        invalid(what, rank,
                std::string("ReduceOp.") + opName(op.op_) +
                    " needs an integral dtype (integer or bool), got " + typeName(t));
      }
      r.op = op.op_ == c10d::ReduceOp::BAND  ? collie::ReduceOp::kBand
             : op.op_ == c10d::ReduceOp::BOR ? collie::ReduceOp::kBor
                                             : collie::ReduceOp::kBxor;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      if (integral) {
        invalid(what, rank, "ReduceOp.PREMUL_SUM needs a floating dtype, got " + typeName(t));
      }
      auto* factor = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      if (factor == nullptr) {
        invalid(what, rank, "ReduceOp.PREMUL_SUM without its factor (use _make_nccl_premul_sum)");
      }
      if (factor->tensor_factor.defined()) {
        r.premulTensor = factor->tensor_factor.to(at::kCPU);
        const at::Tensor typed = r.premulTensor.reshape({-1}).to(t.scalar_type()).contiguous();
        if (typed.numel() != 1) {
          invalid(what, rank,
                  "ReduceOp.PREMUL_SUM's tensor factor must have one element, got " +
                      std::to_string(typed.numel()));
        }
        r.scalar = collie::scalarFromBytes(typed.data_ptr(), *dtype);
      } else {
        r.premul = factor->double_factor;
        r.scalar = collie::scalarOf(factor->double_factor, *dtype);
      }
      r.op = collie::ReduceOp::kPreMulSum;
      break;
    }
    default:
      invalid(what, rank,
              std::string("unsupported reduction operation ") + opName(op.op_) +
                  " (use SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR or PREMUL_SUM)");
  }
  return r;
}

at::Tensor asReal(const at::Tensor& t, const c10d::ReduceOp& op, const char* what, int rank) {
  if (!t.is_complex()) return t;
  if (op.op_ != c10d::ReduceOp::SUM && op.op_ != c10d::ReduceOp::AVG &&
      op.op_ != c10d::ReduceOp::PREMUL_SUM) {
    invalid(what, rank,
            std::string("complex tensors reduce with SUM, AVG or PREMUL_SUM only, not ") +
                opName(op.op_));
  }
  return at::view_as_real(t);
}

at::Tensor prepared(const at::Tensor& t, const Reduction&) { return dense(t); }

at::Tensor combineLocal(c10::ArrayRef<at::Tensor> tensors, const c10d::ReduceOp& op,
                        const Reduction& r) {
  // Local tensors of one rank are multiplied here, before they are summed together.
  auto scaled = [&r](const at::Tensor& t) {
    if (r.premulTensor.defined())
      return at::mul(t, r.premulTensor).to(t.scalar_type()).contiguous();
    if (r.premul) return at::mul(t, *r.premul).to(t.scalar_type()).contiguous();
    return dense(t);
  };
  at::Tensor acc = scaled(tensors[0]);
  if (acc.is_same(tensors[0])) acc = acc.clone(at::MemoryFormat::Contiguous);
  const bool isBool = acc.scalar_type() == at::kBool;
  for (size_t i = 1; i < tensors.size(); ++i) {
    at::Tensor x = scaled(tensors[i]);
    switch (op.op_) {
      case c10d::ReduceOp::PRODUCT:
        isBool ? acc.logical_and_(x) : acc.mul_(x);
        break;
      case c10d::ReduceOp::MIN:
        at::minimum_out(acc, acc, x);
        break;
      case c10d::ReduceOp::MAX:
        at::maximum_out(acc, acc, x);
        break;
      case c10d::ReduceOp::BAND:
        acc.bitwise_and_(x);
        break;
      case c10d::ReduceOp::BOR:
        acc.bitwise_or_(x);
        break;
      case c10d::ReduceOp::BXOR:
        acc.bitwise_xor_(x);
        break;
      default:  // SUM, AVG, PREMUL_SUM (factor applied above)
        isBool ? acc.logical_or_(x) : acc.add_(x);
    }
  }
  return acc;
}

collie::Work orFail(collie::Result<collie::Work> result, const char* what, int rank) {
  if (!result.isOk()) {
    C10_THROW_ERROR(DistBackendError, prefix(what, rank) + result.status().toString());
  }
  return *result;
}

std::function<void()> copyBack(const at::Tensor& to, const at::Tensor& from) {
  if (to.is_same(from)) return {};
  return [to, from]() mutable { to.copy_(from); };
}

std::function<void()> inOrder(std::vector<std::function<void()>> steps) {
  if (steps.empty()) return {};
  return [steps = std::move(steps)] {
    for (const auto& step : steps) step();
  };
}

std::function<void()> copyToAll(c10::ArrayRef<at::Tensor> to, const at::Tensor& from) {
  std::vector<at::Tensor> targets;
  for (const at::Tensor& t : to) {
    if (!t.is_same(from)) targets.push_back(t);
  }
  if (targets.empty()) return {};
  return [targets = std::move(targets), from]() mutable {
    for (auto& t : targets) t.copy_(from.view(t.sizes()));
  };
}

at::Tensor bytesOf(const at::Tensor& t) { return dense(t).reshape({-1}).view(at::kByte); }

void copyBytesInto(at::Tensor& t, const at::Tensor& bytes) {
  at::Tensor target = t.is_contiguous() ? t : at::empty_like(t, at::MemoryFormat::Contiguous);
  target.reshape({-1}).view(at::kByte).copy_(bytes);
  if (!target.is_same(t)) t.copy_(target);
}

}  // namespace torch_collie
