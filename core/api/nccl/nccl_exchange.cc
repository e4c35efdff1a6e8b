// The NCCL-compatible API, part 4: all-to-all, gather and scatter (NCCL 2.28).
//
// Each is checked here and then runs as the engine's all-to-all, gather or scatter
// schedule (core/plan/exchange.h) through nccl_ops.cc's submit: issued and waited for
// outside a group, recorded in the caller's group like every collective inside one.
// Every rank must pass the same count, datatype and root: a rank that differs fails on
// every rank with a mismatch naming the field (the collective's fingerprint).
#include <cstdint>
#include <cstring>
#include <string>

#include "core/api/nccl/nccl_internal.h"

namespace collie::nccl {
namespace {

// Checks what every call of this file needs; `root` < 0 for all-to-all.
ncclResult_t checkCall(const char* what, ncclComm* comm, size_t count, ncclDataType_t datatype,
                       int root, const void* sendbuff, const void* recvbuff, bool needSend,
                       bool needRecv) {
  if (ncclResult_t r = checkLive(comm, what); r != ncclSuccess) return r;
  // A communicator made by a non-blocking split or shrink learns its size when ready.
  if (comm->nranks == 0) {
    if (ncclResult_t r = ready(comm, true); r != ncclSuccess) return r;
  }
  if (ncclResult_t r = refuseIfRevoked(comm, what); r != ncclSuccess) return r;
  if (static_cast<int>(datatype) < 0 || static_cast<int>(datatype) >= kNumDataTypes) {
    return invalidArgumentResult(std::string(what) + ": datatype " +
                                 std::to_string(static_cast<int>(datatype)) + " is not supported");
  }
  if (root != -1 && (root < 0 || root >= comm->nranks)) {
    return invalidArgumentResult(std::string(what) + ": root " + std::to_string(root) +
                                 " is outside [0, " + std::to_string(comm->nranks) + ")");
  }
  if (count > 0 && ((needSend && sendbuff == nullptr) || (needRecv && recvbuff == nullptr))) {
    return invalidArgumentResult(std::string(what) + ": " +
                                 (needSend && sendbuff == nullptr ? "sendbuff" : "recvbuff") +
                                 " is NULL");
  }
  return ncclSuccess;
}

bool overlaps(const void* a, const void* b, size_t bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return bytes > 0 && x < y + bytes && y < x + bytes;
}

}  // namespace
}  // namespace collie::nccl

using namespace collie;        // NOLINT(build/namespaces)
using namespace collie::nccl;  // NOLINT(build/namespaces)

extern "C" {

ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r =
          checkCall("ncclAlltoAll", comm, count, datatype, -1, sendbuff, recvbuff, true, true);
      r != ncclSuccess) {
    return r;
  }
  const size_t block = count * dataTypeSize(static_cast<DataType>(datatype));
  const size_t total = block * static_cast<size_t>(comm->nranks);
  // In place (sendbuff == recvbuff) runs on host buffers (Communicator::allToAll).
  if (sendbuff != recvbuff && overlaps(sendbuff, recvbuff, total)) {
    return invalidArgumentResult(
        "ncclAlltoAll: sendbuff and recvbuff overlap but differ; in place needs sendbuff == "
        "recvbuff");
  }
  return submitExchange(Exchange::kAllToAll, comm, sendbuff, recvbuff, count, datatype, 0, stream);
}

ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  const bool isRoot = comm != nullptr && comm->rank == root;
  if (ncclResult_t r =
          checkCall("ncclGather", comm, count, datatype, root, sendbuff, recvbuff, true, isRoot);
      r != ncclSuccess) {
    return r;
  }
  return submitExchange(Exchange::kGather, comm, sendbuff, recvbuff, count, datatype, root, stream);
}

ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  const bool isRoot = comm != nullptr && comm->rank == root;
  if (ncclResult_t r =
          checkCall("ncclScatter", comm, count, datatype, root, sendbuff, recvbuff, isRoot, true);
      r != ncclSuccess) {
    return r;
  }
  return submitExchange(Exchange::kScatter, comm, sendbuff, recvbuff, count, datatype, root,
                        stream);
}

}  // extern "C"

COLLIE_NCCL_PROFILING_NAME(ncclAlltoAll);
COLLIE_NCCL_PROFILING_NAME(ncclGather);
COLLIE_NCCL_PROFILING_NAME(ncclScatter);
