// The NCCL-compatible API, part 2: collectives, point-to-point, groups and
// pre-multiplied sums.
//
// Outside a group a call on host buffers issues its collective and waits for it; a
// call on device buffers returns once its kernels are enqueued on `stream` (errors
// then surface through ncclCommGetAsyncError). ncclGroupEnd waits for every call of
// the group, device ones included. Inside a group the
// calls are recorded; ncclGroupEnd first waits for the inits of the group, then
// issues every recorded call in order, per communicator (each communicator from a
// thread of its own when the group spans several), merging each run of
// consecutive sends and receives into one Communicator::sendRecv (all posted before
// any is waited for: no deadlock whatever the sizes), and waits for all of them.
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "core/api/nccl/nccl_internal.h"
#include "core/log/log.h"

namespace collie::nccl {
namespace {

enum class OpKind {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kSend,
  kRecv,
  kAllToAll,
  kGather,
  kScatter,
};

struct Call {
  OpKind kind = OpKind::kAllReduce;
  ncclComm* comm = nullptr;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;  // set by prepare()
  ReduceOp op = ReduceOp::kSum;         // set by prepare()
  int root = 0;                         // broadcast, reduce, gather, scatter
  int peer = -1;                        // send, recv
  ReduceScalar scalar;                  // PreMulSum ops: this rank's factor
  void* stream = nullptr;               // cudaStream_t: device buffers only
};

struct GroupState {
  int depth = 0;
  std::vector<Call> calls;
  std::vector<ncclComm*> inits;
  ncclResult_t firstError = ncclSuccess;
};
thread_local GroupState group;

bool isP2P(OpKind kind) { return kind == OpKind::kSend || kind == OpKind::kRecv; }

// A collective's call; `root` is read by broadcast, reduce, gather and scatter only.
Call collectiveCall(OpKind kind, ncclComm* comm, const void* send, void* recv, size_t count,
                    void* stream, int root = 0) {
  return Call{.kind = kind,
              .comm = comm,
              .send = send,
              .recv = recv,
              .count = count,
              .root = root,
              .scalar = {},
              .stream = stream};
}

// A send's call (`recv` null) or a receive's (`send` null), to or from `peer`.
Call pointToPointCall(OpKind kind, ncclComm* comm, const void* send, void* recv, size_t count,
                      int peer, void* stream) {
  return Call{.kind = kind,
              .comm = comm,
              .send = send,
              .recv = recv,
              .count = count,
              .peer = peer,
              .scalar = {},
              .stream = stream};
}

const char* nameOf(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "ncclAllReduce";
    case OpKind::kBroadcast:
      return "ncclBroadcast";
    case OpKind::kReduce:
      return "ncclReduce";
    case OpKind::kAllGather:
      return "ncclAllGather";
    case OpKind::kReduceScatter:
      return "ncclReduceScatter";
    case OpKind::kSend:
      return "ncclSend";
    case OpKind::kRecv:
      return "ncclRecv";
    case OpKind::kAllToAll:
      return "ncclAlltoAll";
    case OpKind::kGather:
      return "ncclGather";
    case OpKind::kScatter:
      return "ncclScatter";
  }
  return "nccl";
}

// Checks what NCCL checks before enqueueing (the handle is live: submit checked it) and
// resolves PreMulSum operators.
ncclResult_t prepare(Call* call, ncclDataType_t datatype, ncclRedOp_t op, bool hasOp) {
  if (static_cast<int>(datatype) < 0 || static_cast<int>(datatype) >= kNumDataTypes) {
    return invalidArgumentResult(std::string(nameOf(call->kind)) + ": datatype " +
                                 std::to_string(static_cast<int>(datatype)) +
                                 (datatype == ncclFloat8e4m3 || datatype == ncclFloat8e5m2
                                      ? " (fp8) is not supported by collie"
                                      : " is not an ncclDataType_t"));
  }
  call->dtype = static_cast<DataType>(datatype);
  call->op = ReduceOp::kSum;
  if (!hasOp) return ncclSuccess;
  if (static_cast<int>(op) >= 0 && static_cast<int>(op) < ncclNumOps) {
    call->op = static_cast<ReduceOp>(op);
    return ncclSuccess;
  }
  auto found = call->comm->preMulSums.find(static_cast<int>(op));
  if (found == call->comm->preMulSums.end()) {
    return invalidArgumentResult(std::string(nameOf(call->kind)) + ": op " +
                                 std::to_string(static_cast<int>(op)) +
                                 " is neither built in nor made by ncclRedOpCreatePreMulSum "
                                 "on this communicator");
  }
  if (found->second.dtype != call->dtype) {
    return invalidArgumentResult(std::string(nameOf(call->kind)) +
                                 ": PreMulSum op was created for another datatype");
  }
  // The engine multiplies the input by it once, then sums (ReduceOp::kPreMulSum).
  call->op = ReduceOp::kPreMulSum;
  if (found->second.device != nullptr) {
    call->scalar.present = true;
    call->scalar.device = found->second.device;
  } else {
    call->scalar = scalarFromBytes(found->second.scalar.data(), call->dtype);
  }
  return ncclSuccess;
}

Result<Work> issue(const Call& call) {
  Communicator& comm = *call.comm->comm;
  switch (call.kind) {
    case OpKind::kAllReduce:
      return comm.allReduce(call.send, call.recv, call.count, call.dtype, call.op, call.scalar,
                            call.stream);
    case OpKind::kBroadcast:
      return comm.broadcast(call.send, call.recv, call.count, call.dtype, call.root, call.stream);
    case OpKind::kReduce:
      return comm.reduce(call.send, call.recv, call.count, call.dtype, call.op, call.root,
                         call.scalar, call.stream);
    case OpKind::kAllGather:
      return comm.allGather(call.send, call.recv, call.count, call.dtype, call.stream);
    case OpKind::kReduceScatter:
      return comm.reduceScatter(call.send, call.recv, call.count, call.dtype, call.op, call.scalar,
                                call.stream);
    case OpKind::kSend:
    case OpKind::kRecv: {
      const bool isSend = call.kind == OpKind::kSend;
      if (comm.isDeviceBuffer(isSend ? call.send : call.recv)) {  // on the caller's stream
        return comm.sendRecv(
            {PointToPoint{isSend, isSend ? const_cast<void*>(call.send) : call.recv, call.count,
                          call.dtype, call.peer, std::nullopt}},
            call.stream);
      }
      return isSend ? comm.send(call.send, call.count, call.dtype, call.peer)
                    : comm.recv(call.recv, call.count, call.dtype, call.peer);
    }
    case OpKind::kAllToAll:
      return comm.allToAll(call.send, call.recv, call.count, call.dtype, call.stream);
    case OpKind::kGather:
      return comm.gather(call.send, call.recv, call.count, call.dtype, call.root, call.stream);
    case OpKind::kScatter:
      return comm.scatter(call.send, call.recv, call.count, call.dtype, call.root, call.stream);
  }
  return internalError("unknown operation");
}

ncclResult_t waitFor(const Result<Work>& work) {
  if (!work.isOk()) return fail(work.status());
  Status status = work->wait();
  return status.isOk() ? ncclSuccess : fail(status);
}

// True when the call moves device memory: it completes with its stream, and nothing
// waits for it on the host (outside a group or at ncclGroupEnd), as in NCCL.
bool onDevice(const Call& call) {
  const Communicator& comm = *call.comm->comm;
  return comm.isDeviceBuffer(call.send) || comm.isDeviceBuffer(call.recv);
}

// An issued call, and whether the host waits for it.
struct Issued {
  Result<Work> work;
  bool hostWaits = true;
};

// Runs `call` now, or records it when a group is open.
ncclResult_t submit(Call call, ncclDataType_t datatype, ncclRedOp_t op, bool hasOp) {
  try {
    // First: a freed handle must not be read (not even by ready()).
    if (ncclResult_t r = checkLive(call.comm, nameOf(call.kind)); r != ncclSuccess) {
      if (group.depth > 0 && group.firstError == ncclSuccess) group.firstError = r;
      return r;
    }
    if (group.depth == 0) {
      if (ncclResult_t r = ready(call.comm, true); r != ncclSuccess) return r;
    }
    if (ncclResult_t r = refuseIfRevoked(call.comm, nameOf(call.kind)); r != ncclSuccess) {
      if (group.depth > 0 && group.firstError == ncclSuccess) group.firstError = r;
      return r;
    }
    ncclResult_t prepared = prepare(&call, datatype, op, hasOp);
    if (prepared != ncclSuccess) {
      if (group.depth > 0 && group.firstError == ncclSuccess) group.firstError = prepared;
      return prepared;
    }
    if (group.depth > 0) {
      group.calls.push_back(std::move(call));
      return ncclSuccess;
    }
    // Device buffers: the collective completes with the stream, as in NCCL.
    if (onDevice(call)) {
      Result<Work> work = issue(call);
      return work.isOk() ? ncclSuccess : fail(work.status());
    }
    return waitFor(issue(call));
  } catch (const std::bad_alloc&) {
    return fail(systemError("out of memory", ENOMEM));
  } catch (const std::exception& e) {
    return fail(internalError(std::string("unexpected exception: ") + e.what()));
  }
}

// Sends and receives of one communicator to itself, matched in order.
ncclResult_t copyToSelf(const std::vector<const Call*>& sends,
                        const std::vector<const Call*>& recvs) {
  if (sends.size() != recvs.size()) {
    return invalidUsage("group has " + std::to_string(sends.size()) + " send(s) to self but " +
                        std::to_string(recvs.size()) + " receive(s) from self");
  }
  for (size_t i = 0; i < sends.size(); ++i) {
    size_t bytes = sends[i]->count * dataTypeSize(sends[i]->dtype);
    if (bytes != recvs[i]->count * dataTypeSize(recvs[i]->dtype)) {
      return invalidUsage("send to self of " + std::to_string(bytes) +
                          " bytes meets a receive of another size");
    }
    if (bytes > 0) std::memmove(recvs[i]->recv, sends[i]->send, bytes);
  }
  return ncclSuccess;
}

// Issues the calls of one communicator, in order; returns them in *works.
ncclResult_t issueGroup(ncclComm* comm, const std::vector<const Call*>& calls,
                        std::vector<Issued>* works) {
  std::vector<PointToPoint> batch;
  std::vector<const Call*> selfSends, selfRecvs;
  bool batchOnDevice = false;
  void* batchStream = nullptr;
  auto flush = [&] {
    if (!batch.empty()) {
      works->push_back({comm->comm->sendRecv(batch, batchStream), !batchOnDevice});
    }
    batch.clear();
    batchOnDevice = false;
  };
  for (const Call* call : calls) {
    if (!isP2P(call->kind)) {
      flush();
      works->push_back({issue(*call), !onDevice(*call)});
      continue;
    }
    const bool isSend = call->kind == OpKind::kSend;
    const bool device = onDevice(*call);
    // Device sends and receives (to this rank too) go to the device path in one batch
    // per stream; host ones to this rank are copied here.
    if (call->peer == comm->rank && !device) {
      (isSend ? selfSends : selfRecvs).push_back(call);
      continue;
    }
    if (!batch.empty() && device && call->stream != batchStream) flush();
    if (batch.empty()) batchStream = call->stream;
    batchOnDevice = batchOnDevice || device;
    batch.push_back(PointToPoint{isSend, isSend ? const_cast<void*>(call->send) : call->recv,
                                 call->count, call->dtype, call->peer, std::nullopt});
  }
  flush();
  return copyToSelf(selfSends, selfRecvs);
}

ncclResult_t endGroup() {
  GroupState state = std::move(group);
  group = GroupState();
  ncclResult_t first = state.firstError;
  auto note = [&first](ncclResult_t r) {
    if (first == ncclSuccess) first = r;
  };
  for (ncclComm* comm : state.inits) note(ready(comm, true));

  std::vector<ncclComm*> comms;  // in order of first use
  for (const Call& call : state.calls) {
    if (std::find(comms.begin(), comms.end(), call.comm) == comms.end()) comms.push_back(call.comm);
  }
  // Issues one communicator's calls; its works go to *works.
  auto issueComm = [&state](ncclComm* comm, std::vector<Issued>* works) {
    if (ncclResult_t r = ready(comm, true); r != ncclSuccess) return r;
    std::vector<const Call*> calls;
    for (const Call& call : state.calls) {
      if (call.comm == comm) calls.push_back(&call);
    }
    return issueGroup(comm, calls, works);
  };
  std::vector<Issued> works;
  if (comms.size() == 1) {
    note(issueComm(comms[0], &works));
  } else if (comms.size() > 1) {
    // Several communicators (one thread driving the ranks of one process, as with
    // ncclCommInitAll): a small collective runs on the issuing thread and waits there
    // for its peers, which this thread would only issue afterwards. So each
    // communicator's calls are issued from a thread of their own.
    std::vector<std::vector<Issued>> perComm(comms.size());
    std::vector<ncclResult_t> issued(comms.size(), ncclSuccess);
    std::vector<std::string> errors(comms.size());
    std::vector<std::thread> threads;
    threads.reserve(comms.size());
    for (size_t i = 0; i < comms.size(); ++i) {
      threads.emplace_back([&, i] {
        issued[i] = issueComm(comms[i], &perComm[i]);
        if (issued[i] != ncclSuccess) errors[i] = lastErrorText();
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (size_t i = 0; i < comms.size(); ++i) {
      if (issued[i] != ncclSuccess && first == ncclSuccess) setLastErrorText(errors[i]);
      note(issued[i]);
      for (Issued& work : perComm[i]) works.push_back(std::move(work));
    }
  }
  // Device work completes with its streams: the host only reports its issue errors.
  for (const Issued& issued : works) {
    if (!issued.work.isOk()) {
      note(fail(issued.work.status()));
    } else if (issued.hostWaits) {
      note(waitFor(issued.work));
    }
  }
  return first;
}

CollectiveKind kindOf(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return CollectiveKind::kAllReduce;
    case OpKind::kBroadcast:
      return CollectiveKind::kBroadcast;
    case OpKind::kReduce:
      return CollectiveKind::kReduce;
    case OpKind::kAllGather:
      return CollectiveKind::kAllGather;
    case OpKind::kReduceScatter:
      return CollectiveKind::kReduceScatter;
    case OpKind::kSend:
      return CollectiveKind::kSend;
    case OpKind::kRecv:
      return CollectiveKind::kRecv;
    case OpKind::kAllToAll:
      return CollectiveKind::kAllToAll;
    case OpKind::kGather:
      return CollectiveKind::kGather;
    case OpKind::kScatter:
      return CollectiveKind::kScatter;
  }
  return CollectiveKind::kAllReduce;
}

// The predicted microseconds of a group: each communicator runs its collectives one
// after another and a run of sends and receives at once (the longest of them); the
// communicators run side by side (the longest of them).
Result<double> predictGroup(const GroupState& state) {
  double longest = 0;
  std::vector<ncclComm*> seen;
  for (const Call& first : state.calls) {
    if (std::find(seen.begin(), seen.end(), first.comm) != seen.end()) continue;
    seen.push_back(first.comm);
    if (ncclResult_t r = ready(first.comm, true); r != ncclSuccess) {
      return invalidArgument("ncclGroupSimulateEnd: " + lastErrorText());
    }
    double total = 0, batch = 0;
    for (const Call& call : state.calls) {
      if (call.comm != first.comm) continue;
      Result<double> us = call.comm->comm->predictMicros(kindOf(call.kind), call.count, call.dtype);
      if (!us.isOk()) return us.status();
      if (isP2P(call.kind)) {
        batch = std::max(batch, *us);
        continue;
      }
      total += batch + *us;
      batch = 0;
    }
    longest = std::max(longest, total + batch);
  }
  return longest;
}

}  // namespace

ncclResult_t submitExchange(Exchange which, ncclComm* comm, const void* send, void* recv,
                            size_t count, ncclDataType_t datatype, int root, void* stream) {
  const OpKind kind = which == Exchange::kAllToAll ? OpKind::kAllToAll
                      : which == Exchange::kGather ? OpKind::kGather
                                                   : OpKind::kScatter;
  return submit(collectiveCall(kind, comm, send, recv, count, stream, root), datatype, ncclSum,
                false);
}

bool inGroup() { return group.depth > 0; }
void deferInit(ncclComm* comm) { group.inits.push_back(comm); }

void dropFromGroup(const ncclComm* comm) {
  std::erase_if(group.calls, [comm](const Call& call) { return call.comm == comm; });
  std::erase(group.inits, comm);
}

}  // namespace collie::nccl

using namespace collie;        // NOLINT(build/namespaces)
using namespace collie::nccl;  // NOLINT(build/namespaces)

extern "C" {

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  return submit(collectiveCall(OpKind::kAllReduce, comm, sendbuff, recvbuff, count, stream),
                datatype, op, true);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return submit(collectiveCall(OpKind::kBroadcast, comm, sendbuff, recvbuff, count, stream, root),
                datatype, ncclSum, false);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(collectiveCall(OpKind::kReduce, comm, sendbuff, recvbuff, count, stream, root),
                datatype, op, true);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return submit(collectiveCall(OpKind::kAllGather, comm, sendbuff, recvbuff, sendcount, stream),
                datatype, ncclSum, false);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return submit(collectiveCall(OpKind::kReduceScatter, comm, sendbuff, recvbuff, recvcount, stream),
                datatype, op, true);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return submit(pointToPointCall(OpKind::kSend, comm, sendbuff, nullptr, count, peer, stream),
                datatype, ncclSum, false);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return submit(pointToPointCall(OpKind::kRecv, comm, nullptr, recvbuff, count, peer, stream),
                datatype, ncclSum, false);
}

ncclResult_t ncclGroupStart(void) {
  ++group.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (group.depth == 0) return invalidUsage("ncclGroupEnd without a matching ncclGroupStart");
  if (--group.depth > 0) return ncclSuccess;
  try {
    return endGroup();
  } catch (const std::exception& e) {
    return fail(internalError(std::string("ncclGroupEnd: unexpected exception: ") + e.what()));
  }
}

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  constexpr unsigned kSimInfoMagic = 0x74685283;
  if (simInfo == nullptr || simInfo->magic != kSimInfoMagic) {
    return invalidArgumentResult(std::string("ncclGroupSimulateEnd: simInfo is ") +
                                 (simInfo == nullptr ? "NULL"
                                                     : "not initialised with "
                                                       "NCCL_SIM_INFO_INITIALIZER (bad magic)"));
  }
  if (group.depth == 0) {
    return invalidUsage("ncclGroupSimulateEnd without a matching ncclGroupStart");
  }
  if (--group.depth > 0) return ncclSuccess;
  GroupState state = std::move(group);
  group = GroupState();
  try {
    // The inits of the group are real: they complete (or fail) as at ncclGroupEnd.
    for (ncclComm* comm : state.inits) {
      if (ncclResult_t r = ready(comm, true); r != ncclSuccess) return r;
    }
    if (state.firstError != ncclSuccess) return state.firstError;
    Result<double> us = predictGroup(state);
    if (!us.isOk()) return fail(us.status());
    simInfo->estimatedTime = static_cast<float>(*us);
    return ncclSuccess;
  } catch (const std::exception& e) {
    return fail(
        internalError(std::string("ncclGroupSimulateEnd: unexpected exception: ") + e.what()));
  }
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  if (op == nullptr || scalar == nullptr) {
    return invalidArgumentResult("ncclRedOpCreatePreMulSum: op or scalar is NULL");
  }
  if (ncclResult_t r = checkLive(comm, "ncclRedOpCreatePreMulSum"); r != ncclSuccess) return r;
  if (static_cast<int>(datatype) < 0 || static_cast<int>(datatype) >= kNumDataTypes) {
    return invalidArgumentResult("ncclRedOpCreatePreMulSum: unsupported datatype " +
                                 std::to_string(static_cast<int>(datatype)));
  }
  PreMulSum premul;
  premul.dtype = static_cast<DataType>(datatype);
  // ncclScalarDevice on device memory: the address is kept and the element read when
  // each collective runs (by the multiply kernel, or copied at the call for host
  // buffers). Otherwise the element is read now (host memory is what a host-only
  // program passes as its "device" scalar too).
  DeviceRuntime* runtime = deviceRuntimeFromEnvironment();
  if (residence == ncclScalarDevice && runtime != nullptr && runtime->isDevicePointer(scalar)) {
    premul.device = scalar;
  } else {
    size_t es = dataTypeSize(premul.dtype);
    premul.scalar.assign(static_cast<const uint8_t*>(scalar),
                         static_cast<const uint8_t*>(scalar) + es);
  }
  int handle = comm->nextOp++;
  comm->preMulSums[handle] = std::move(premul);
  *op = static_cast<ncclRedOp_t>(handle);
  return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if (ncclResult_t r = checkLive(comm, "ncclRedOpDestroy"); r != ncclSuccess) return r;
  if (comm->preMulSums.erase(static_cast<int>(op)) == 0) {
    return invalidArgumentResult("ncclRedOpDestroy: op " + std::to_string(static_cast<int>(op)) +
                                 " was not made by ncclRedOpCreatePreMulSum on this communicator");
  }
  return ncclSuccess;
}

}  // extern "C"

COLLIE_NCCL_PROFILING_NAME(ncclAllReduce);
COLLIE_NCCL_PROFILING_NAME(ncclBroadcast);
COLLIE_NCCL_PROFILING_NAME(ncclBcast);
COLLIE_NCCL_PROFILING_NAME(ncclReduce);
COLLIE_NCCL_PROFILING_NAME(ncclAllGather);
COLLIE_NCCL_PROFILING_NAME(ncclReduceScatter);
COLLIE_NCCL_PROFILING_NAME(ncclSend);
COLLIE_NCCL_PROFILING_NAME(ncclRecv);
COLLIE_NCCL_PROFILING_NAME(ncclGroupStart);
COLLIE_NCCL_PROFILING_NAME(ncclGroupEnd);
COLLIE_NCCL_PROFILING_NAME(ncclGroupSimulateEnd);
COLLIE_NCCL_PROFILING_NAME(ncclRedOpCreatePreMulSum);
COLLIE_NCCL_PROFILING_NAME(ncclRedOpDestroy);
