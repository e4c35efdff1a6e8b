// CollieBackend's reductions: all_reduce (dense, several tensors per rank, sparse),
// all_reduce_coalesced, reduce, reduce_scatter (lists, uneven parts), reduce_scatter
// into a tensor and its coalesced form.
#include <c10/util/Exception.h>

#include <atomic>

#include "backend.h"
#include "tensor_args.h"

namespace torch_collie {

namespace {

std::atomic<uint64_t> gRegisteredAllreduces{0};

// Sparse all-reduce metadata per rank: sparse dims, dense dims, nnz, then the sizes.
constexpr int64_t kMaxDims = 8;
constexpr int64_t kMetaLength = 3 + kMaxDims;

}  // namespace

uint64_t CollieBackend::registeredAllreduces() {
  return gRegisteredAllreduces.load(std::memory_order_relaxed);
}

bool CollieBackend::registerPoolBlock(const at::Tensor& buf) {
  std::optional<SharedBlock> block = SharedPool::instance().find(buf.data_ptr(), buf.nbytes());
  if (!block) return false;
  std::lock_guard<std::mutex> lock(registeredMutex_);
  if (registeredBlocks_.count(block->id) != 0) return true;
  // Ids are never reused, and freeShared drops the registration of a block the pool
  // gives back to the system, so a remembered id is registered for as long as it lives.
  if (!comm_->registerBuffer(block->base, block->bytes).isOk()) return false;
  registeredBlocks_.insert(block->id);
  return true;
}

c10::intrusive_ptr<c10d::Work> CollieBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  const char* what = "allreduce";
  if (tensors.empty()) invalid(what, rank_, "requires non-empty tensor list");
  for (size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i].layout() != tensors[0].layout()) {
      invalid(what, rank_, "invalid tensor layout at index " + std::to_string(i));
    }
  }
  if (tensors[0].is_sparse()) return allreduceSparse(tensors, opts);
  if (tensors.size() == 1 && tensors[0].is_cuda()) return allreduceDevice(tensors[0], opts);
  return allreduceDense(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> CollieBackend::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                               const c10d::AllreduceOptions& opts) {
  return allreduce(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> CollieBackend::allreduceDense(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  const char* what = "allreduce";
  checkNonEmpty(tensors, what, rank_);
  TensorList views;
  for (const auto& t : tensors) views.push_back(asReal(t, opts.reduceOp, what, rank_));
  checkTypeAndSize(views, views[0], what, rank_);
  Reduction r = reduction(views[0], opts.reduceOp, what, rank_);
  Call call(c10d::OpType::ALLREDUCE, "collie:all_reduce", what, tensors, {tensors}, opts.timeout);
  at::Tensor buf;
  if (views.size() == 1) {
    const at::Tensor& t = views[0];
    buf = prepared(t, r);
    // Shared memory on every rank alike: collie's shm transport all-reduces it in one
    // pass with no copies. A pool block (shared CPU allocator) is registered once and
    // stays registered; an empty_shared tensor is registered for this call.
    if (buf.nbytes() > 0 && registerPoolBlock(buf)) {
      gRegisteredAllreduces.fetch_add(1, std::memory_order_relaxed);
    } else if (buf.is_same(t) && buf.nbytes() > 0 && isShared(buf) &&
               comm_->registerBuffer(buf.data_ptr(), buf.nbytes()).isOk()) {
      gRegisteredAllreduces.fetch_add(1, std::memory_order_relaxed);
      call.cleanup = [comm = std::weak_ptr<collie::Communicator>(comm_), ptr = buf.data_ptr()] {
        if (auto alive = comm.lock()) (void)alive->deregisterBuffer(ptr);
      };
    }
    call.onSuccess = copyBack(t, buf);
  } else {
    // Several tensors per rank (gloo's multi-input all-reduce): combined here, reduced
    // across ranks, the result written to every tensor. AVG averages all of them.
    buf = combineLocal(views, opts.reduceOp, r);
    if (r.op == collie::ReduceOp::kPreMulSum) {  // combineLocal applied the factor
      r.op = collie::ReduceOp::kSum;
      r.scalar = collie::ReduceScalar();
    }
    auto copies = copyToAll(views, buf);
    if (opts.reduceOp.op_ == c10d::ReduceOp::AVG) {
      const int64_t k = static_cast<int64_t>(views.size());
      call.onSuccess = [buf, copies, k]() mutable {
        at::isFloatingType(buf.scalar_type()) ? buf.div_(k) : buf.div_(k, "trunc");
        if (copies) copies();
      };
    } else {
      call.onSuccess = copies;
    }
  }
  auto issued =
      comm_->allReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), r.dtype, r.op, r.scalar);
  if (!issued.isOk() && call.cleanup) call.cleanup();
  call.ops = {orFail(std::move(issued), what, rank_)};
  call.keepAlive = {buf};
  return submit(std::move(call));
}

void CollieBackend::allreduceNow(at::Tensor& tensor, const c10d::ReduceOp& op) {
  const char* what = "all_reduce_";
  if (!comm_) invalid(what, rank_, "the group was destroyed");
  checkCpu(tensor, what, rank_);
  if (tensor.is_sparse()) invalid(what, rank_, "takes dense tensors (use dist.all_reduce)");
  at::Tensor view = asReal(tensor, op, what, rank_);
  Reduction r = reduction(view, op, what, rank_);
  at::Tensor buf = prepared(view, r);
  collie::Work work =
      orFail(comm_->allReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), r.dtype, r.op, r.scalar),
             what, rank_);
  sequence_.fetch_add(1);  // issued: a collective of the group, as the ones through torch
  // collie bounds the operation by the communicator's deadline; a group timeout set with
  // setTimeout bounds it too, as it bounds every other call.
  const std::chrono::milliseconds timeout(defaultCallTimeoutMs_.load());
  collie::Status status = timeout.count() > 0 ? work.wait(timeout) : work.wait();
  if (!work.test()) {
    hooks_.failing(c10d::ErrorType::TIMEOUT);  // before the abort: a dump sees it pending
    comm_->abort();
    (void)work.wait();  // the abort ends it at once
    std::rethrow_exception(operationTimedOut(what, rank_, timeout, "the group's timeout"));
  }
  if (!status.isOk()) {
    hooks_.failing(BackendHooks::kindOf(status));
    std::rethrow_exception(operationFailed(what, rank_, status));
  }
  if (!buf.is_same(view)) view.copy_(buf);
}

// As gloo: the inputs of this rank summed and coalesced, every rank's nnz and sizes
// gathered (on the calling thread: the data exchange needs them), then indices and
// values exchanged in one sendRecv group and summed into each input.
c10::intrusive_ptr<c10d::Work> CollieBackend::allreduceSparse(std::vector<at::Tensor>& tensors,
                                                              const c10d::AllreduceOptions& opts) {
  const char* what = "allreduce (sparse)";
  if (opts.reduceOp.op_ != c10d::ReduceOp::SUM) {
    invalid(what, rank_,
            "unsupported reduction operation (allreduce of sparse tensors only works with "
            "ReduceOp.SUM)");
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (!t.device().is_cpu()) invalid(what, rank_, "the collie backend takes CPU tensors");
    if (t.scalar_type() != tensors[0].scalar_type()) {
      invalid(what, rank_, "invalid tensor type at index " + std::to_string(i));
    }
    if (t.sizes() != tensors[0].sizes()) {
      invalid(what, rank_, "invalid tensor size at index " + std::to_string(i));
    }
  }
  if (tensors[0].dim() > kMaxDims) {
    invalid(what, rank_, "sparse tensors of more than 8 dimensions are not supported");
  }
  at::Tensor input = tensors[0];
  for (size_t i = 1; i < tensors.size(); ++i) input = input + tensors[i];
  input = input.coalesce();

  at::Tensor meta = at::full({kMetaLength}, -1, at::kLong);
  meta[0] = input.sparse_dim();
  meta[1] = input.dense_dim();
  meta[2] = input._nnz();
  for (int64_t d = 0; d < input.dim(); ++d) meta[3 + d] = input.size(d);
  at::Tensor metas = at::empty({size_, kMetaLength}, at::kLong);
  auto gathered = orFail(
      comm_->allGather(meta.data_ptr(), metas.data_ptr(), kMetaLength, collie::DataType::kInt64),
      what, rank_);
  if (collie::Status s = gathered.wait(); !s.isOk()) {
    C10_THROW_ERROR(DistBackendError, prefix(what, rank_) + s.toString());
  }
  for (int p = 0; p < size_; ++p) {
    if (!at::equal(metas[p].narrow(0, 0, 2), meta.narrow(0, 0, 2)) ||
        !at::equal(metas[p].narrow(0, 3, kMaxDims), meta.narrow(0, 3, kMaxDims))) {
      invalid(what, rank_, "Sparse dimensions do not match (rank " + std::to_string(p) + ")");
    }
  }
  const int64_t sparseDim = input.sparse_dim();
  const auto valueShape = input.sizes().slice(sparseDim);
  at::Tensor myIndices = input._indices().contiguous();
  at::Tensor myValues = input._values().contiguous();
  std::vector<at::Tensor> indices(size_), values(size_);
  std::vector<collie::PointToPoint> ops;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) {
      indices[p] = myIndices;
      values[p] = myValues;
      continue;
    }
    const int64_t nnz = metas[p][2].item<int64_t>();
    std::vector<int64_t> shape{nnz};
    shape.insert(shape.end(), valueShape.begin(), valueShape.end());
    indices[p] = at::empty({sparseDim, nnz}, at::kLong);
    values[p] = at::empty(shape, myValues.options());
    // Tagged like every point-to-point message of the backend (a pair of ranks uses one
    // kind), with a tag no torch call can give (torch's tags are 32-bit).
    const int64_t tag = kSparseExchangeTag;
    const auto bytes = collie::DataType::kUint8;
    ops.push_back({true, myIndices.data_ptr(), myIndices.nbytes(), bytes, p, tag});
    ops.push_back({true, myValues.data_ptr(), myValues.nbytes(), bytes, p, tag});
    ops.push_back({false, indices[p].data_ptr(), indices[p].nbytes(), bytes, p, tag});
    ops.push_back({false, values[p].data_ptr(), values[p].nbytes(), bytes, p, tag});
  }
  Call call(c10d::OpType::_ALLREDUCE_SPARSE, "collie:sparse_all_reduce", what, tensors, {tensors},
            opts.timeout);
  call.ops = sendRecv(ops, what);
  call.keepAlive = indices;
  call.keepAlive.insert(call.keepAlive.end(), values.begin(), values.end());
  call.onSuccess = [outs = tensors, indices, values, sizes = input.sizes().vec(),
                    options = input.options()]() mutable {
    at::Tensor sum = at::sparse_coo_tensor(indices[0], values[0], sizes, options);
    for (size_t p = 1; p < indices.size(); ++p) {
      sum = sum + at::sparse_coo_tensor(indices[p], values[p], sizes, options);
    }
    sum = sum.coalesce();
    for (auto& t : outs) t.copy_(sum);
  };
  return submit(std::move(call));
}

c10::intrusive_ptr<c10d::Work> CollieBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const char* what = "allreduce_coalesced";
  if (tensors.empty()) invalid(what, rank_, "requires non-empty tensor list");
  for (size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i].layout() != tensors[0].layout()) {
      invalid(what, rank_, "invalid tensor layout at index " + std::to_string(i));
    }
  }
  for (const auto& t : tensors) {
    if (t.scalar_type() != tensors[0].scalar_type()) {
      invalid(what, rank_, "tensors must all have the same type");
    }
  }
  if (tensors[0].layout() != at::kStrided) invalid(what, rank_, "unsupported layout");
  for (const auto& t : tensors) checkCpu(t, what, rank_);
  std::vector<at::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(asReal(t, opts.reduceOp, what, rank_).reshape({-1}));
  Reduction r = reduction(flat[0], opts.reduceOp, what, rank_);
  at::Tensor buf = prepared(at::cat(flat), r);
  Call call(c10d::OpType::ALLREDUCE_COALESCED, "collie:all_reduce_coalesced", what, tensors,
            {tensors}, opts.timeout);
  call.ops = {
      orFail(comm_->allReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), r.dtype, r.op, r.scalar),
             what, rank_)};
  call.keepAlive = {buf};
  call.onSuccess = [outs = tensors, buf, reduceOp = opts.reduceOp, what, rank = rank_]() mutable {
    int64_t offset = 0;
    for (auto& t : outs) {
      at::Tensor view = asReal(t, reduceOp, what, rank);
      view.copy_(buf.narrow(0, offset, view.numel()).view(view.sizes()));
      offset += view.numel();
    }
  };
  return submit(std::move(call));
}

c10::intrusive_ptr<c10d::Work> CollieBackend::reduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::ReduceOptions& opts) {
  const char* what = "reduce";
  checkRoot(opts.rootRank, size_, what, rank_);
  checkRootTensor(opts.rootTensor, tensors.size(), what, rank_);
  checkSingle(tensors, what, rank_, "tensor list", true);
  if (tensors[0].is_cuda()) return reduceDevice(tensors[0], opts);
  at::Tensor t = asReal(tensors[0], opts.reduceOp, what, rank_);
  Reduction r = reduction(t, opts.reduceOp, what, rank_);
  at::Tensor buf = prepared(t, r);
  const int root = static_cast<int>(opts.rootRank);
  Call call(c10d::OpType::REDUCE, "collie:reduce", what, tensors, {tensors}, opts.timeout);
  call.ops = {orFail(
      comm_->reduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), r.dtype, r.op, root, r.scalar),
      what, rank_)};
  call.keepAlive = {buf};
  if (rank_ == root) call.onSuccess = copyBack(t, buf);
  return submit(std::move(call));
}

c10::intrusive_ptr<c10d::Work> CollieBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* what = "reduce_scatter";
  if (outputs.size() == 1 && inputs.size() == 1 && outputs[0].is_cuda()) {
    at::Tensor none;
    return reduceScatterDevice(outputs[0], inputs[0], none, opts);
  }
  checkNonEmpty(outputs, what, rank_);
  if (inputs.size() != outputs.size()) {
    invalid(what, rank_, "requires input/output tensor lists to have the same length");
  }
  Call call(c10d::OpType::REDUCE_SCATTER, "collie:reduce_scatter", what, {}, {outputs},
            opts.timeout);
  std::vector<std::function<void()>> copies;
  for (size_t j = 0; j < outputs.size(); ++j) {
    if (static_cast<int>(inputs[j].size()) != size_) {
      invalid(what, rank_,
              "invalid input tensor list at index " + std::to_string(j) + " (expected length " +
                  std::to_string(size_) + ", got " + std::to_string(inputs[j].size()) + ")");
    }
    at::Tensor out = asReal(outputs[j], opts.reduceOp, what, rank_);
    Reduction r = reduction(out, opts.reduceOp, what, rank_);
    std::vector<at::Tensor> flat;
    bool even = true;
    for (int p = 0; p < size_; ++p) {
      const at::Tensor& in = inputs[j][p];
      checkCpu(in, what, rank_);
      if (in.scalar_type() != outputs[j].scalar_type()) {
        invalid(what, rank_, "invalid tensor type at index " + std::to_string(p));
      }
      call.inputs.push_back(in);
      flat.push_back(prepared(asReal(in, opts.reduceOp, what, rank_), r).reshape({-1}));
      even = even && flat.back().numel() == out.numel();
    }
    if (flat[rank_].numel() != out.numel()) {
      invalid(what, rank_, "invalid tensor size: the output does not match this rank's input");
    }
    at::Tensor in = at::cat(flat);
    at::Tensor res;
    if (even) {
      res = dense(out);
      call.ops.push_back(orFail(
          comm_->reduceScatter(in.data_ptr(), res.data_ptr(), res.numel(), r.dtype, r.op, r.scalar),
          what, rank_));
    } else {
      // Parts of different sizes: collie's reduce-scatter with a count per rank (the
      // sizes are the same on every rank, as torch's contract has them).
      std::vector<size_t> counts;
      for (const at::Tensor& part : flat) counts.push_back(static_cast<size_t>(part.numel()));
      res = dense(out);
      call.ops.push_back(orFail(
          comm_->reduceScatterV(in.data_ptr(), res.data_ptr(), counts, r.dtype, r.op, r.scalar),
          what, rank_));
    }
    call.keepAlive.push_back(in);
    call.keepAlive.push_back(res);
    copies.push_back([out, res]() mutable {
      if (!out.is_same(res)) out.copy_(res.view(out.sizes()));
    });
  }
  call.onSuccess = inOrder(std::move(copies));
  return submit(std::move(call));
}

c10::intrusive_ptr<c10d::Work> CollieBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  if (output.is_cuda() || input.is_cuda()) return reduceScatterDevice(output, {}, input, opts);
  return reduceScatterTensors(output, input, opts);
}

c10::intrusive_ptr<c10d::Work> CollieBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return reduceScatterTensors(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> CollieBackend::reduceScatterTensors(
    c10::ArrayRef<at::Tensor> outputs, c10::ArrayRef<at::Tensor> inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* what = "reduce_scatter_tensor";
  checkScaledPairs(outputs, inputs, false, size_, what, rank_);
  Call call(outputs.size() == 1 ? c10d::OpType::_REDUCE_SCATTER_BASE
                                : c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED,
            "collie:reduce_scatter_tensor", what, inputs, {outputs}, opts.timeout);
  std::vector<std::function<void()>> copies;
  for (size_t j = 0; j < outputs.size(); ++j) {
    at::Tensor out = asReal(outputs[j], opts.reduceOp, what, rank_);
    Reduction r = reduction(out, opts.reduceOp, what, rank_);
    at::Tensor in = prepared(asReal(inputs[j], opts.reduceOp, what, rank_), r);
    at::Tensor res = dense(out);
    call.ops.push_back(orFail(
        comm_->reduceScatter(in.data_ptr(), res.data_ptr(), res.numel(), r.dtype, r.op, r.scalar),
        what, rank_));
    call.keepAlive.push_back(in);
    call.keepAlive.push_back(res);
    if (auto copy = copyBack(out, res)) copies.push_back(std::move(copy));
  }
  call.onSuccess = inOrder(std::move(copies));
  return submit(std::move(call));
}

}  // namespace torch_collie
