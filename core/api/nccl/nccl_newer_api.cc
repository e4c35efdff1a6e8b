// The NCCL-compatible API, part 5: entry points of NCCL after 2.28 and of NCCL's device
// API that programs built against a newer NCCL import, so that they load and run on
// collie's libnccl.so.2.
//
// PyTorch 2.15's libtorch_cuda.so (built against NCCL 2.30) imports 13 functions that
// NCCL 2.28's nccl.h does not declare. A program binds them lazily, so the import alone
// is harmless until something calls one; then a library without the symbol ends the
// process ("symbol lookup error"). Here each one exists:
//   - ncclWinGetUserPtr is implemented: the address a window was registered with.
//   - The others (communicator growth, suspend/resume and its memory statistics,
//     one-sided signals, the device communicator and its window pointers) are features
//     collie does not have. Each returns ncclInvalidUsage with ncclGetLastError() naming
//     the function and what it would need, and changes nothing: a caller that checks
//     the result (PyTorch does) reports it instead of crashing.
// None of them is declared in include/collie/nccl.h, which describes NCCL 2.28's API
// (NCCL_VERSION_CODE 2.28.0); the prototypes below follow NCCL 2.29's nccl.h and
// nccl_device/core.h, with the device API's structs opaque (only their addresses pass).
#include <cstdint>
#include <string>

#include "core/api/nccl/nccl_internal.h"

namespace collie::nccl {
namespace {

// The refusal of an entry point collie does not implement.
ncclResult_t notImplemented(const char* function, const char* feature) {
  return invalidUsage(std::string(function) + " is not implemented by collie's libnccl.so.2 (" +
                      feature + "); nothing was changed");
}

}  // namespace
}  // namespace collie::nccl

using namespace collie;        // NOLINT(build/namespaces)
using namespace collie::nccl;  // NOLINT(build/namespaces)

extern "C" {

// NCCL 2.29's one-sided signal descriptor and the device API's structs: opaque here.
struct ncclWaitSignalDesc_opaque;
struct ncclDevCommRequirements_opaque;
struct ncclDevComm_opaque;

__attribute__((visibility("default"))) ncclResult_t ncclWinGetUserPtr(ncclComm_t comm,
                                                                      ncclWindow_t win,
                                                                      void** outUserPtr) {
  if (outUserPtr == nullptr) return invalidArgumentResult("ncclWinGetUserPtr: outUserPtr is NULL");
  if (win == nullptr) return invalidArgumentResult("ncclWinGetUserPtr: win is NULL");
  if (ncclResult_t r = checkLive(comm, "ncclWinGetUserPtr"); r != ncclSuccess) return r;
  for (const auto& window : comm->windows) {
    if (window.get() == win) {
      *outUserPtr = window->base;
      return ncclSuccess;
    }
  }
  return invalidArgumentResult(
      "ncclWinGetUserPtr: the window was not registered on this communicator (or was "
      "deregistered already)");
}

__attribute__((visibility("default"))) ncclResult_t ncclCommGetUniqueId(ncclComm_t, ncclUniqueId*) {
  return notImplemented("ncclCommGetUniqueId", "growing a communicator with ncclCommGrow");
}

__attribute__((visibility("default"))) ncclResult_t ncclCommGrow(ncclComm_t, int,
                                                                 const ncclUniqueId*, int,
                                                                 ncclComm_t* newcomm,
                                                                 ncclConfig_t*) {
  if (newcomm != nullptr) *newcomm = nullptr;
  return notImplemented("ncclCommGrow",
                        "adding ranks to a communicator; create a new one with "
                        "ncclCommInitRank instead");
}

__attribute__((visibility("default"))) ncclResult_t ncclCommSuspend(ncclComm_t, int) {
  return notImplemented("ncclCommSuspend",
                        "releasing a communicator's memory while it is idle; the communicator "
                        "keeps it until ncclCommDestroy");
}

__attribute__((visibility("default"))) ncclResult_t ncclCommResume(ncclComm_t) {
  return notImplemented("ncclCommResume", "suspending a communicator (ncclCommSuspend)");
}

__attribute__((visibility("default"))) ncclResult_t ncclCommMemStats(ncclComm_t, int, uint64_t*) {
  return notImplemented("ncclCommMemStats",
                        "the memory statistics of ncclCommSuspend, which collie does not have");
}

__attribute__((visibility("default"))) ncclResult_t ncclPutSignal(const void*, size_t,
                                                                  ncclDataType_t, int, ncclWindow_t,
                                                                  size_t, int, int, unsigned int,
                                                                  ncclComm_t, cudaStream_t) {
  return notImplemented("ncclPutSignal", "one-sided puts into a peer's window");
}

__attribute__((visibility("default"))) ncclResult_t ncclSignal(int, int, int, unsigned int,
                                                               ncclComm_t, cudaStream_t) {
  return notImplemented("ncclSignal", "one-sided signals");
}

__attribute__((visibility("default"))) ncclResult_t ncclWaitSignal(int, ncclWaitSignalDesc_opaque*,
                                                                   ncclComm_t, cudaStream_t) {
  return notImplemented("ncclWaitSignal", "one-sided signals");
}

__attribute__((visibility("default"))) ncclResult_t ncclDevCommCreate(
    ncclComm_t, const ncclDevCommRequirements_opaque*, ncclDevComm_opaque*) {
  return notImplemented("ncclDevCommCreate",
                        "NCCL's device API: kernels that call NCCL from the device");
}

__attribute__((visibility("default"))) ncclResult_t ncclDevCommDestroy(ncclComm_t,
                                                                       const ncclDevComm_opaque*) {
  return notImplemented("ncclDevCommDestroy", "NCCL's device API (ncclDevCommCreate)");
}

__attribute__((visibility("default"))) ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t,
                                                                                    size_t,
                                                                                    void** outPtr) {
  if (outPtr != nullptr) *outPtr = nullptr;
  return notImplemented("ncclGetLsaMultimemDevicePointer", "multicast (NVLS) mappings of a window");
}

__attribute__((visibility("default"))) ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t, size_t,
                                                                             int, void** outPtr) {
  if (outPtr != nullptr) *outPtr = nullptr;
  return notImplemented("ncclGetPeerDevicePointer",
                        "device pointers into a peer's window for NCCL's device API");
}

}  // extern "C"

COLLIE_NCCL_PROFILING_NAME(ncclWinGetUserPtr);
COLLIE_NCCL_PROFILING_NAME(ncclCommGetUniqueId);
COLLIE_NCCL_PROFILING_NAME(ncclCommGrow);
COLLIE_NCCL_PROFILING_NAME(ncclCommSuspend);
COLLIE_NCCL_PROFILING_NAME(ncclCommResume);
COLLIE_NCCL_PROFILING_NAME(ncclCommMemStats);
COLLIE_NCCL_PROFILING_NAME(ncclPutSignal);
COLLIE_NCCL_PROFILING_NAME(ncclSignal);
COLLIE_NCCL_PROFILING_NAME(ncclWaitSignal);
COLLIE_NCCL_PROFILING_NAME(ncclDevCommCreate);
COLLIE_NCCL_PROFILING_NAME(ncclDevCommDestroy);
COLLIE_NCCL_PROFILING_NAME(ncclGetLsaMultimemDevicePointer);
COLLIE_NCCL_PROFILING_NAME(ncclGetPeerDevicePointer);
