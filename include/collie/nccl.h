/* nccl.h — collie's NCCL-compatible C API.
 *
 * Declarations follow the names, types, enum values and signatures of NCCL 2.x's
 * documented API (https://docs.nvidia.com/deeplearning/nccl/) for the subset collie
 * implements, so that a program written against NCCL builds against this header and
 * runs on libcollie_nccl.so (also installed as libnccl.so.2). Written for collie; no
 * text is taken from NVIDIA's header.
 *
 * Contract, in short (docs/nccl.md has the details):
 *  - Buffers may be host memory; the stream may be NULL. Outside a group a call on
 *    host buffers has completed when it returns. Inside ncclGroupStart/ncclGroupEnd
 *    calls are queued and ncclGroupEnd issues them all and returns when all finished;
 *    the sends and receives of a group are posted together, so they cannot deadlock.
 *  - Every call returns an ncclResult_t; none throws or aborts the process. Calls
 *    collie does not support return ncclInvalidUsage and log why.
 *  - ncclGetLastError() returns the message of the last failure on the calling thread.
 *
 * Thread safety: as NCCL's: a communicator is used by one thread at a time; group
 * state is per thread.
 */
#ifndef COLLIE_NCCL_H_
#define COLLIE_NCCL_H_
#ifndef NCCL_H_
#define NCCL_H_ /* programs test this guard to know an nccl.h is in */

#include <limits.h>
#include <stddef.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_SUFFIX "collie"
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

/* The CUDA stream type, ABI-identical to CUDA's (a pointer to an opaque struct). When
 * the CUDA runtime header is included first its own identical typedef is used. */
#if !defined(__CUDA_RUNTIME_H__) && !defined(__DRIVER_TYPES_H__)
typedef struct CUstream_st* cudaStream_t;
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm* ncclComm_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* ncclCommShrink flags: NCCL_SHRINK_ABORT first aborts the parent's pending operations. */
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01
/* ncclCommRevoke flags (reserved; must be 0). */
#define NCCL_REVOKE_DEFAULT 0x00

/* Memory windows (ncclCommWindowRegister). */
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* What ncclGroupSimulateEnd reports; initialise with NCCL_SIM_INFO_INITIALIZER. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime; /* microseconds */
} ncclSimInfo_t;
#define NCCL_SIM_INFO_INITIALIZER                                                        \
  {                                                                                      \
    sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \
        NCCL_UNDEF_FLOAT                                                                 \
  }

/* Communicator options. Laid out as NCCL 2.28's so binaries built against either
 * header agree; collie reads `size` to know how many fields the caller has. Honoured:
 * blocking, commName (log lines); the rest are accepted and ignored. */
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                         \
  {                                                                                     \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,            \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                                    \
  }

/* Reduction operators. Values from ncclNumOps up are handles made by
 * ncclRedOpCreatePreMulSum. The last enumerator makes the enum int-sized. */
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10, /* declared for compatibility; collie rejects it */
  ncclFloat8e5m2 = 11, /* declared for compatibility; collie rejects it */
  ncclNumTypes = 12,
  /* Not NVIDIA's: makes every int a value of the type in C++, so that a bad datatype
   * that a C caller passes is an error collie reports (ncclInvalidArgument), not a value
   * outside the enum's range. */
  collieNcclDataTypeMax = 0x7fffffff
} ncclDataType_t;

typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/* Every entry point is declared twice, as ncclX and as pncclX: the same function under
 * its profiling name (the PMPI convention NCCL follows), so that a tool which defines
 * its own ncclX can call pncclX to reach collie's. */
#define COLLIE_NCCL_API(ret, name, params) \
  ret name params;                         \
  ret p##name params

/* Version and ids. */
COLLIE_NCCL_API(ncclResult_t, ncclGetVersion, (int* version));
/* Starts the job's rendezvous store in this process (it lives until exit) and
 * returns its address and a fresh secret. Call once, hand the id to every rank. */
COLLIE_NCCL_API(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * uniqueId));

/* Communicators. */
COLLIE_NCCL_API(ncclResult_t, ncclCommInitRank,
                (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank));
COLLIE_NCCL_API(ncclResult_t, ncclCommInitRankConfig,
                (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank,
                 ncclConfig_t* config));
/* As ncclCommInitRankConfig with nId ids, the same list on every rank (NCCL spreads
 * its bootstrap over them). collie's rendezvous is one store: it joins the job of
 * commIds[0]. */
COLLIE_NCCL_API(ncclResult_t, ncclCommInitRankScalable,
                (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                 ncclConfig_t* config));
/* All ranks in this process, one per entry of comm[0..ndev); devlist is ignored. */
COLLIE_NCCL_API(ncclResult_t, ncclCommInitAll, (ncclComm_t * comm, int ndev, const int* devlist));
COLLIE_NCCL_API(ncclResult_t, ncclCommFinalize, (ncclComm_t comm));
COLLIE_NCCL_API(ncclResult_t, ncclCommDestroy, (ncclComm_t comm));
COLLIE_NCCL_API(ncclResult_t, ncclCommAbort, (ncclComm_t comm));
/* Fails the communicator's pending and later operations (ncclInvalidUsage, "revoked")
 * and closes its connections, so that peers fail at once; the handle stays valid for
 * ncclCommShrink, ncclCommSplit (NCCL_SPLIT_NOCOLOR only) and ncclCommDestroy. Returns
 * ncclSuccess once the communicator is quiescent. revokeFlags must be
 * NCCL_REVOKE_DEFAULT. */
COLLIE_NCCL_API(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags));
COLLIE_NCCL_API(ncclResult_t, ncclCommSplit,
                (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config));
/* A new communicator of this one's ranks minus excludeRanksList (called by every rank
 * that stays, with the same list); survivors keep their order. NCCL_SHRINK_ABORT first
 * fails this communicator's pending operations (use it after a failure). */
COLLIE_NCCL_API(ncclResult_t, ncclCommShrink,
                (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                 ncclConfig_t* config, int shrinkFlags));
COLLIE_NCCL_API(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError));
COLLIE_NCCL_API(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count));
COLLIE_NCCL_API(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device));
COLLIE_NCCL_API(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank));
/* Buffer registration. A range of ncclMemAlloc host memory is registered with the
 * communicator (collie's single-copy path uses it when every rank registered its
 * buffers); other host or device memory needs none and gets a valid handle (device
 * windows come from ncclCommWindowRegister). */
COLLIE_NCCL_API(ncclResult_t, ncclCommRegister,
                (const ncclComm_t comm, void* buff, size_t size, void** handle));
COLLIE_NCCL_API(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle));
/* Windows: as ncclCommRegister, with a window handle; winFlags is NCCL_WIN_DEFAULT or
 * NCCL_WIN_COLL_SYMMETRIC. Device memory: collective, as in NCCL (every rank, the same
 * size): mapped in every rank, so that all-reduce, reduce-scatter and all-gather on
 * buffers at the same offsets of such windows run as collie's direct kernel
 * (Communicator::registerDeviceWindow); without device windows (ranks on several hosts)
 * the handle stays unregistered. Host memory: local, as ncclCommRegister. */
COLLIE_NCCL_API(ncclResult_t, ncclCommWindowRegister,
                (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags));
COLLIE_NCCL_API(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win));

/* Errors. */
COLLIE_NCCL_API(const char*, ncclGetErrorString, (ncclResult_t result));
COLLIE_NCCL_API(const char*, ncclGetLastError, (ncclComm_t comm));

/* Memory: host memory that the ranks of one host can map (collie::allocShared),
 * 4 KiB aligned and zero-filled. */
COLLIE_NCCL_API(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size));
COLLIE_NCCL_API(ncclResult_t, ncclMemFree, (void* ptr));

/* Reduction operators with a pre-multiplier: sum over ranks of (scalar * x). */
COLLIE_NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum,
                (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype,
                 ncclScalarResidence_t residence, ncclComm_t comm));
COLLIE_NCCL_API(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm));

/* Collectives. */
COLLIE_NCCL_API(ncclResult_t, ncclReduce,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream));
COLLIE_NCCL_API(ncclResult_t, ncclBcast,
                (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                 cudaStream_t stream));
COLLIE_NCCL_API(ncclResult_t, ncclBroadcast,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 int root, ncclComm_t comm, cudaStream_t stream));
COLLIE_NCCL_API(ncclResult_t, ncclAllReduce,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream));
COLLIE_NCCL_API(ncclResult_t, ncclReduceScatter,
                (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream));
COLLIE_NCCL_API(ncclResult_t, ncclAllGather,
                (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                 ncclComm_t comm, cudaStream_t stream));
/* recvbuff + i * count gets rank i's sendbuff + rank * count (count elements per pair).
 * Gather: root's recvbuff + i * count gets rank i's sendbuff (in place when sendbuff ==
 * recvbuff + root * count). Scatter: rank i's recvbuff gets root's sendbuff + i * count
 * (in place when recvbuff == sendbuff + root * count). Run as grouped sends and
 * receives (docs/nccl.md), so every rank must pass the same count, datatype and root. */
COLLIE_NCCL_API(ncclResult_t, ncclAlltoAll,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 ncclComm_t comm, cudaStream_t stream));
COLLIE_NCCL_API(ncclResult_t, ncclGather,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 int root, ncclComm_t comm, cudaStream_t stream));
COLLIE_NCCL_API(ncclResult_t, ncclScatter,
                (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                 int root, ncclComm_t comm, cudaStream_t stream));

/* Point to point. */
COLLIE_NCCL_API(ncclResult_t, ncclSend,
                (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                 ncclComm_t comm, cudaStream_t stream));
COLLIE_NCCL_API(ncclResult_t, ncclRecv,
                (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                 cudaStream_t stream));

/* Groups. */
COLLIE_NCCL_API(ncclResult_t, ncclGroupStart, (void));
COLLIE_NCCL_API(ncclResult_t, ncclGroupEnd, (void));
/* Ends the group without running it: its calls are dropped and simInfo->estimatedTime
 * gets the tuner's predicted time of the group in microseconds. simInfo must be
 * initialised with NCCL_SIM_INFO_INITIALIZER. */
COLLIE_NCCL_API(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo));

#ifdef __cplusplus
}
#endif

#endif /* NCCL_H_ */
#endif /* COLLIE_NCCL_H_ */
