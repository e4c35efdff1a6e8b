// CollieBackend's calls on CUDA tensors (backend.h says which): collie's device path on the
// current stream of the tensors' device, with no host wait. Everything a call does to
// the caller's tensors (a contiguous copy in, a copy back out, the parts of a list) is a
// torch operation on that same stream, enqueued at the call, so it is ordered with the
// collective and with the caller's later kernels exactly as the stream orders them. The
// Work's event is recorded after the last of them (work.h).
//
// Only the generic c10 device interfaces are used (c10::Stream, c10::Event and the
// device guard registry), so the extension neither links nor needs torch's CUDA
// libraries: with a torch without CUDA there are no CUDA tensors to reach this file.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "backend.h"
#include "tensor_args.h"

namespace torch_collie {

CollieBackend::DeviceStream CollieBackend::deviceStream(const std::vector<at::Tensor>& tensors,
                                                        const char* what) {
  if (!comm_) invalid(what, rank_, "the group was destroyed");
  const int ordinal = comm_->deviceOrdinal();
  for (const at::Tensor& t : tensors) {
    if (!t.is_cuda()) {
      invalid(what, rank_,
              "tensor is on " + t.device().str() +
                  " while the call's other tensors are CUDA tensors (one device per call)");
    }
    if (t.layout() != at::kStrided) {
      invalid(what, rank_, "unsupported layout (collie takes dense tensors here)");
    }
    if (ordinal < 0) {
      invalid(what, rank_,
              "CUDA tensors need collie's device path, and this group's communicator has "
              "none (collie was built without CUDA, or no CUDA device was current when the "
              "group was made)");
    }
    if (t.device().index() != ordinal) {
      invalid(what, rank_,
              "tensor is on " + t.device().str() +
                  ", but the group's communicator runs on cuda:" + std::to_string(ordinal) +
                  " (the device current when the group was made: call torch.cuda.set_device "
                  "before init_process_group or new_group)");
    }
    if (t.numel() > 0 && !comm_->isDeviceBuffer(t.data_ptr())) {
      invalid(what, rank_,
              "collie's device runtime does not see this tensor's memory as device memory of "
              "cuda:" +
                  std::to_string(ordinal));
    }
  }
  const c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(ordinal));
  const c10::impl::DeviceGuardImplInterface* impl =
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  const c10::Stream stream = impl->getStream(device);
  return DeviceStream{stream, impl->getStreamNativeHandle(stream)};
}

c10::intrusive_ptr<c10d::Work> CollieBackend::submitDevice(Call call, const DeviceStream& ds) {
  call.devices = {ds.stream.device()};
  call.deviceEvent = std::make_shared<c10::Event>(c10::DeviceType::CUDA);
  call.deviceEvent->record(ds.stream);
  // The Works of a coalesced batch's sends and receives wait like the batch's (a wait()
  // on one before endCoalescing waits on the host, as for CPU tensors).
  for (auto& follower : call.followers) follower->setDeviceEvent(call.deviceEvent);
  return submit(std::move(call));
}

c10::intrusive_ptr<c10d::Work> CollieBackend::allreduceDevice(at::Tensor& tensor,
                                                              const c10d::AllreduceOptions& opts) {
  const char* what = "allreduce";
  const DeviceStream ds = deviceStream({tensor}, what);
  at::Tensor view = asReal(tensor, opts.reduceOp, what, rank_);
  const Reduction r = reduction(view, opts.reduceOp, what, rank_);
  at::Tensor buf = prepared(view, r);  // a copy on the stream when view is strided
  Call call(c10d::OpType::ALLREDUCE, "collie:all_reduce", what, {tensor}, {{tensor}}, opts.timeout);
  call.ops = {orFail(comm_->allReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), r.dtype, r.op,
                                      r.scalar, ds.handle),
                     what, rank_)};
  if (!buf.is_same(view)) view.copy_(buf);
  call.keepAlive = {buf};
  return submitDevice(std::move(call), ds);
}

c10::intrusive_ptr<c10d::Work> CollieBackend::reduceDevice(at::Tensor& tensor,
                                                           const c10d::ReduceOptions& opts) {
  const char* what = "reduce";
  const DeviceStream ds = deviceStream({tensor}, what);
  at::Tensor view = asReal(tensor, opts.reduceOp, what, rank_);
  const Reduction r = reduction(view, opts.reduceOp, what, rank_);
  at::Tensor buf = prepared(view, r);
  const int root = static_cast<int>(opts.rootRank);
  Call call(c10d::OpType::REDUCE, "collie:reduce", what, {tensor}, {{tensor}}, opts.timeout);
  call.ops = {orFail(comm_->reduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), r.dtype, r.op, root,
                                   r.scalar, ds.handle),
                     what, rank_)};
  if (rank_ == root && !buf.is_same(view)) view.copy_(buf);
  call.keepAlive = {buf};
  return submitDevice(std::move(call), ds);
}

c10::intrusive_ptr<c10d::Work> CollieBackend::broadcastDevice(at::Tensor& tensor,
                                                              const c10d::BroadcastOptions& opts) {
  const char* what = "broadcast";
  const DeviceStream ds = deviceStream({tensor}, what);
  at::Tensor buf = dense(tensor);
  Call call(c10d::OpType::BROADCAST, "collie:broadcast", what, {tensor}, {{tensor}}, opts.timeout);
  call.ops = {
      orFail(comm_->broadcast(buf.data_ptr(), buf.data_ptr(), buf.nbytes(),
                              collie::DataType::kUint8, static_cast<int>(opts.rootRank), ds.handle),
             what, rank_)};
  if (!buf.is_same(tensor)) tensor.copy_(buf);
  call.keepAlive = {buf};
  return submitDevice(std::move(call), ds);
}

c10::intrusive_ptr<c10d::Work> CollieBackend::allgatherDevice(at::Tensor& output,
                                                              std::vector<at::Tensor> list,
                                                              at::Tensor& input,
                                                              const c10d::AllgatherOptions& opts) {
  const bool intoList = !list.empty();
  const char* what = intoList ? "allgather" : "all_gather_into_tensor";
  std::vector<at::Tensor> all = intoList ? list : std::vector<at::Tensor>{output};
  all.push_back(input);
  const DeviceStream ds = deviceStream(all, what);
  at::Tensor in = dense(input);
  at::Tensor out;
  if (intoList) {
    if (static_cast<int>(list.size()) != size_) {
      invalid(what, rank_,
              "requires world_size output tensors (got " + std::to_string(list.size()) + ")");
    }
    checkTypeAndSize(list, input, what, rank_, true);
    out = at::empty({static_cast<int64_t>(in.nbytes()) * size_}, in.options().dtype(at::kByte));
  } else {
    if (output.scalar_type() != input.scalar_type()) {
      invalid(what, rank_, "output tensor must have the same type as input tensor");
    }
    if (output.numel() != input.numel() * size_) {
      invalid(what, rank_,
              "output tensor size must be equal to world_size times input tensor size");
    }
    out = dense(output);
  }
  Call call(intoList ? c10d::OpType::ALLGATHER : c10d::OpType::_ALLGATHER_BASE, "collie:all_gather",
            what, {input}, {intoList ? list : std::vector<at::Tensor>{output}}, opts.timeout);
  call.ops = {orFail(comm_->allGather(in.data_ptr(), out.data_ptr(), in.nbytes(),
                                      collie::DataType::kUint8, ds.handle),
                     what, rank_)};
  if (intoList) {
    const int64_t bytes = static_cast<int64_t>(in.nbytes());
    for (int p = 0; p < size_; ++p) copyBytesInto(list[p], out.narrow(0, p * bytes, bytes));
  } else if (!out.is_same(output)) {
    output.copy_(out);
  }
  call.keepAlive = {in, out};
  return submitDevice(std::move(call), ds);
}

c10::intrusive_ptr<c10d::Work> CollieBackend::reduceScatterDevice(
    at::Tensor& output, std::vector<at::Tensor> list, at::Tensor& input,
    const c10d::ReduceScatterOptions& opts) {
  const bool fromList = !list.empty();
  const char* what = fromList ? "reduce_scatter" : "reduce_scatter_tensor";
  std::vector<at::Tensor> all = fromList ? list : std::vector<at::Tensor>{input};
  all.push_back(output);
  const DeviceStream ds = deviceStream(all, what);
  at::Tensor outView = asReal(output, opts.reduceOp, what, rank_);
  const Reduction r = reduction(outView, opts.reduceOp, what, rank_);
  at::Tensor in;
  if (fromList) {
    if (static_cast<int>(list.size()) != size_) {
      invalid(what, rank_,
              "requires world_size input tensors (got " + std::to_string(list.size()) + ")");
    }
    checkTypeAndSize(list, output, what, rank_, true);
    std::vector<at::Tensor> parts;
    for (const at::Tensor& t : list) parts.push_back(asReal(t, opts.reduceOp, what, rank_));
    in = at::stack(parts).contiguous();  // on the stream
  } else {
    if (output.scalar_type() != input.scalar_type()) {
      invalid(what, rank_, "input tensor must be the same type as the output tensor");
    }
    if (input.numel() != output.numel() * size_) {
      invalid(what, rank_, "input tensor must be the same size as output size times world size");
    }
    in = dense(asReal(input, opts.reduceOp, what, rank_));
  }
  at::Tensor out = dense(outView);
  Call call(fromList ? c10d::OpType::REDUCE_SCATTER : c10d::OpType::_REDUCE_SCATTER_BASE,
            "collie:reduce_scatter", what, fromList ? list : std::vector<at::Tensor>{input},
            {{output}}, opts.timeout);
  call.ops = {orFail(comm_->reduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), r.dtype, r.op,
                                          r.scalar, ds.handle),
                     what, rank_)};
  if (!out.is_same(outView)) outView.copy_(out);
  call.keepAlive = {in, out};
  return submitDevice(std::move(call), ds);
}

c10::intrusive_ptr<c10d::Work> CollieBackend::alltoallDevice(
    at::Tensor& output, at::Tensor& in, at::Tensor& out, const std::vector<at::Tensor>& sendParts,
    const std::vector<at::Tensor>& recvParts, const c10d::AllToAllOptions& opts) {
  const char* what = "alltoall_base";
  const DeviceStream ds = deviceStream({in, out, output}, what);
  Call call(c10d::OpType::ALLTOALL_BASE, "collie:all_to_all", what, {in}, {{output}}, opts.timeout);
  if (sendParts.empty()) {
    call.ops = {orFail(comm_->allToAll(in.data_ptr(), out.data_ptr(), in.nbytes() / size_,
                                       collie::DataType::kUint8, ds.handle),
                       what, rank_)};
  } else {
    // Uneven parts: one group of device sends and receives, a pair per peer (this rank's
    // own part is a device copy), as NCCL programs write it.
    if (recvParts[rank_].nbytes() != sendParts[rank_].nbytes()) {
      invalid(what, rank_, "the part this rank keeps differs in size between input and output");
    }
    std::vector<collie::PointToPoint> ops;
    for (int p = 0; p < size_; ++p) {
      ops.push_back({true, sendParts[p].data_ptr(), sendParts[p].nbytes(), collie::DataType::kUint8,
                     p, std::nullopt});
      ops.push_back({false, recvParts[p].data_ptr(), recvParts[p].nbytes(),
                     collie::DataType::kUint8, p, std::nullopt});
    }
    call.ops = {orFail(comm_->sendRecv(ops, ds.handle), what, rank_)};
  }
  if (!out.is_same(output)) output.copy_(out);
  call.keepAlive = {in, out};
  return submitDevice(std::move(call), ds);
}

c10::intrusive_ptr<c10d::Work> CollieBackend::pointToPointDevice(std::vector<at::Tensor>& tensors,
                                                                 int peer, bool isSend,
                                                                 const char* title) {
  const char* what = isSend ? "send" : "recv";
  at::Tensor& t = tensors[0];
  const DeviceStream ds = deviceStream({t}, what);
  at::Tensor buf = dense(t);
  // Untagged, matched by order per peer (NCCL's semantics; the device path has no tags).
  collie::PointToPoint op{isSend, buf.data_ptr(), buf.nbytes(), collie::DataType::kUint8,
                          peer,   std::nullopt};
  const c10d::OpType type = isSend ? c10d::OpType::SEND : c10d::OpType::RECV;
  std::function<void()> copyOut;
  if (!isSend && !buf.is_same(t)) copyOut = [t, buf]() mutable { t.copy_(buf); };
  if (coalescing_) {
    if (!deferred_.empty() && !deferred_[0].onDevice) {
      invalid(what, rank_, "a batch cannot mix CPU and CUDA tensors");
    }
    auto work = c10::make_intrusive<CollieWork>(
        rank_, type, title, tensors, TensorLists{TensorList(tensors.begin(), tensors.end())},
        sequence_.load(), std::vector<c10::Device>{ds.stream.device()});
    if (!isSend) work->setSourceRank(peer);
    deferred_.push_back({op, work, buf, std::move(copyOut), true});
    return work;
  }
  Call call(type, title, what, tensors, {tensors});
  call.ops = {orFail(comm_->sendRecv({op}, ds.handle), what, rank_)};
  if (copyOut) copyOut();  // on the stream, after the receive
  call.keepAlive = {buf};
  call.collective = false;
  auto work = submitDevice(std::move(call), ds);
  if (!isSend) static_cast<CollieWork*>(work.get())->setSourceRank(peer);
  return work;
}

c10::intrusive_ptr<c10d::Work> CollieBackend::endCoalescingDevice(std::vector<Deferred> batch) {
  const char* what = "coalesced send/recv";
  std::vector<collie::PointToPoint> ops;
  std::vector<at::Tensor> keep;
  std::vector<c10::intrusive_ptr<CollieWork>> followers;
  for (const Deferred& d : batch) {
    if (!d.onDevice) invalid(what, rank_, "a batch cannot mix CPU and CUDA tensors");
    ops.push_back(d.op);
    keep.push_back(d.buffer);
  }
  const DeviceStream ds = deviceStream(keep, what);
  Call call(c10d::OpType::COALESCED, "collie:coalesced", what, {}, {});
  call.ops = {orFail(comm_->sendRecv(ops, ds.handle), what, rank_)};
  for (Deferred& d : batch) {
    if (d.copyOut) d.copyOut();  // on the stream, after the group
    followers.push_back(d.work);
  }
  call.keepAlive = keep;
  call.collective = false;
  call.followers = std::move(followers);
  return submitDevice(std::move(call), ds);
}

}  // namespace torch_collie
