// The NCCL-compatible API, part 3: memory and its registration.
//
// ncclMemAlloc hands out device memory where there is a device (CUDA, or the
// emulation with COLLIE_DEVICE_EMULATION=1; NCCL allocates on the current device),
// and otherwise memory that the ranks of one host can map (collie::allocShared).
// ncclMemFree gives each back to where it came from. ncclCommRegister and ncclCommWindowRegister
// register such a range with the communicator (Communicator::registerBuffer), so that collectives
// whose buffers every local rank registered take the single-copy path; other memory
// (malloc) needs no registration and gets a handle all the same. ncclCommWindowRegister of
// device memory is collective, as in NCCL: Communicator::registerDeviceWindow maps it in
// every rank, and collectives on such windows run as the direct kernel (a communicator
// without device windows keeps the handle unregistered); ncclCommRegister of device memory
// (local in NCCL) registers nothing. Every ncclCommWindowRegister first tells every rank
// what the others register (device memory, host memory or nothing), so that ranks that
// disagree all fail naming one of them instead of waiting in each other's exchanges.
// Both handles are an ncclWindow_vidmem owned by the communicator; destroying the
// communicator drops them.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collie/shared_memory.h"
#include "core/api/nccl/nccl_internal.h"
#include "core/log/log.h"

namespace collie::nccl {
namespace {

// What a rank offers to ncclCommWindowRegister; every rank must offer the same kind.
enum class WindowMemory : uint8_t { kNone = 0, kHost = 1, kDevice = 2 };

const char* windowMemoryName(WindowMemory kind) {
  switch (kind) {
    case WindowMemory::kDevice:
      return "device memory";
    case WindowMemory::kHost:
      return "host memory";
    case WindowMemory::kNone:
      break;
  }
  return "nothing (size 0)";
}

// Collective: every rank's kind of memory, and InvalidArgument naming the first rank
// (rank order) whose kind differs from rank 0's; the same outcome on every rank.
Status agreeOnWindowMemory(Communicator& comm, WindowMemory mine, const char* what) {
  std::vector<uint8_t> kinds(static_cast<size_t>(comm.size()), 0);
  const uint8_t sent = static_cast<uint8_t>(mine);
  Result<Work> gathered = comm.allGather(&sent, kinds.data(), 1, DataType::kUint8);
  if (!gathered.isOk()) return gathered.status();
  COLLIE_RETURN_IF_ERROR(gathered->wait());
  for (int r = 1; r < comm.size(); ++r) {
    if (kinds[r] == kinds[0]) continue;
    auto kind = [&](int q) {
      return kinds[q] <= 2 ? windowMemoryName(static_cast<WindowMemory>(kinds[q])) : "garbage";
    };
    return Status(StatusCode::kInvalidArgument,
                  std::string(what) + ": rank " + std::to_string(r) + " registers " + kind(r) +
                      " and rank 0 " + kind(0) +
                      "; every rank registers the same kind of memory, of the same size",
                  r);
  }
  return Status();
}

// Registers [buff, buff + size) with `comm` where collie can use it and returns the
// handle that the matching deregistration takes.
ncclResult_t addRegistration(ncclComm* comm, void* buff, size_t size, const char* what,
                             bool collective, ncclWindow_vidmem** handle) {
  if (ncclResult_t r = ready(comm, true); r != ncclSuccess) return r;
  if (ncclResult_t r = refuseIfRevoked(comm, what); r != ncclSuccess) return r;
  if (buff == nullptr && size > 0) {
    return invalidArgumentResult(std::string(what) + ": buff is NULL and size is " +
                                 std::to_string(size));
  }
  auto window = std::make_unique<ncclWindow_vidmem>();
  window->comm = comm;
  window->base = buff;
  window->size = size;
  const bool device = size > 0 && comm->comm->isDeviceBuffer(buff);
  if (collective) {
    const WindowMemory mine = size == 0 ? WindowMemory::kNone
                              : device  ? WindowMemory::kDevice
                                        : WindowMemory::kHost;
    Status agreed = agreeOnWindowMemory(*comm->comm, mine, what);
    if (!agreed.isOk()) return fail(agreed);
  }
  if (collective && device) {
    Status status = comm->comm->registerDeviceWindow(buff, size);
    if (status.isOk()) {
      window->registered = true;
      window->deviceWindow = true;
    } else if (status.code() == StatusCode::kUnsupported) {
      COLLIE_LOG(INFO, INIT) << what << ": " << size << " bytes of device memory at " << buff
                             << " stay unregistered (" << status.message() << ")";
    } else {
      return fail(status.withContext(what));
    }
  } else if (size > 0 && !device) {
    Status status = comm->comm->registerBuffer(buff, size);
    if (status.isOk()) {
      window->registered = true;
    } else if (status.code() == StatusCode::kInvalidArgument) {
      // Not ncclMemAlloc memory: collectives on it take the usual path.
      COLLIE_LOG(INFO, INIT) << what << ": " << size << " bytes at " << buff
                             << " are not ncclMemAlloc memory; nothing to register ("
                             << status.message() << ")";
    } else {
      return fail(status.withContext(what));
    }
  }
  *handle = window.get();
  comm->windows.push_back(std::move(window));
  return ncclSuccess;
}

ncclResult_t dropRegistration(ncclComm* comm, const void* handle, const char* what) {
  auto found = std::find_if(comm->windows.begin(), comm->windows.end(),
                            [handle](const auto& window) { return window.get() == handle; });
  if (found == comm->windows.end()) {
    return invalidArgumentResult(std::string(what) +
                                 ": the handle was not registered on this communicator (or was "
                                 "deregistered already)");
  }
  ncclResult_t result = ncclSuccess;
  if ((*found)->registered && comm->comm) {
    Status status = (*found)->deviceWindow ? comm->comm->deregisterDeviceWindow((*found)->base)
                                           : comm->comm->deregisterBuffer((*found)->base);
    if (!status.isOk()) result = fail(status.withContext(what));
  }
  comm->windows.erase(found);
  return result;
}

}  // namespace
}  // namespace collie::nccl

using namespace collie;        // NOLINT(build/namespaces)
using namespace collie::nccl;  // NOLINT(build/namespaces)

extern "C" {

ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  if (handle == nullptr) return invalidArgumentResult("ncclCommRegister: handle is NULL");
  if (ncclResult_t r = checkLive(comm, "ncclCommRegister"); r != ncclSuccess) return r;
  return guarded([&] {
    ncclWindow_vidmem* window = nullptr;
    ncclResult_t r = addRegistration(comm, buff, size, "ncclCommRegister", false, &window);
    *handle = window;
    return r;
  });
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  if (ncclResult_t r = checkLive(comm, "ncclCommDeregister"); r != ncclSuccess) return r;
  return guarded([&] { return dropRegistration(comm, handle, "ncclCommDeregister"); });
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                    int winFlags) {
  if (win == nullptr) return invalidArgumentResult("ncclCommWindowRegister: win is NULL");
  if (ncclResult_t r = checkLive(comm, "ncclCommWindowRegister"); r != ncclSuccess) return r;
  *win = nullptr;
  if (winFlags != NCCL_WIN_DEFAULT && winFlags != NCCL_WIN_COLL_SYMMETRIC) {
    return invalidArgumentResult("ncclCommWindowRegister: winFlags is " + std::to_string(winFlags) +
                                 "; accepted: NCCL_WIN_DEFAULT (0), NCCL_WIN_COLL_SYMMETRIC (1)");
  }
  return guarded(
      [&] { return addRegistration(comm, buff, size, "ncclCommWindowRegister", true, win); });
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  if (win == nullptr) return invalidArgumentResult("ncclCommWindowDeregister: win is NULL");
  if (ncclResult_t r = checkLive(comm, "ncclCommWindowDeregister"); r != ncclSuccess) return r;
  return guarded([&] { return dropRegistration(comm, win, "ncclCommWindowDeregister"); });
}

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) return invalidArgumentResult("ncclMemAlloc: ptr is NULL");
  *ptr = nullptr;
  if (DeviceRuntime* device = deviceRuntimeFromEnvironment(); device != nullptr) {
    Result<void*> memory = device->allocate(size == 0 ? 1 : size);
    if (!memory.isOk()) {
      return fail(memory.status().withContext("ncclMemAlloc of " + std::to_string(size) +
                                              " bytes of device memory"));
    }
    *ptr = *memory;
    return ncclSuccess;
  }
  Result<void*> memory = allocShared(size == 0 ? 1 : size);
  if (!memory.isOk()) {
    return fail(memory.status().withContext("ncclMemAlloc of " + std::to_string(size) + " bytes"));
  }
  *ptr = *memory;
  return ncclSuccess;
}

ncclResult_t ncclMemFree(void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  if (DeviceRuntime* device = deviceRuntimeFromEnvironment();
      device != nullptr && device->isDevicePointer(ptr)) {
    device->free(ptr);
    return ncclSuccess;
  }
  Status status = freeShared(ptr);
  return status.isOk() ? ncclSuccess : fail(status.withContext("ncclMemFree"));
}

}  // extern "C"

COLLIE_NCCL_PROFILING_NAME(ncclCommRegister);
COLLIE_NCCL_PROFILING_NAME(ncclCommDeregister);
COLLIE_NCCL_PROFILING_NAME(ncclCommWindowRegister);
COLLIE_NCCL_PROFILING_NAME(ncclCommWindowDeregister);
COLLIE_NCCL_PROFILING_NAME(ncclMemAlloc);
COLLIE_NCCL_PROFILING_NAME(ncclMemFree);
