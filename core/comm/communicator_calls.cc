// Communicator: argument checks and the public collective calls, each forwarding to
// the Impl (core/comm/communicator_impl.h). Creation (store, transport selection,
// connections) lives in communicator_create.cc, split/shrink in split.cc.
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "collie/communicator.h"
#include "core/comm/argument_checks.h"
#include "core/comm/communicator_impl.h"
#include "core/kernel/device_memory.h"
#include "core/memory/shared_region.h"

namespace collie {

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::~Communicator() {
  impl_->device.reset();
  impl_->staging.reset();
  impl_->engine.reset();
  dropSharedRanges(this);
  if (!impl_->cleanupFile.empty()) ::unlink(impl_->cleanupFile.c_str());
}

int Communicator::rank() const { return impl_->rank; }

int Communicator::size() const { return impl_->nranks; }

std::string Communicator::transportTo(int peer) const { return impl_->engine->transportTo(peer); }
int Communicator::localRank() const { return impl_->topology.localRank(); }
int Communicator::localSize() const { return impl_->topology.localSize(); }
int Communicator::hostCount() const { return impl_->topology.nhosts(); }
std::string Communicator::describeTopology(bool withHosts) const {
  return impl_->topology.describe(withHosts);
}

void Communicator::abort() {
  // The device path first: its waiting kernels end once the error word is set.
  if (impl_->device != nullptr) impl_->device->abort();
  impl_->engine->abort();
}

int Communicator::deviceOrdinal() const { return impl_->deviceOrdinal; }

Status Communicator::registerBuffer(const void* ptr, size_t bytes) {
  Status status = registerSharedRange(this, ptr, bytes);
  return status.isOk() ? status : status.withContext("rank " + std::to_string(impl_->rank));
}

Status Communicator::deregisterBuffer(const void* ptr) {
  Status status = deregisterSharedRange(this, ptr);
  return status.isOk() ? status : status.withContext("rank " + std::to_string(impl_->rank));
}

std::string Communicator::dumpFlightRecorder() const { return impl_->engine->dumpFlightRecorder(); }

Status Communicator::Impl::check(const char* what, const void* send, const void* recv, size_t count,
                                 DataType dtype, const ReduceOp* op, const int* root) const {
  // Built only on failure: check() is on every collective's path.
  auto prefix = [&] { return std::string(what) + " on rank " + std::to_string(rank) + ": "; };
  if (!isValid(dtype)) {
    return invalidArgument(prefix() + "unknown dtype " + std::to_string(static_cast<int>(dtype)));
  }
  if (op != nullptr && !isValid(*op)) {
    return invalidArgument(prefix() + "unknown reduction op " +
                           std::to_string(static_cast<int>(*op)));
  }
  if (op != nullptr && isBitwise(*op) && isFloating(dtype)) {
    return invalidArgument(prefix() + "reduction op " + std::string(reduceOpName(*op)) +
                           " needs an integer dtype, not " + std::string(dataTypeName(dtype)));
  }
  if (root != nullptr && (*root < 0 || *root >= nranks)) {
    return invalidArgument(prefix() + "root " + std::to_string(*root) + " is outside [0, " +
                           std::to_string(nranks) + ")");
  }
  if (count > 0 && send == nullptr && recv == nullptr) {
    return invalidArgument(prefix() + "buffers are null but count is " + std::to_string(count));
  }
  if (count > (SIZE_MAX / 8) / static_cast<size_t>(nranks)) {
    return invalidArgument(prefix() + "count " + std::to_string(count) + " is too large");
  }
  const bool sendOnDevice = isDeviceBuffer(send);
  const bool recvOnDevice = isDeviceBuffer(recv);
  if (count > 0 && send != nullptr && recv != nullptr && sendOnDevice != recvOnDevice) {
    return invalidArgument(prefix() + "send is " + (sendOnDevice ? "device" : "host") +
                           " memory but recv is " + (recvOnDevice ? "device" : "host") +
                           " memory; pass two device buffers or two host buffers");
  }
  // Without the device path a device pointer must never reach the host engine, which
  // would dereference it.
  if (count > 0 && (sendOnDevice || recvOnDevice) && device == nullptr && staging == nullptr) {
    return unsupported(prefix() +
                       "CUDA device buffers need the device path, which this communicator has "
                       "not got (no device runtime; see docs/cuda.md); pass host buffers (copy "
                       "with cudaMemcpy first)");
  }
  return Status();
}

Status Communicator::Impl::checkPeer(const char* what, int peer) const {
  auto prefix = [&] { return std::string(what) + " on rank " + std::to_string(rank) + ": peer "; };
  if (peer < 0 || peer >= nranks) {
    return invalidArgument(prefix() + std::to_string(peer) + " is outside [0, " +
                           std::to_string(nranks) + ")");
  }
  if (peer == rank) {
    return invalidArgument(prefix() + std::to_string(peer) +
                           " is this rank; copy the buffer instead of sending it to yourself");
  }
  return Status();
}

bool Communicator::Impl::isDeviceBuffer(const void* ptr) const {
  if (ptr == nullptr || !devicePointersPossible) return false;
  if (deviceRuntime != nullptr) return deviceRuntime->isDevicePointer(ptr);
  return isDeviceMemory(ptr);
}

bool Communicator::isDeviceBuffer(const void* ptr) const { return impl_->isDeviceBuffer(ptr); }

// A factor in device memory (ncclScalarDevice) read now into the scalar's bytes, for a
// collective that does not run as kernels (host buffers, or staged).
Status Communicator::Impl::readDeviceScalar(ReduceScalar* scalar, DataType dtype) const {
  const std::string what = "premulsum on rank " + std::to_string(rank) + ": ";
  if (deviceRuntime == nullptr) {
    return invalidArgument(what +
                           "the factor is in device memory but this communicator has "
                           "no device runtime");
  }
  const size_t bytes = dataTypeSize(dtype);
  if (!deviceRuntime->isDevicePointer(scalar->device)) {
    std::memcpy(scalar->bytes, scalar->device, bytes);  // host memory after all
  } else {
    Result<DeviceStream> stream = deviceRuntime->createStream();
    if (!stream.isOk()) return stream.status().withContext(what + "reading the factor");
    Status copied = deviceRuntime->memcpyAsync(scalar->bytes, scalar->device, bytes, *stream);
    Result<DeviceEvent> event =
        copied.isOk() ? deviceRuntime->recordEvent(*stream) : Result<DeviceEvent>(copied);
    const bool done =
        event.isOk() && waitForEvent(*deviceRuntime, *event,
                                     std::chrono::steady_clock::now() + engine->config().timeout);
    if (event.isOk()) deviceRuntime->destroyEvent(*event);
    deviceRuntime->destroyStream(*stream);
    if (!event.isOk()) return event.status().withContext(what + "reading the factor");
    if (!done) return timeoutError(what + "reading the factor from device memory timed out");
  }
  scalar->device = nullptr;
  return Status();
}

Result<Work> Communicator::Impl::submit(const CollectiveArgs& args, const void* send, void* recv,
                                        void* stream, std::optional<int64_t> p2pTag) {
  // (An all-to-all with a count per peer has its counts in the layout, not in count.)
  const bool moves = args.count > 0 || args.layout != nullptr;
  const bool onDevice = moves && (device != nullptr || staging != nullptr) &&
                        (isDeviceBuffer(send) || isDeviceBuffer(recv));
  const bool staged = isExchange(args.kind) || hasBlockCounts(args.kind);
  // Only the device path's multiply kernel reads a factor in device memory itself;
  // elsewhere it is read now, and the call goes on with the factor's bytes.
  const bool kernels = onDevice && device != nullptr && !staged;
  if (args.scalar.device != nullptr && !kernels) {
    CollectiveArgs resolved = args;
    COLLIE_RETURN_IF_ERROR(readDeviceScalar(&resolved.scalar, args.dtype));
    return submit(resolved, send, recv, stream, p2pTag);
  }
  if (onDevice) {
    if (isPointToPoint(args.kind)) {
      const bool isSend = args.kind == CollectiveKind::kSend;
      return devicePointToPoint({PointToPoint{isSend, isSend ? const_cast<void*>(send) : recv,
                                              args.count, args.dtype, args.peer, p2pTag}},
                                stream);
    }
    // The exchanges move their blocks as messages between the device windows; the kinds
    // with a count per rank have no device kernels: they are staged through host
    // memory, also where the device path runs the others.
    // Premulsum's multiply is a kernel of the device path (DeviceComm).
    if (device != nullptr && DeviceComm::movesAsMessages(args.kind)) {
      return device->submitExchange(args, send, recv, stream);
    }
    if (kernels) return device->submit(args, send, recv, stream);
    return staging->submit(args, send, recv, stream);
  }
  return engine->submit(args, send, recv, p2pTag);
}

namespace {
Status nullBuffer(const char* what, int rank, const char* which, size_t count) {
  return invalidArgument(std::string(what) + " on rank " + std::to_string(rank) + ": " + which +
                         " buffer is null but count is " + std::to_string(count));
}
}  // namespace

Status checkScalar(const char* what, int rank, ReduceOp op, const ReduceScalar& scalar) {
  if (op == ReduceOp::kPreMulSum && !scalar.present) {
    return invalidArgument(std::string(what) + " on rank " + std::to_string(rank) +
                           ": reduction op premulsum needs this rank's scalar factor (pass a "
                           "ReduceScalar: scalarOf or scalarFromBytes)");
  }
  if (op != ReduceOp::kPreMulSum && scalar.present) {
    return invalidArgument(std::string(what) + " on rank " + std::to_string(rank) +
                           ": a scalar factor was passed with reduction op " +
                           std::string(reduceOpName(op)) + "; only premulsum takes one");
  }
  return Status();
}

Result<Work> Communicator::allReduce(const void* send, void* recv, size_t count, DataType dtype,
                                     ReduceOp op, void* stream) {
  return allReduce(send, recv, count, dtype, op, ReduceScalar(), stream);
}

Result<Work> Communicator::reduceScatter(const void* send, void* recv, size_t recvCount,
                                         DataType dtype, ReduceOp op, void* stream) {
  return reduceScatter(send, recv, recvCount, dtype, op, ReduceScalar(), stream);
}

Result<Work> Communicator::reduce(const void* send, void* recv, size_t count, DataType dtype,
                                  ReduceOp op, int root, void* stream) {
  return reduce(send, recv, count, dtype, op, root, ReduceScalar(), stream);
}

Result<Work> Communicator::allReduce(const void* send, void* recv, size_t count, DataType dtype,
                                     ReduceOp op, const ReduceScalar& scalar, void* stream) {
  COLLIE_RETURN_IF_ERROR(impl_->check("allReduce", send, recv, count, dtype, &op, nullptr));
  COLLIE_RETURN_IF_ERROR(checkScalar("allReduce", impl_->rank, op, scalar));
  if (count > 0 && send == nullptr) return nullBuffer("allReduce", impl_->rank, "send", count);
  if (count > 0 && recv == nullptr) return nullBuffer("allReduce", impl_->rank, "recv", count);
  const size_t bytes = count * dataTypeSize(dtype);
  COLLIE_RETURN_IF_ERROR(checkOverlap("allReduce", impl_->rank, send, bytes, recv, bytes,
                                      send == recv, "send == recv"));
  return impl_->submit({.kind = CollectiveKind::kAllReduce,
                        .count = count,
                        .dtype = dtype,
                        .op = op,
                        .scalar = scalar},
                       send, recv, stream);
}

Result<Work> Communicator::reduceScatter(const void* send, void* recv, size_t recvCount,
                                         DataType dtype, ReduceOp op, const ReduceScalar& scalar,
                                         void* stream) {
  COLLIE_RETURN_IF_ERROR(impl_->check("reduceScatter", send, recv, recvCount, dtype, &op, nullptr));
  COLLIE_RETURN_IF_ERROR(checkScalar("reduceScatter", impl_->rank, op, scalar));
  if (recvCount > 0 && send == nullptr)
    return nullBuffer("reduceScatter", impl_->rank, "send", recvCount);
  if (recvCount > 0 && recv == nullptr)
    return nullBuffer("reduceScatter", impl_->rank, "recv", recvCount);
  const size_t block = recvCount * dataTypeSize(dtype);
  COLLIE_RETURN_IF_ERROR(checkOverlap("reduceScatter", impl_->rank, send, block * impl_->nranks,
                                      recv, block,
                                      recv == static_cast<const char*>(send) + block * impl_->rank,
                                      "recv == send + rank * recvCount"));
  return impl_->submit({.kind = CollectiveKind::kReduceScatter,
                        .count = recvCount,
                        .dtype = dtype,
                        .op = op,
                        .scalar = scalar},
                       send, recv, stream);
}

Result<Work> Communicator::allGather(const void* send, void* recv, size_t sendCount, DataType dtype,
                                     void* stream) {
  COLLIE_RETURN_IF_ERROR(impl_->check("allGather", send, recv, sendCount, dtype, nullptr, nullptr));
  if (sendCount > 0 && send == nullptr)
    return nullBuffer("allGather", impl_->rank, "send", sendCount);
  if (sendCount > 0 && recv == nullptr)
    return nullBuffer("allGather", impl_->rank, "recv", sendCount);
  const size_t block = sendCount * dataTypeSize(dtype);
  COLLIE_RETURN_IF_ERROR(checkOverlap("allGather", impl_->rank, send, block, recv,
                                      block * impl_->nranks,
                                      send == static_cast<const char*>(recv) + block * impl_->rank,
                                      "send == recv + rank * sendCount"));
  return impl_->submit({.kind = CollectiveKind::kAllGather, .count = sendCount, .dtype = dtype},
                       send, recv, stream);
}

Result<Work> Communicator::broadcast(const void* send, void* recv, size_t count, DataType dtype,
                                     int root, void* stream) {
  COLLIE_RETURN_IF_ERROR(impl_->check("broadcast", send, recv, count, dtype, nullptr, &root));
  if (count > 0 && impl_->rank == root && send == nullptr) {
    return nullBuffer("broadcast", impl_->rank, "send (root)", count);
  }
  if (count > 0 && recv == nullptr) return nullBuffer("broadcast", impl_->rank, "recv", count);
  if (impl_->rank == root) {  // send is read on the root only
    const size_t bytes = count * dataTypeSize(dtype);
    COLLIE_RETURN_IF_ERROR(checkOverlap("broadcast", impl_->rank, send, bytes, recv, bytes,
                                        send == recv, "send == recv"));
  }
  return impl_->submit(
      {.kind = CollectiveKind::kBroadcast, .count = count, .dtype = dtype, .root = root}, send,
      recv, stream);
}

Result<Work> Communicator::reduce(const void* send, void* recv, size_t count, DataType dtype,
                                  ReduceOp op, int root, const ReduceScalar& scalar, void* stream) {
  COLLIE_RETURN_IF_ERROR(impl_->check("reduce", send, recv, count, dtype, &op, &root));
  COLLIE_RETURN_IF_ERROR(checkScalar("reduce", impl_->rank, op, scalar));
  if (count > 0 && send == nullptr) return nullBuffer("reduce", impl_->rank, "send", count);
  if (count > 0 && impl_->rank == root && recv == nullptr) {
    return nullBuffer("reduce", impl_->rank, "recv (root)", count);
  }
  if (impl_->rank == root) {  // recv is written on the root only
    const size_t bytes = count * dataTypeSize(dtype);
    COLLIE_RETURN_IF_ERROR(checkOverlap("reduce", impl_->rank, send, bytes, recv, bytes,
                                        send == recv, "send == recv"));
  }
  return impl_->submit({.kind = CollectiveKind::kReduce,
                        .count = count,
                        .dtype = dtype,
                        .op = op,
                        .root = root,
                        .scalar = scalar},
                       send, recv, stream);
}

Result<Work> Communicator::Impl::pointToPoint(CollectiveKind kind, void* buf, size_t count,
                                              DataType dtype, int peer,
                                              std::optional<int64_t> tag) {
  const bool send = kind == CollectiveKind::kSend;
  const char* what = send ? "send" : "recv";
  COLLIE_RETURN_IF_ERROR(checkPeer(what, peer));
  COLLIE_RETURN_IF_ERROR(
      check(what, send ? buf : nullptr, send ? nullptr : buf, count, dtype, nullptr, nullptr));
  if (count > 0 && buf == nullptr) return nullBuffer(what, rank, what, count);
  CollectiveArgs args{.kind = kind, .count = count, .dtype = dtype, .peer = peer};
  COLLIE_RETURN_IF_ERROR(engine->checkTagUse(args, tag));
  return submit(args, send ? buf : nullptr, send ? nullptr : buf, nullptr, tag);
}

Result<Work> Communicator::send(const void* buf, size_t count, DataType dtype, int peer) {
  return impl_->pointToPoint(CollectiveKind::kSend, const_cast<void*>(buf), count, dtype, peer,
                             std::nullopt);
}

Result<Work> Communicator::recv(void* buf, size_t count, DataType dtype, int peer) {
  return impl_->pointToPoint(CollectiveKind::kRecv, buf, count, dtype, peer, std::nullopt);
}

Result<Work> Communicator::send(const void* buf, size_t count, DataType dtype, int peer,
                                int64_t tag) {
  return impl_->pointToPoint(CollectiveKind::kSend, const_cast<void*>(buf), count, dtype, peer,
                             tag);
}

Result<Work> Communicator::recv(void* buf, size_t count, DataType dtype, int peer, int64_t tag) {
  return impl_->pointToPoint(CollectiveKind::kRecv, buf, count, dtype, peer, tag);
}

Result<Work> Communicator::Impl::devicePointToPoint(const std::vector<PointToPoint>& ops,
                                                    void* stream) {
  for (const PointToPoint& op : ops) {
    const char* what = op.isSend ? "send (device buffers)" : "recv (device buffers)";
    auto prefix = [&] { return std::string(what) + " on rank " + std::to_string(rank) + ": "; };
    if (op.peer < 0 || op.peer >= nranks) {
      return invalidArgument(prefix() + "peer " + std::to_string(op.peer) + " is outside [0, " +
                             std::to_string(nranks) + ")");
    }
    COLLIE_RETURN_IF_ERROR(check(what, op.buffer, nullptr, op.count, op.dtype, nullptr, nullptr));
    if (op.count > 0 && !isDeviceBuffer(op.buffer)) {
      return invalidArgument(prefix() +
                             "a host buffer in a group of device buffers; a group's sends and "
                             "receives are all device memory or all host memory");
    }
    if (op.tag.has_value()) {
      return unsupported(prefix() +
                         "tagged point-to-point on device buffers is not implemented; "
                         "device sends and receives match in order");
    }
  }
  if (device == nullptr) {
    return unsupported("send/recv on rank " + std::to_string(rank) +
                       ": point-to-point on device buffers needs the device path between the "
                       "ranks' GPUs (every rank on one host, docs/cuda.md); pass host buffers");
  }
  return device->submitPointToPoint(ops, stream);
}

Result<Work> Communicator::sendRecv(const std::vector<PointToPoint>& ops, void* stream) {
  for (const PointToPoint& op : ops) {
    if (op.count > 0 && impl_->isDeviceBuffer(op.buffer)) {
      return impl_->devicePointToPoint(ops, stream);
    }
  }
  std::vector<Engine::GroupOp> group;
  group.reserve(ops.size());
  for (const PointToPoint& op : ops) {
    const char* what = op.isSend ? "send (group)" : "recv (group)";
    COLLIE_RETURN_IF_ERROR(impl_->checkPeer(what, op.peer));
    COLLIE_RETURN_IF_ERROR(
        impl_->check(what, op.buffer, nullptr, op.count, op.dtype, nullptr, nullptr));
    if (op.count > 0 && op.buffer == nullptr) {
      return invalidArgument(std::string(what) + " on rank " + std::to_string(impl_->rank) +
                             ": buffer is null but count is " + std::to_string(op.count));
    }
    Engine::GroupOp entry;
    entry.args.kind = op.isSend ? CollectiveKind::kSend : CollectiveKind::kRecv;
    entry.args.count = op.count;
    entry.args.dtype = op.dtype;
    entry.args.peer = op.peer;
    entry.input = op.isSend ? op.buffer : nullptr;
    entry.output = op.isSend ? nullptr : op.buffer;
    entry.tag = op.tag;
    group.push_back(entry);
  }
  for (const Engine::GroupOp& entry : group) {
    COLLIE_RETURN_IF_ERROR(impl_->engine->checkTagUse(entry.args, entry.tag));
  }
  return impl_->engine->submitGroup(group);
}

Result<double> Communicator::predictMicros(CollectiveKind kind, size_t count,
                                           DataType dtype) const {
  if (!isValid(dtype) ||
      static_cast<int>(kind) > static_cast<int>(CollectiveKind::kReduceScatterV)) {
    return invalidArgument("predictMicros on rank " + std::to_string(impl_->rank) +
                           ": unknown dtype " + std::to_string(static_cast<int>(dtype)) +
                           " or kind " + std::to_string(static_cast<int>(kind)));
  }
  CollectiveArgs args;
  args.kind = kind;
  args.count = count;
  args.dtype = dtype;
  return impl_->engine->predictMicros(args);
}

Status Communicator::asyncError() const {
  Status status = impl_->engine->failure();
  if (status.isOk() && impl_->device != nullptr) status = impl_->device->failure();
  return status;
}

Result<Work> Communicator::barrier() {
  return impl_->submit({.kind = CollectiveKind::kBarrier, .dtype = DataType::kUint8}, nullptr,
                       nullptr);
}

}  // namespace collie
