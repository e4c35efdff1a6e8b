/* collie C API: the C++ Communicator's calls for C programs and other languages.
 *
 * Every function returns a collieResult_t; on failure collieGetLastError() gives the
 * message of the last error of the calling thread. Collectives here are blocking:
 * they return when this rank's part is complete. No C++ exception crosses this API.
 * Thread safety: as the C++ API; collieGetLastError is per thread. */
#ifndef COLLIE_COLLIE_H_
#define COLLIE_COLLIE_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  collieSuccess = 0,
  collieInvalidArgument = 1,
  collieTimeout = 2,
  collieRemoteError = 3,
  collieSystemError = 4,
  collieInternalError = 5,
  collieMismatch = 6,
  collieUnauthenticated = 7,
  collieUnsupported = 8,
  collieAborted = 9,
  collieNotFound = 10,
} collieResult_t;

/* Same values as collie::DataType and collie::ReduceOp. */
typedef enum {
  collieInt8 = 0,
  collieUint8 = 1,
  collieInt32 = 2,
  collieUint32 = 3,
  collieInt64 = 4,
  collieUint64 = 5,
  collieFloat16 = 6,
  collieFloat32 = 7,
  collieFloat64 = 8,
  collieBfloat16 = 9,
} collieDataType_t;

typedef enum {
  collieSum = 0,
  collieProd = 1,
  collieMax = 2,
  collieMin = 3,
  collieAvg = 4,
  collieBand = 5, /* bitwise and, or, xor: integer dtypes only */
  collieBor = 6,
  collieBxor = 7,
  /* Values from 1000 up: ops made by collieRedOpCreatePreMulSum. This last
   * enumerator gives the type the range those values need (as NCCL's ncclMaxRedOp). */
  collieMaxRedOp = 0x7fffffff
} collieRedOp_t;

#define COLLIE_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[COLLIE_UNIQUE_ID_BYTES];
} collieUniqueId;

typedef struct collieComm* collieComm_t;

/* Creates a unique id and starts the job's rendezvous store in this process (it
 * serves until the process exits). Hand the id to every rank. */
collieResult_t collieGetUniqueId(collieUniqueId* id);
collieResult_t collieCommInitRank(collieComm_t* comm, int nranks, collieUniqueId id, int rank);
/* Joins from launcher variables (collie run, torchrun, mpirun, srun). */
collieResult_t collieCommInitFromEnv(collieComm_t* comm);
collieResult_t collieCommDestroy(collieComm_t comm);
collieResult_t collieCommAbort(collieComm_t comm);
collieResult_t collieCommRank(collieComm_t comm, int* rank);
collieResult_t collieCommSize(collieComm_t comm, int* size);

collieResult_t collieAllReduce(const void* send, void* recv, size_t count, collieDataType_t dtype,
                               collieRedOp_t op, collieComm_t comm);
collieResult_t collieReduceScatter(const void* send, void* recv, size_t recvCount,
                                   collieDataType_t dtype, collieRedOp_t op, collieComm_t comm);
collieResult_t collieAllGather(const void* send, void* recv, size_t sendCount,
                               collieDataType_t dtype, collieComm_t comm);
/* With a count per rank (Communicator::reduceScatterV, allGatherV; host buffers): `counts`
 * has nranks entries, the same on every rank; blocks are packed in rank order. recv of
 * reduce-scatter-v holds counts[rank] elements, send of all-gather-v counts[rank]; the
 * other buffer holds the sum of counts. */
collieResult_t collieReduceScatterV(const void* send, void* recv, const size_t* counts,
                                    collieDataType_t dtype, collieRedOp_t op, collieComm_t comm);
collieResult_t collieAllGatherV(const void* send, void* recv, const size_t* counts,
                                collieDataType_t dtype, collieComm_t comm);
collieResult_t collieBroadcast(const void* send, void* recv, size_t count, collieDataType_t dtype,
                               int root, collieComm_t comm);
collieResult_t collieReduce(const void* send, void* recv, size_t count, collieDataType_t dtype,
                            collieRedOp_t op, int root, collieComm_t comm);
/* The exchanges (Communicator::allToAll, allToAllV, gather, scatter; host buffers):
 * all-to-all of `count` elements per peer (send and recv hold nranks blocks; in place
 * when send == recv, else not overlapping); with a count per peer, the arrays have
 * nranks entries each, counts and offsets in elements (NULL offsets: packed blocks);
 * gather into the root's recv of count * nranks elements; scatter from the root's send
 * of count * nranks elements. */
collieResult_t collieAllToAll(const void* send, void* recv, size_t count, collieDataType_t dtype,
                              collieComm_t comm);
collieResult_t collieAllToAllV(const void* send, const size_t* sendCounts,
                               const size_t* sendOffsets, void* recv, const size_t* recvCounts,
                               const size_t* recvOffsets, collieDataType_t dtype,
                               collieComm_t comm);
collieResult_t collieGather(const void* send, void* recv, size_t count, collieDataType_t dtype,
                            int root, collieComm_t comm);
collieResult_t collieScatter(const void* send, void* recv, size_t count, collieDataType_t dtype,
                             int root, collieComm_t comm);
collieResult_t collieSend(const void* buf, size_t count, collieDataType_t dtype, int peer,
                          collieComm_t comm);
collieResult_t collieRecv(void* buf, size_t count, collieDataType_t dtype, int peer,
                          collieComm_t comm);
collieResult_t collieBarrier(collieComm_t comm);
/* PREMUL_SUM, as NCCL's ncclRedOpCreatePreMulSum with a host scalar: an op whose
 * collectives sum every rank's input multiplied once by that rank's own factor
 * (`scalar`: one element of `dtype`, copied now; ranks may pass different ones).
 * Valid for collieAllReduce, collieReduce, collieReduceScatter and
 * collieReduceScatterV of that dtype on this communicator, until collieRedOpDestroy. */
collieResult_t collieRedOpCreatePreMulSum(collieRedOp_t* op, const void* scalar,
                                          collieDataType_t dtype, collieComm_t comm);
collieResult_t collieRedOpDestroy(collieRedOp_t op, collieComm_t comm);

/* Memory that the ranks of one host can map (collie::allocShared): page-aligned and
 * zero-filled; *ptr is set on success. Free it with collieFreeShared once no
 * collective uses it. */
collieResult_t collieAllocShared(void** ptr, size_t bytes);
collieResult_t collieFreeShared(void* ptr);
/* Registers [ptr, ptr + bytes) of collieAllocShared memory on `comm`: an all-reduce
 * whose send and receive buffers are registered on every rank of a host goes
 * single-copy over shared memory. Deregister (by the registered start) before freeing. */
collieResult_t collieRegisterBuffer(collieComm_t comm, const void* ptr, size_t bytes);
collieResult_t collieDeregisterBuffer(collieComm_t comm, const void* ptr);

const char* collieGetErrorString(collieResult_t result);
const char* collieGetLastError(void);

#ifdef __cplusplus
}
#endif

#endif /* COLLIE_COLLIE_H_ */
