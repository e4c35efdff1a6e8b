// CollieBackend's data movement to and from every rank: broadcast (several tensors per
// rank), all_gather (several inputs per rank), all_gather into a tensor and its
// coalesced forms, gather and scatter (collie's gather and scatter). Data moves
// as bytes, so every dtype works.
#include "backend.h"
#include "tensor_args.h"

namespace torch_collie {

c10::intrusive_ptr<c10d::Work> CollieBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                        const c10d::BroadcastOptions& opts) {
  const char* what = "broadcast";
  checkRoot(opts.rootRank, size_, what, rank_);
  checkRootTensor(opts.rootTensor, tensors.size(), what, rank_);
  checkTypeAndSize(tensors, tensors[0], what, rank_, tensors.size() == 1);
  if (tensors.size() == 1 && tensors[0].is_cuda()) return broadcastDevice(tensors[0], opts);
  // The root's rootTensor goes to every tensor of every rank.
  const at::Tensor& source = tensors[opts.rootTensor];
  at::Tensor buf = dense(source);
  Call call(c10d::OpType::BROADCAST, "collie:broadcast", what, tensors, {tensors}, opts.timeout);
  call.ops = {orFail(comm_->broadcast(buf.data_ptr(), buf.data_ptr(), buf.nbytes(),
                                      collie::DataType::kUint8, static_cast<int>(opts.rootRank)),
                     what, rank_)};
  call.keepAlive = {buf};
  call.onSuccess = copyToAll(tensors, buf);
  return submit(std::move(call));
}

c10::intrusive_ptr<c10d::Work> CollieBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* what = "allgather";
  if (inputs.empty()) invalid(what, rank_, "requires non-empty input tensor list");
  if (inputs.size() != outputs.size()) {
    invalid(what, rank_, "requires input/output tensor lists to have the same length");
  }
  const size_t expected = inputs.size() * size_;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].size() != expected) {
      invalid(what, rank_,
              "invalid output tensor list at index " + std::to_string(i) + " (expected length " +
                  std::to_string(expected) + ", got " + std::to_string(outputs[i].size()) + ")");
    }
  }
  const bool oneInput = inputs.size() == 1;
  checkTypeAndSize(inputs, inputs[0], what, rank_, oneInput);
  for (const auto& list : outputs) checkTypeAndSize(list, inputs[0], what, rank_, oneInput);
  if (oneInput && inputs[0].is_cuda()) {
    at::Tensor none;
    return allgatherDevice(none, outputs[0], inputs[0], opts);
  }
  // Each rank's inputs in a row; every output list gets all of them, rank-major.
  std::vector<at::Tensor> parts;
  for (const auto& t : inputs) parts.push_back(bytesOf(t));
  at::Tensor in = parts.size() == 1 ? parts[0] : at::cat(parts);
  at::Tensor buf = at::empty({static_cast<int64_t>(size_) * in.numel()}, at::kByte);
  Call call(c10d::OpType::ALLGATHER, "collie:all_gather", what, inputs, outputs, opts.timeout);
  call.ops = {
      orFail(comm_->allGather(in.data_ptr(), buf.data_ptr(), in.numel(), collie::DataType::kUint8),
             what, rank_)};
  call.keepAlive = {in, buf};
  const int64_t n = parts[0].numel();
  call.onSuccess = [outputs, buf, n]() mutable {
    for (auto& list : outputs) {
      for (size_t i = 0; i < list.size(); ++i) {
        copyBytesInto(list[i], buf.narrow(0, static_cast<int64_t>(i) * n, n));
      }
    }
  };
  return submit(std::move(call));
}

c10::intrusive_ptr<c10d::Work> CollieBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                              const c10d::AllgatherOptions& opts) {
  if (output.is_cuda() || input.is_cuda()) return allgatherDevice(output, {}, input, opts);
  return allgatherIntoTensors(output, input, opts);
}

c10::intrusive_ptr<c10d::Work> CollieBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return allgatherIntoTensors(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> CollieBackend::allgatherIntoTensors(
    c10::ArrayRef<at::Tensor> outputs, c10::ArrayRef<at::Tensor> inputs,
    const c10d::AllgatherOptions& opts) {
  const char* what = "all_gather_into_tensor";
  checkScaledPairs(outputs, inputs, true, size_, what, rank_);
  Call call(outputs.size() == 1 ? c10d::OpType::_ALLGATHER_BASE
                                : c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED,
            "collie:all_gather_into_tensor", what, inputs, {outputs}, opts.timeout);
  std::vector<std::function<void()>> copies;
  for (size_t j = 0; j < outputs.size(); ++j) {
    at::Tensor in = dense(inputs[j]);
    at::Tensor out = dense(outputs[j]);
    call.ops.push_back(orFail(
        comm_->allGather(in.data_ptr(), out.data_ptr(), in.nbytes(), collie::DataType::kUint8),
        what, rank_));
    call.keepAlive.push_back(in);
    call.keepAlive.push_back(out);
    if (auto copy = copyBack(outputs[j], out)) copies.push_back(std::move(copy));
  }
  call.onSuccess = inOrder(std::move(copies));
  return submit(std::move(call));
}

c10::intrusive_ptr<c10d::Work> CollieBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* what = "allgather_coalesced";
  if (inputs.empty()) invalid(what, rank_, "requires non-empty input tensor list");
  if (static_cast<int>(outputLists.size()) != size_) {
    invalid(what, rank_, "output lists should be equal to world size");
  }
  for (const auto& t : inputs) checkCpu(t, what, rank_);
  for (const auto& list : outputLists) {
    if (list.size() != inputs.size()) {
      invalid(what, rank_,
              "invalid output size: (expected length " + std::to_string(inputs.size()) + ", got " +
                  std::to_string(list.size()) + ")");
    }
    for (size_t i = 0; i < list.size(); ++i) {
      checkCpu(list[i], what, rank_);
      if (list[i].sizes() != inputs[i].sizes()) {
        invalid(what, rank_,
                "invalid size of output tensor at index " + std::to_string(i) +
                    " (expected length " + c10::str(inputs[i].sizes()) + ", got " +
                    c10::str(list[i].sizes()) + ")");
      }
      if (list[i].scalar_type() != inputs[i].scalar_type()) {
        invalid(what, rank_,
                "invalid tensor type at index " + std::to_string(i) + " (expected " +
                    c10::toString(inputs[i].scalar_type()) + ", got " +
                    c10::toString(list[i].scalar_type()) + ")");
      }
    }
  }
  // Tensors of several dtypes travel as one byte buffer per rank.
  std::vector<at::Tensor> parts;
  for (const auto& t : inputs) parts.push_back(bytesOf(t));
  at::Tensor in = at::cat(parts);
  at::Tensor buf = at::empty({static_cast<int64_t>(size_) * in.numel()}, at::kByte);
  Call call(c10d::OpType::ALLGATHER_COALESCED, "collie:all_gather", what, inputs, outputLists,
            opts.timeout);
  call.ops = {
      orFail(comm_->allGather(in.data_ptr(), buf.data_ptr(), in.numel(), collie::DataType::kUint8),
             what, rank_)};
  call.keepAlive = {in, buf};
  call.onSuccess = [outputLists, buf, rowBytes = in.numel()]() mutable {
    for (size_t p = 0; p < outputLists.size(); ++p) {
      int64_t offset = static_cast<int64_t>(p) * rowBytes;
      for (auto& t : outputLists[p]) {
        const int64_t n = static_cast<int64_t>(t.nbytes());
        copyBytesInto(t, buf.narrow(0, offset, n));
        offset += n;
      }
    }
  };
  return submit(std::move(call));
}

c10::intrusive_ptr<c10d::Work> CollieBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::GatherOptions& opts) {
  const char* what = "gather";
  checkRoot(opts.rootRank, size_, what, rank_);
  checkSingle(inputs, what, rank_, "input tensor list");
  const int root = static_cast<int>(opts.rootRank);
  if (rank_ == root) {
    if (outputs.size() != 1) {
      invalid(what, rank_,
              "requires a single-element output list containing a list with " +
                  std::to_string(size_) + " tensors.");
    }
    if (static_cast<int>(outputs[0].size()) != size_) {
      invalid(what, rank_,
              "Incorrect output list size " + std::to_string(outputs[0].size()) +
                  ". Output list size should be " + std::to_string(size_) +
                  ", same as size of the process group.");
    }
    checkTypeAndSize(outputs[0], inputs[0], what, rank_);
  } else if (!outputs.empty()) {
    invalid(what, rank_, "requires empty output on non-root");
  }
  // Bytes, so that any dtype travels; the root gathers into one buffer, then copies
  // each rank's block into its output tensor.
  at::Tensor in = bytesOf(inputs[0]);
  const int64_t block = in.numel();
  at::Tensor all = rank_ == root ? at::empty({block * size_}, at::kByte) : at::Tensor();
  Call call(c10d::OpType::GATHER, "collie:gather", what, inputs, outputs, opts.timeout);
  call.ops = {orFail(comm_->gather(in.data_ptr(), rank_ == root ? all.data_ptr() : nullptr,
                                   static_cast<size_t>(block), collie::DataType::kUint8, root),
                     what, rank_)};
  call.keepAlive = {in};
  if (rank_ == root) {
    call.keepAlive.push_back(all);
    call.onSuccess = [outs = outputs[0], all, block]() mutable {
      for (size_t p = 0; p < outs.size(); ++p) {
        copyBytesInto(outs[p], all.narrow(0, static_cast<int64_t>(p) * block, block));
      }
    };
  }
  return submit(std::move(call));
}

c10::intrusive_ptr<c10d::Work> CollieBackend::scatter(std::vector<at::Tensor>& outputs,
                                                      std::vector<std::vector<at::Tensor>>& inputs,
                                                      const c10d::ScatterOptions& opts) {
  const char* what = "scatter";
  checkRoot(opts.rootRank, size_, what, rank_);
  checkSingle(outputs, what, rank_, "output tensor list");
  const int root = static_cast<int>(opts.rootRank);
  if (rank_ == root) {
    if (inputs.size() != 1) {
      invalid(what, rank_,
              "requires a single-element input list containing a list with " +
                  std::to_string(size_) + " tensors");
    }
    if (static_cast<int>(inputs[0].size()) != size_) {
      invalid(what, rank_,
              "Incorrect input list size " + std::to_string(inputs[0].size()) +
                  ". Input list size should be " + std::to_string(size_) +
                  ", same as size of the process group.");
    }
    checkTypeAndSize(inputs[0], outputs[0], what, rank_);
  } else if (!inputs.empty()) {
    invalid(what, rank_, "requires empty input on non-root");
  }
  // The root's parts travel packed as bytes; every rank receives its block into bytes.
  at::Tensor& out = outputs[0];
  at::Tensor mine = at::empty({static_cast<int64_t>(out.nbytes())}, at::kByte);
  at::Tensor all;
  if (rank_ == root) {
    std::vector<at::Tensor> parts;
    for (const at::Tensor& t : inputs[0]) parts.push_back(bytesOf(t));
    all = at::cat(parts);
  }
  Call call(c10d::OpType::SCATTER, "collie:scatter", what,
            inputs.empty() ? std::vector<at::Tensor>{} : inputs[0], {outputs}, opts.timeout);
  call.ops = {orFail(comm_->scatter(rank_ == root ? all.data_ptr() : nullptr, mine.data_ptr(),
                                    out.nbytes(), collie::DataType::kUint8, root),
                     what, rank_)};
  call.keepAlive = {mine};
  if (all.defined()) call.keepAlive.push_back(all);
  call.onSuccess = [out, mine]() mutable { copyBytesInto(out, mine); };
  return submit(std::move(call));
}

}  // namespace torch_collie
