// CollieBackend's point-to-point calls: send, recv, recv from any source, coalesced
// batches of them (batch_isend_irecv) as one Communicator::sendRecv group, all matched by
// peer and tag (collie's tagged point-to-point, as gloo matches them), and
// all_to_all(_single) as one Communicator::allToAllV (the engine's all-to-all).
#include "backend.h"
#include "tensor_args.h"

namespace torch_collie {

std::vector<collie::Work> CollieBackend::sendRecv(const std::vector<collie::PointToPoint>& ops,
                                                  const char* what) {
  if (ops.empty()) return {};
  return {orFail(comm_->sendRecv(ops), what, rank_)};
}

c10::intrusive_ptr<c10d::Work> CollieBackend::pointToPoint(std::vector<at::Tensor>& tensors,
                                                           int peer, int tag, bool isSend,
                                                           const char* title) {
  const char* what = isSend ? "send" : "recv";
  checkSingle(tensors, what, rank_, "tensor list", true);
  if (peer < 0 || peer >= size_ || peer == rank_) {
    invalid(what, rank_,
            "invalid peer rank " + std::to_string(peer) + " (the group has " +
                std::to_string(size_) + " ranks; a rank cannot address itself)");
  }
  if (tensors[0].is_cuda()) return pointToPointDevice(tensors, peer, isSend, title);
  if (coalescing_ && !deferred_.empty() && deferred_[0].onDevice) {
    invalid(what, rank_, "a batch cannot mix CPU and CUDA tensors");
  }
  at::Tensor& t = tensors[0];
  at::Tensor buf = dense(t);
  std::function<void()> copyOut = isSend ? std::function<void()>() : copyBack(t, buf);
  // Every message of the backend is tagged (torch's default tag is 0): matched by peer and
  // tag, as gloo matches them, whatever order the receives of different tags are posted in.
  collie::PointToPoint op{isSend, buf.data_ptr(), buf.nbytes(), collie::DataType::kUint8, peer,
                          tag};
  const c10d::OpType type = isSend ? c10d::OpType::SEND : c10d::OpType::RECV;
  if (coalescing_) {
    // Held back until endCoalescing issues the whole batch as one group.
    auto work = c10::make_intrusive<CollieWork>(
        rank_, type, title, tensors, TensorLists{TensorList(tensors.begin(), tensors.end())},
        sequence_.load());
    if (!isSend) work->setSourceRank(peer);
    deferred_.push_back({op, work, buf, std::move(copyOut)});
    isSend ? announcer_.sent(peer, tag) : announcer_.received(peer, tag);
    return work;
  }
  Call call(type, title, what, tensors, {tensors});
  call.ops = {orFail(isSend ? comm_->send(op.buffer, op.count, op.dtype, peer, tag)
                            : comm_->recv(op.buffer, op.count, op.dtype, peer, tag),
                     what, rank_)};
  call.keepAlive = {buf};
  call.onSuccess = std::move(copyOut);
  call.collective = false;
  isSend ? announcer_.sent(peer, tag) : announcer_.received(peer, tag);
  auto work = submit(std::move(call));
  if (!isSend) static_cast<CollieWork*>(work.get())->setSourceRank(peer);
  return work;
}

c10::intrusive_ptr<c10d::Work> CollieBackend::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                   int tag) {
  return pointToPoint(tensors, dstRank, tag, true, "collie:send");
}

c10::intrusive_ptr<c10d::Work> CollieBackend::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                   int tag) {
  return pointToPoint(tensors, srcRank, tag, false, "collie:recv");
}

c10::intrusive_ptr<c10d::Work> CollieBackend::recvAnysource(std::vector<at::Tensor>& tensors,
                                                            int tag) {
  const char* what = "recv from any source";
  checkSingle(tensors, what, rank_);
  if (coalescing_) invalid(what, rank_, "a receive from any source cannot be coalesced");
  // Blocks until some rank has posted a send to this one (P2pAnnouncer).
  const int src = announcer_.pickSource(tag, options_->timeout);
  at::Tensor& t = tensors[0];
  at::Tensor buf = dense(t);
  Call call(c10d::OpType::RECVANYSOURCE, "collie:recvAnySource", what, tensors, {tensors});
  call.ops = {orFail(comm_->recv(buf.data_ptr(), buf.nbytes(), collie::DataType::kUint8, src, tag),
                     what, rank_)};
  call.keepAlive = {buf};
  call.onSuccess = copyBack(t, buf);
  call.collective = false;
  auto work = submit(std::move(call));
  static_cast<CollieWork*>(work.get())->setSourceRank(src);
  return work;
}

std::vector<collie::Work> CollieBackend::exchange(const at::Tensor& in,
                                                  const std::vector<at::Tensor>& sendParts,
                                                  const at::Tensor& out,
                                                  const std::vector<at::Tensor>& recvParts,
                                                  const char* what) {
  if (recvParts[rank_].nbytes() != sendParts[rank_].nbytes()) {
    invalid(what, rank_, "the part this rank keeps differs in size between input and output");
  }
  // Byte counts and offsets of each part in its contiguous buffer.
  auto layout = [](const at::Tensor& base, const std::vector<at::Tensor>& parts,
                   std::vector<size_t>* counts, std::vector<size_t>* offsets) {
    const auto* start = static_cast<const uint8_t*>(base.data_ptr());
    for (const at::Tensor& part : parts) {
      counts->push_back(part.nbytes());
      offsets->push_back(
          part.nbytes() == 0
              ? 0
              : static_cast<size_t>(static_cast<const uint8_t*>(part.data_ptr()) - start));
    }
  };
  std::vector<size_t> sendCounts, sendOffsets, recvCounts, recvOffsets;
  layout(in, sendParts, &sendCounts, &sendOffsets);
  layout(out, recvParts, &recvCounts, &recvOffsets);
  return {orFail(comm_->allToAllV(in.data_ptr(), sendCounts, sendOffsets, out.data_ptr(),
                                  recvCounts, recvOffsets, collie::DataType::kUint8),
                 what, rank_)};
}

c10::intrusive_ptr<c10d::Work> CollieBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                            std::vector<int64_t>& outputSplits,
                                                            std::vector<int64_t>& inputSplits,
                                                            const c10d::AllToAllOptions& opts) {
  const char* what = "alltoall_base";
  const bool onDevice = output.is_cuda() || input.is_cuda();  // checked by alltoallDevice
  if (!onDevice) {
    checkCpu(output, what, rank_);
    checkCpu(input, what, rank_);
  }
  if (output.scalar_type() != input.scalar_type()) {
    invalid(what, rank_, "input and output dtypes differ");
  }
  // As gloo and NCCL (and pytorch's tests of them): contiguous tensors only, a ValueError.
  for (const at::Tensor* t : {&input, &output}) {
    if (!t->is_contiguous(t->suggest_memory_format())) {
      C10_THROW_ERROR(ValueError, prefix(what, rank_) + "Tensors must be contiguous");
    }
  }
  // Rows of dim 0 per rank: equal shares without splits (pytorch's wording on errors).
  auto rowsOf = [](const at::Tensor& t) { return t.dim() == 0 ? int64_t{1} : t.size(0); };
  auto equalShare = [&](const at::Tensor& t) {
    if (rowsOf(t) % size_ != 0) {
      invalid(what, rank_, "Tensor's dim 0 does not divide equally across group size");
    }
    return rowsOf(t) / size_;
  };
  auto split = [&](const at::Tensor& t, const std::vector<int64_t>& sizes) {
    std::vector<at::Tensor> parts;
    const int64_t rows = rowsOf(t);
    if (sizes.empty()) {
      const int64_t share = equalShare(t);
      for (int p = 0; p < size_; ++p) parts.push_back(t.narrow(0, p * share, share));
      return parts;
    }
    if (static_cast<int>(sizes.size()) != size_) {
      invalid(what, rank_, "Number of tensor splits not equal to group size");
    }
    int64_t offset = 0;
    for (int64_t s : sizes) {
      if (s < 0 || offset + s > rows)
        invalid(what, rank_, "Split sizes doesn't match total dim 0 size");
      parts.push_back(t.narrow(0, offset, s));
      offset += s;
    }
    if (offset != rows) invalid(what, rank_, "Split sizes doesn't match total dim 0 size");
    return parts;
  };
  at::Tensor in = dense(input);
  at::Tensor out = dense(output);
  if (onDevice && in.numel() > 0 && out.numel() > 0 && in.data_ptr() == out.data_ptr()) {
    in = in.clone();  // collie runs all-to-all in place on host memory only
  }
  // Equal shares asked for (no splits): the all-to-all of one count, with the engine's
  // one-copy paths (the shm board, CMA) that one with a count per peer has not. A rank
  // that passes splits uses the latter: every rank of a call must do the same (a rank
  // passing no splits while another passes some fails as a mismatched collective).
  const bool equal = inputSplits.empty() && outputSplits.empty();
  std::vector<at::Tensor> sendParts, recvParts;
  if (equal) {
    equalShare(in);
    equalShare(out);
    if (in.nbytes() != out.nbytes()) {
      invalid(what, rank_, "input and output differ in size but no splits were given");
    }
  } else {
    sendParts = split(in, inputSplits);
    recvParts = split(out, outputSplits);
  }
  if (onDevice) return alltoallDevice(output, in, out, sendParts, recvParts, opts);
  Call call(c10d::OpType::ALLTOALL_BASE, "collie:all_to_all", what, {input}, {{output}},
            opts.timeout);
  if (equal) {
    call.ops = {orFail(comm_->allToAll(in.data_ptr(), out.data_ptr(), in.nbytes() / size_,
                                       collie::DataType::kUint8),
                       what, rank_)};
  } else {
    call.ops = exchange(in, sendParts, out, recvParts, what);
  }
  call.keepAlive = {in, out};
  call.onSuccess = copyBack(output, out);
  return submit(std::move(call));
}

c10::intrusive_ptr<c10d::Work> CollieBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllToAllOptions& opts) {
  const char* what = "alltoall";
  if (static_cast<int>(outputs.size()) != size_ || static_cast<int>(inputs.size()) != size_) {
    invalid(what, rank_, "expects world_size input and output tensors");
  }
  // The parts travel packed: every input's bytes in one buffer, every output's in another.
  std::vector<at::Tensor> inBytes;
  int64_t outTotal = 0;
  for (int p = 0; p < size_; ++p) {
    checkCpu(inputs[p], what, rank_);
    checkCpu(outputs[p], what, rank_);
    if (inputs[p].scalar_type() != outputs[p].scalar_type()) {
      invalid(what, rank_, "invalid tensor type at index " + std::to_string(p));
    }
    inBytes.push_back(bytesOf(inputs[p]));
    outTotal += static_cast<int64_t>(outputs[p].nbytes());
  }
  at::Tensor in = at::cat(inBytes);
  at::Tensor out = at::empty({outTotal}, at::kByte);
  std::vector<at::Tensor> sendParts, recvParts;
  int64_t inAt = 0, outAt = 0;
  for (int p = 0; p < size_; ++p) {
    sendParts.push_back(in.narrow(0, inAt, inBytes[p].numel()));
    inAt += inBytes[p].numel();
    recvParts.push_back(out.narrow(0, outAt, static_cast<int64_t>(outputs[p].nbytes())));
    outAt += static_cast<int64_t>(outputs[p].nbytes());
  }
  Call call(c10d::OpType::ALLTOALL, "collie:all_to_all", what, inputs, {outputs}, opts.timeout);
  call.ops = exchange(in, sendParts, out, recvParts, what);
  call.keepAlive = {in, out};
  call.onSuccess = [outputs, recvParts]() mutable {
    for (size_t p = 0; p < outputs.size(); ++p) copyBytesInto(outputs[p], recvParts[p]);
  };
  return submit(std::move(call));
}

}  // namespace torch_collie
