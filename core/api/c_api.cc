// The C API: thin maps onto the C++ Communicator. No exception crosses it.
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "collie/collie.h"
#include "collie/communicator.h"
#include "collie/shared_memory.h"

// A PREMUL_SUM op made by collieRedOpCreatePreMulSum: its dtype and this rank's factor.
struct CPreMulSum {
  collie::DataType dtype;
  collie::ReduceScalar scalar;
};

struct collieComm {
  explicit collieComm(std::unique_ptr<collie::Communicator> made) : comm(std::move(made)) {}

  std::unique_ptr<collie::Communicator> comm;
  std::mutex opsMutex;
  std::map<int, CPreMulSum> preMulSums;  // by op value
  int nextOp = 1000;
};

namespace {

thread_local std::string lastError;

collieResult_t fail(const collie::Status& status) {
  lastError = status.toString();
  return static_cast<collieResult_t>(status.code());
}

collieResult_t resultOf(const collie::Status& status) {
  return status.isOk() ? collieSuccess : fail(status);
}

collieResult_t finish(const collie::Result<collie::Work>& work) {
  if (!work.isOk()) return fail(work.status());
  return resultOf(work->wait());
}

template <typename Fn>
collieResult_t guarded(Fn fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    lastError = "out of memory";
    return collieSystemError;
  } catch (const std::exception& e) {
    lastError = std::string("internal error: ") + e.what();
    return collieInternalError;
  } catch (...) {
    lastError = "internal error: unknown exception";
    return collieInternalError;
  }
}

collie::DataType dtypeOf(collieDataType_t dtype) { return static_cast<collie::DataType>(dtype); }
// A built-in op, or one made by collieRedOpCreatePreMulSum for this dtype (with its
// factor); else InvalidArgument naming the call.
struct ResolvedOp {
  collie::ReduceOp op = collie::ReduceOp::kSum;
  collie::ReduceScalar scalar;
};
collie::Result<ResolvedOp> opOf(const char* what, collieRedOp_t op, collieDataType_t dtype,
                                collieComm_t comm) {
  const int value = static_cast<int>(op);
  if (value >= 0 && value <= static_cast<int>(collie::ReduceOp::kBxor)) {
    return ResolvedOp{static_cast<collie::ReduceOp>(value), {}};
  }
  std::lock_guard<std::mutex> lock(comm->opsMutex);
  auto found = comm->preMulSums.find(value);
  if (found == comm->preMulSums.end()) {
    return collie::invalidArgument(std::string(what) + ": op " + std::to_string(value) +
                                   " is neither built in nor made by "
                                   "collieRedOpCreatePreMulSum on this communicator");
  }
  if (found->second.dtype != static_cast<collie::DataType>(dtype)) {
    return collie::invalidArgument(
        std::string(what) + ": op " + std::to_string(value) + " was made for " +
        std::string(collie::dataTypeName(found->second.dtype)) + ", the call is " +
        std::string(collie::dataTypeName(dtypeOf(dtype))));
  }
  return ResolvedOp{collie::ReduceOp::kPreMulSum, found->second.scalar};
}

collieResult_t badComm() {
  lastError = "communicator is null";
  return collieInvalidArgument;
}

// Stores started by collieGetUniqueId live until the process exits.
std::mutex serversMutex;
std::vector<std::unique_ptr<collie::StoreServer>>& servers() {
  static auto* list = new std::vector<std::unique_ptr<collie::StoreServer>>();
  return *list;
}

// The nranks counts of a v collective, or InvalidArgument for NULL.
collie::Result<std::vector<size_t>> countsOf(const char* what, const size_t* counts,
                                             collieComm_t comm) {
  if (counts == nullptr) return collie::invalidArgument(std::string(what) + ": counts is NULL");
  return std::vector<size_t>(counts, counts + comm->comm->size());
}

}  // namespace

extern "C" {

collieResult_t collieGetUniqueId(collieUniqueId* out) {
  if (out == nullptr) return fail(collie::invalidArgument("collieGetUniqueId: id is null"));
  return guarded([&] {
    collie::Result<collie::UniqueId> id = collie::UniqueId::generate("127.0.0.1", 0);
    if (!id.isOk()) return fail(id.status());
    auto server = collie::StoreServer::start("0.0.0.0", 0, id->secret);
    if (!server.isOk()) return fail(server.status());
    id->port = (*server)->port();
    {
      std::lock_guard<std::mutex> lock(serversMutex);
      servers().push_back(std::move(*server));
    }
    auto bytes = id->toBytes();
    std::memcpy(out->internal, bytes.data(), bytes.size());
    return collieSuccess;
  });
}

collieResult_t collieCommInitRank(collieComm_t* comm, int nranks, collieUniqueId id, int rank) {
  if (comm == nullptr) return badComm();
  return guarded([&] {
    auto parsed = collie::UniqueId::fromBytes(reinterpret_cast<const uint8_t*>(id.internal),
                                              sizeof(id.internal));
    if (!parsed.isOk()) return fail(parsed.status());
    auto created = collie::Communicator::create(*parsed, rank, nranks);
    if (!created.isOk()) return fail(created.status());
    *comm = new collieComm(std::move(*created));
    return collieSuccess;
  });
}

collieResult_t collieCommInitFromEnv(collieComm_t* comm) {
  if (comm == nullptr) return badComm();
  return guarded([&] {
    auto created = collie::Communicator::createFromEnvironment();
    if (!created.isOk()) return fail(created.status());
    *comm = new collieComm(std::move(*created));
    return collieSuccess;
  });
}

collieResult_t collieCommDestroy(collieComm_t comm) {
  if (comm == nullptr) return badComm();
  return guarded([&] {
    delete comm;
    return collieSuccess;
  });
}

collieResult_t collieCommAbort(collieComm_t comm) {
  if (comm == nullptr) return badComm();
  return guarded([&] {
    comm->comm->abort();
    delete comm;
    return collieSuccess;
  });
}

collieResult_t collieCommRank(collieComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return badComm();
  *rank = comm->comm->rank();
  return collieSuccess;
}

collieResult_t collieCommSize(collieComm_t comm, int* size) {
  if (comm == nullptr || size == nullptr) return badComm();
  *size = comm->comm->size();
  return collieSuccess;
}

collieResult_t collieAllReduce(const void* send, void* recv, size_t count, collieDataType_t dtype,
                               collieRedOp_t op, collieComm_t comm) {
  if (comm == nullptr) return badComm();
  return guarded([&] {
    auto resolved = opOf("collieAllReduce", op, dtype, comm);
    if (!resolved.isOk()) return finish(resolved.status());
    return finish(
        comm->comm->allReduce(send, recv, count, dtypeOf(dtype), resolved->op, resolved->scalar));
  });
}

collieResult_t collieReduceScatter(const void* send, void* recv, size_t recvCount,
                                   collieDataType_t dtype, collieRedOp_t op, collieComm_t comm) {
  if (comm == nullptr) return badComm();
  return guarded([&] {
    auto resolved = opOf("collieReduceScatter", op, dtype, comm);
    if (!resolved.isOk()) return finish(resolved.status());
    return finish(comm->comm->reduceScatter(send, recv, recvCount, dtypeOf(dtype), resolved->op,
                                            resolved->scalar));
  });
}

collieResult_t collieAllGather(const void* send, void* recv, size_t sendCount,
                               collieDataType_t dtype, collieComm_t comm) {
  if (comm == nullptr) return badComm();
  return guarded(
      [&] { return finish(comm->comm->allGather(send, recv, sendCount, dtypeOf(dtype))); });
}

collieResult_t collieReduceScatterV(const void* send, void* recv, const size_t* counts,
                                    collieDataType_t dtype, collieRedOp_t op, collieComm_t comm) {
  if (comm == nullptr) return badComm();
  return guarded([&] {
    auto all = countsOf("collieReduceScatterV", counts, comm);
    if (!all.isOk()) return finish(all.status());
    auto resolved = opOf("collieReduceScatterV", op, dtype, comm);
    if (!resolved.isOk()) return finish(resolved.status());
    return finish(comm->comm->reduceScatterV(send, recv, all.value(), dtypeOf(dtype), resolved->op,
                                             resolved->scalar));
  });
}

collieResult_t collieAllGatherV(const void* send, void* recv, const size_t* counts,
                                collieDataType_t dtype, collieComm_t comm) {
  if (comm == nullptr) return badComm();
  return guarded([&] {
    auto all = countsOf("collieAllGatherV", counts, comm);
    if (!all.isOk()) return finish(all.status());
    return finish(comm->comm->allGatherV(send, recv, all.value(), dtypeOf(dtype)));
  });
}

collieResult_t collieBroadcast(const void* send, void* recv, size_t count, collieDataType_t dtype,
                               int root, collieComm_t comm) {
  if (comm == nullptr) return badComm();
  return guarded(
      [&] { return finish(comm->comm->broadcast(send, recv, count, dtypeOf(dtype), root)); });
}

collieResult_t collieAllToAll(const void* send, void* recv, size_t count, collieDataType_t dtype,
                              collieComm_t comm) {
  if (comm == nullptr) return badComm();
  return guarded([&] { return finish(comm->comm->allToAll(send, recv, count, dtypeOf(dtype))); });
}

collieResult_t collieAllToAllV(const void* send, const size_t* sendCounts,
                               const size_t* sendOffsets, void* recv, const size_t* recvCounts,
                               const size_t* recvOffsets, collieDataType_t dtype,
                               collieComm_t comm) {
  if (comm == nullptr) return badComm();
  return guarded([&] {
    if (sendCounts == nullptr || recvCounts == nullptr) {
      return finish(
          collie::invalidArgument("collieAllToAllV: sendCounts and recvCounts must not be NULL"));
    }
    const size_t n = static_cast<size_t>(comm->comm->size());
    auto vec = [n](const size_t* values) {
      return values == nullptr ? std::vector<size_t>() : std::vector<size_t>(values, values + n);
    };
    return finish(comm->comm->allToAllV(send, vec(sendCounts), vec(sendOffsets), recv,
                                        vec(recvCounts), vec(recvOffsets), dtypeOf(dtype)));
  });
}

collieResult_t collieGather(const void* send, void* recv, size_t count, collieDataType_t dtype,
                            int root, collieComm_t comm) {
  if (comm == nullptr) return badComm();
  return guarded(
      [&] { return finish(comm->comm->gather(send, recv, count, dtypeOf(dtype), root)); });
}

collieResult_t collieScatter(const void* send, void* recv, size_t count, collieDataType_t dtype,
                             int root, collieComm_t comm) {
  if (comm == nullptr) return badComm();
  return guarded(
      [&] { return finish(comm->comm->scatter(send, recv, count, dtypeOf(dtype), root)); });
}

collieResult_t collieReduce(const void* send, void* recv, size_t count, collieDataType_t dtype,
                            collieRedOp_t op, int root, collieComm_t comm) {
  if (comm == nullptr) return badComm();
  return guarded([&] {
    auto resolved = opOf("collieReduce", op, dtype, comm);
    if (!resolved.isOk()) return finish(resolved.status());
    return finish(comm->comm->reduce(send, recv, count, dtypeOf(dtype), resolved->op, root,
                                     resolved->scalar));
  });
}

collieResult_t collieSend(const void* buf, size_t count, collieDataType_t dtype, int peer,
                          collieComm_t comm) {
  if (comm == nullptr) return badComm();
  return guarded([&] { return finish(comm->comm->send(buf, count, dtypeOf(dtype), peer)); });
}

collieResult_t collieRecv(void* buf, size_t count, collieDataType_t dtype, int peer,
                          collieComm_t comm) {
  if (comm == nullptr) return badComm();
  return guarded([&] { return finish(comm->comm->recv(buf, count, dtypeOf(dtype), peer)); });
}

collieResult_t collieBarrier(collieComm_t comm) {
  if (comm == nullptr) return badComm();
  return guarded([&] { return finish(comm->comm->barrier()); });
}

collieResult_t collieRedOpCreatePreMulSum(collieRedOp_t* op, const void* scalar,
                                          collieDataType_t dtype, collieComm_t comm) {
  if (comm == nullptr) return badComm();
  if (op == nullptr || scalar == nullptr) {
    return fail(collie::invalidArgument("collieRedOpCreatePreMulSum: op or scalar is null"));
  }
  const int value = static_cast<int>(dtype);
  if (value < 0 || value > static_cast<int>(collieBfloat16)) {
    return fail(collie::invalidArgument("collieRedOpCreatePreMulSum: datatype " +
                                        std::to_string(value) + " is not a collieDataType_t"));
  }
  return guarded([&] {
    std::lock_guard<std::mutex> lock(comm->opsMutex);
    const int made = comm->nextOp++;
    comm->preMulSums[made] = {dtypeOf(dtype), collie::scalarFromBytes(scalar, dtypeOf(dtype))};
    *op = static_cast<collieRedOp_t>(made);
    return collieSuccess;
  });
}

collieResult_t collieRedOpDestroy(collieRedOp_t op, collieComm_t comm) {
  if (comm == nullptr) return badComm();
  std::lock_guard<std::mutex> lock(comm->opsMutex);
  if (comm->preMulSums.erase(static_cast<int>(op)) == 0) {
    return fail(collie::invalidArgument("collieRedOpDestroy: op " +
                                        std::to_string(static_cast<int>(op)) +
                                        " was not made by collieRedOpCreatePreMulSum on this "
                                        "communicator (or was destroyed already)"));
  }
  return collieSuccess;
}

collieResult_t collieAllocShared(void** ptr, size_t bytes) {
  if (ptr == nullptr) return fail(collie::invalidArgument("collieAllocShared: ptr is null"));
  return guarded([&] {
    collie::Result<void*> memory = collie::allocShared(bytes);
    if (!memory.isOk()) return fail(memory.status());
    *ptr = *memory;
    return collieSuccess;
  });
}

collieResult_t collieFreeShared(void* ptr) {
  return guarded([&] { return resultOf(collie::freeShared(ptr)); });
}

collieResult_t collieRegisterBuffer(collieComm_t comm, const void* ptr, size_t bytes) {
  if (comm == nullptr) return badComm();
  return guarded([&] { return resultOf(comm->comm->registerBuffer(ptr, bytes)); });
}

collieResult_t collieDeregisterBuffer(collieComm_t comm, const void* ptr) {
  if (comm == nullptr) return badComm();
  return guarded([&] { return resultOf(comm->comm->deregisterBuffer(ptr)); });
}

const char* collieGetErrorString(collieResult_t result) {
  return collie::statusCodeName(static_cast<collie::StatusCode>(result));
}

const char* collieGetLastError(void) { return lastError.c_str(); }

}  // extern "C"
