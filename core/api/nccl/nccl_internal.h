// Internals of the NCCL-compatible API (libcollie_nccl): the communicator handle, the
// Status -> ncclResult_t map and the per-thread last error.
//
// An ncclComm owns a collie::Communicator, or, while a non-blocking (or grouped)
// init runs on its own thread, the state of that init. Everything here is used by
// one thread per communicator at a time, as NCCL requires of its callers, except
// AsyncInit, which the init thread shares under its mutex.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "collie/communicator.h"
#include "collie/nccl.h"
#include "core/device/device_runtime.h"

namespace collie::nccl {

// A communicator being created on a thread of its own.
struct AsyncInit {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  bool abandoned = false;  // the handle was aborted: the thread disposes of the result
  Status status;
  std::unique_ptr<Communicator> comm;
};

// A reduction operator made by ncclRedOpCreatePreMulSum.
struct PreMulSum {
  DataType dtype;
  std::vector<uint8_t> scalar;   // one element of dtype (ncclScalarHostImmediate)
  const void* device = nullptr;  // ncclScalarDevice on device memory: read at each call
};

}  // namespace collie::nccl

// A registration made by ncclCommRegister or ncclCommWindowRegister (the handle both
// return). `registered` says whether collie registered the range with the
// communicator (ncclMemAlloc memory) or only hands the handle back (other memory
// needs no registration).
struct ncclWindow_vidmem {
  ncclComm* comm = nullptr;
  void* base = nullptr;
  size_t size = 0;
  bool registered = false;
  bool deviceWindow = false;  // registered with Communicator::registerDeviceWindow
};

struct ncclComm {
  std::unique_ptr<collie::Communicator> comm;  // null while init runs or after it failed
  std::shared_ptr<collie::nccl::AsyncInit> init;
  std::thread initThread;
  collie::Status initError;  // why init failed, when it did
  int rank = -1;
  int nranks = 0;
  std::string name;  // config->commName, for log lines
  std::map<int, collie::nccl::PreMulSum> preMulSums;
  int nextOp = ncclNumOps;
  bool finalized = false;
  bool revoked = false;  // by ncclCommRevoke: only shrink and destroy are allowed now
  std::vector<std::unique_ptr<ncclWindow_vidmem>> windows;  // registrations not yet dropped
};

namespace collie::nccl {

// Records `status` as this thread's last error (logged at WARN) and maps its code.
ncclResult_t fail(const Status& status);
// This thread's ncclGetLastError() text, read and set (a group's helper threads hand
// theirs to the thread that called ncclGroupEnd).
const std::string& lastErrorText();
void setLastErrorText(const std::string& text);
// Maps a Status code to the closest ncclResult_t (OK -> ncclSuccess).
ncclResult_t resultOf(const Status& status);
ncclResult_t invalidUsage(const std::string& why);
ncclResult_t invalidArgumentResult(const std::string& why);

// Waits for a pending init when `wait`, then reports the handle's state: OK when the
// communicator is usable, InProgress-like (returns ncclInProgress) while the init
// runs, or the init's failure.
ncclResult_t ready(ncclComm* comm, bool wait);

// The device runtime a communicator created now would use (CUDA with a device, the
// emulation when COLLIE_DEVICE_EMULATION=1 asks for it), or null: there is no device.
DeviceRuntime* deviceRuntimeFromEnvironment();

// The live handles: every ncclComm that an init, split or shrink returned, until
// ncclCommDestroy or ncclCommAbort frees it. NCCL leaves a call on a freed handle
// undefined; collie refuses it instead of touching freed memory (a second destroy was
// a double delete). A handle freed and then reused by a new communicator at the same
// address is that new communicator's. All three are thread-safe.
void addLiveHandle(ncclComm* comm);
// Removes `comm` from the live handles: false when it was not live (then nothing
// may free it).
bool takeLiveHandle(ncclComm* comm);
// ncclSuccess for a live handle; ncclInvalidArgument naming `what` (logged, and the
// thread's last error) for NULL and for a handle that is not live.
ncclResult_t checkLive(const ncclComm* comm, const char* what);

// Refuses a call on a communicator that ncclCommRevoke revoked (ncclInvalidUsage
// naming `what`); ncclSuccess otherwise.
ncclResult_t refuseIfRevoked(const ncclComm* comm, const char* what);

// Runs `fn` (an ncclResult_t-returning call body) so that no exception crosses the C
// boundary: out of memory and anything thrown become an error result and last error.
template <typename Fn>
ncclResult_t guarded(Fn fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return fail(systemError("out of memory", ENOMEM));
  } catch (const std::exception& e) {
    return fail(internalError(std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return fail(internalError("unexpected exception"));
  }
}

// The exchanges of nccl_exchange.cc, checked there: issued now (waited for on host
// buffers), or recorded in the open group, like every collective of nccl_ops.cc; they
// run as the engine's all-to-all, gather and scatter schedules.
enum class Exchange { kAllToAll, kGather, kScatter };
ncclResult_t submitExchange(Exchange which, ncclComm* comm, const void* send, void* recv,
                            size_t count, ncclDataType_t datatype, int root, void* stream);

// Group state of the calling thread.
bool inGroup();
// Called by ncclCommInitRank inside a group: ncclGroupEnd waits for this init.
void deferInit(ncclComm* comm);
// Forgets the calling thread's grouped calls and deferred init on `comm` (it is being
// aborted): ncclGroupEnd will not touch the freed handle.
void dropFromGroup(const ncclComm* comm);

}  // namespace collie::nccl

// Exports pncclX, the profiling name of the entry point ncclX defined in the same
// file: one function under two names, as libnccl does (a tool that defines its own
// ncclX reaches collie's through pncclX).
#define COLLIE_NCCL_PROFILING_NAME(name) \
  extern "C" __attribute__((alias(#name), visibility("default"))) decltype(name) p##name
