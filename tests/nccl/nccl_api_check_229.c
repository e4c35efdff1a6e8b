/* nccl_api_check, part 3: the entry points after NCCL 2.28 that programs built against a
 * newer NCCL import (PyTorch 2.15 imports all of these), through NCCL's C API only.
 * ncclWinGetUserPtr gives back the registered address; the features collie does not
 * have answer ncclInvalidUsage with a last error that names the function, and change
 * nothing (the communicator still reduces afterwards). Neither collie's nccl.h (2.28)
 * nor NVIDIA's 2.28 header declares them, so the prototypes are NCCL 2.29's, with the
 * device API's structs opaque. */
#include <string.h>

#include "nccl_check.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 29, 0)
typedef struct ncclWaitSignalDesc_opaque ncclWaitSignalDesc_t;
ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr);
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                          ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclCommResume(ncclComm_t comm);
ncclResult_t ncclCommMemStats(ncclComm_t comm, int stat, uint64_t* value);
ncclResult_t ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                           ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                           unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                            cudaStream_t stream);
#endif
/* The device API's host side (NCCL's nccl_device/core.h). */
struct ncclDevCommOpaque;
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void* reqs, struct ncclDevCommOpaque* out);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const struct ncclDevCommOpaque* devComm);
ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void** outPtr);
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr);
ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                           ncclComm_t* newcomm, ncclConfig_t* config);

/* A refusal: ncclInvalidUsage, and a last error that names `name`. */
static void expectRefused(ncclResult_t r, const char* name) {
  if (r != ncclInvalidUsage)
    FAIL("%s returned %d (%s), want ncclInvalidUsage", name, (int)r, ncclGetErrorString(r));
  const char* why = ncclGetLastError(NULL);
  if (strstr(why, name) == NULL || strstr(why, "not implemented") == NULL)
    FAIL("%s: the last error does not name it: \"%s\"", name, why);
}

static void checkWinGetUserPtr(ncclComm_t comm) {
  char buffer[4096];
  ncclWindow_t win = NULL;
  NCCLCHECK(ncclCommWindowRegister(comm, buffer, sizeof(buffer), &win, 0));
  void* user = NULL;
  NCCLCHECK(ncclWinGetUserPtr(comm, win, &user));
  if (user != buffer) FAIL("ncclWinGetUserPtr gave %p, registered %p", user, (void*)buffer);
  NCCLCHECK(ncclCommWindowDeregister(comm, win));
  ncclResult_t r = ncclWinGetUserPtr(comm, win, &user);
  if (r != ncclInvalidArgument)
    FAIL("ncclWinGetUserPtr on a deregistered window returned %d", (int)r);
  if (ncclWinGetUserPtr(comm, NULL, &user) != ncclInvalidArgument)
    FAIL("ncclWinGetUserPtr accepted a NULL window");
}

void checkNccl229(ncclComm_t comm) {
  checkWinGetUserPtr(comm);
  ncclUniqueId id;
  ncclComm_t grown = comm;
  uint64_t value = 0;
  void* ptr = &value;
  expectRefused(ncclCommGetUniqueId(comm, &id), "ncclCommGetUniqueId");
  expectRefused(ncclCommGrow(comm, nranks + 1, NULL, -1, &grown, NULL), "ncclCommGrow");
  if (grown != NULL) FAIL("a refused ncclCommGrow left *newcomm set");
  grown = comm;
  expectRefused(pncclCommGrow(comm, nranks + 1, NULL, -1, &grown, NULL), "ncclCommGrow");
  expectRefused(ncclCommSuspend(comm, 1), "ncclCommSuspend");
  expectRefused(ncclCommResume(comm), "ncclCommResume");
  expectRefused(ncclCommMemStats(comm, 3, &value), "ncclCommMemStats");
  expectRefused(ncclSignal((rank + 1) % nranks, 0, 0, 0, comm, NULL), "ncclSignal");
  expectRefused(
      ncclPutSignal(&value, 1, ncclUint64, (rank + 1) % nranks, NULL, 0, 0, 0, 0, comm, NULL),
      "ncclPutSignal");
  expectRefused(ncclWaitSignal(0, NULL, comm, NULL), "ncclWaitSignal");
  expectRefused(ncclDevCommCreate(comm, NULL, NULL), "ncclDevCommCreate");
  expectRefused(ncclDevCommDestroy(comm, NULL), "ncclDevCommDestroy");
  expectRefused(ncclGetLsaMultimemDevicePointer(NULL, 0, &ptr), "ncclGetLsaMultimemDevicePointer");
  if (ptr != NULL) FAIL("a refused ncclGetLsaMultimemDevicePointer left *outPtr set");
  ptr = &value;
  expectRefused(ncclGetPeerDevicePointer(NULL, 0, 0, &ptr), "ncclGetPeerDevicePointer");
  if (ptr != NULL) FAIL("a refused ncclGetPeerDevicePointer left *outPtr set");
  /* Nothing changed: the communicator still reduces. */
  int64_t mine = rank + 1, sum = 0;
  NCCLCHECK(ncclAllReduce(&mine, &sum, 1, ncclInt64, ncclSum, comm, NULL));
  if (sum != (int64_t)nranks * (nranks + 1) / 2)
    FAIL("all-reduce after the refusals: %lld", (long long)sum);
}
