// The emulated DeviceRuntime (core/device/device_runtime.h): the device path of the
// engine on a machine without a GPU, for tests. Built into libcollie_device_emulation.so
// (emulated_runtime.h), never into libcollie. "Device" memory is host memory that
// a registry records (so isDevicePointer() is true for it and for nothing else), a
// stream is an EmulatedStream (an in-order worker thread), and the step kernels are
// the sources of kernels/cuda compiled by the host compiler and run by
// emulatedLaunch() on the stream's worker. Allocations are memfd-backed
// (collie::allocShared), so IPC handles work between ranks of one process (the
// address itself) and between processes of one host (the peer maps the memfd through
// /proc/<pid>/fd, as registered shm buffers do).
//
// An allocation stays mapped while a peer holds it open (openHandle without
// closeHandle), as CUDA IPC memory does, so a rank that leaves early does not pull
// memory from under a peer's running kernels.
#include "kernels/cuda/emulation/emulated_runtime.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "collie/shared_memory.h"
#include "core/device/device_runtime.h"
#include "core/memory/shared_region.h"
#include "kernels/cuda/emulation/emulated_stream.h"
#include "kernels/cuda/kernel_table.h"
#include "kernels/cuda/step_checks.h"

namespace collie {
namespace {

using emulation::EmulatedEvent;
using emulation::EmulatedStream;

// Small blocks: every emulated thread is a host thread.
constexpr unsigned kBlockThreads = 32;
constexpr unsigned kMaxBlocks = 2;

std::atomic<uint64_t> launches{0};
thread_local int currentOrdinal = 0;  // the calling thread's "current device"
std::atomic<uint64_t> copies{0};

class EmulatedRuntime final : public DeviceRuntime {
 public:
  std::string name() const override { return "emulated"; }

  bool isDevicePointer(const void* ptr) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return find(ptr) != nullptr;
  }

  // Page-aligned (at least cudaMalloc's 256 bytes) and zero-filled.
  Result<void*> allocate(size_t bytes) override {
    Result<void*> shared = allocShared(std::max<size_t>(bytes, 1));
    if (!shared.isOk()) return shared.status().withContext("emulated device allocation");
    void* ptr = *shared;
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_[reinterpret_cast<uintptr_t>(ptr)] = Block{bytes, 0, false};
    return ptr;
  }

  void free(void* ptr) override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == blocks_.end()) return;
    it->second.freed = true;
    releaseIfUnused(it);
  }

  Result<void*> allocateMapped(size_t bytes) override {
    void* ptr = std::calloc(1, std::max<size_t>(bytes, 1));
    if (ptr == nullptr) return internalError("emulated device: no mapped host memory");
    return ptr;
  }
  void freeMapped(void* ptr) override { std::free(ptr); }

  Result<DeviceStream> createStream() override { return new EmulatedStream(); }
  void destroyStream(DeviceStream stream) override { delete static_cast<EmulatedStream*>(stream); }

  Status memcpyAsync(void* dst, const void* src, size_t bytes, DeviceStream stream) override {
    if (stream == nullptr) return invalidArgument("emulated device: memcpyAsync on a null stream");
    if (bytes > 0 && (dst == nullptr || src == nullptr)) {
      return invalidArgument("emulated device: memcpyAsync with a null pointer");
    }
    copies.fetch_add(1, std::memory_order_relaxed);
    static_cast<EmulatedStream*>(stream)->enqueue([=] { std::memmove(dst, src, bytes); });
    return Status();
  }

  Result<DeviceEvent> recordEvent(DeviceStream stream) override {
    if (stream == nullptr) return invalidArgument("emulated device: event on a null stream");
    auto* event = new EmulatedEvent();
    static_cast<EmulatedStream*>(stream)->enqueue(
        [reached = event->reached] { reached->store(true, std::memory_order_release); });
    return static_cast<DeviceEvent>(event);
  }
  bool queryEvent(DeviceEvent event) override { return static_cast<EmulatedEvent*>(event)->done(); }
  Status streamWaitEvent(DeviceStream stream, DeviceEvent event) override {
    if (stream == nullptr) return invalidArgument("emulated device: wait on a null stream");
    static_cast<EmulatedStream*>(stream)->enqueue(
        [reached = static_cast<EmulatedEvent*>(event)->reached] {
          while (!reached->load(std::memory_order_acquire)) std::this_thread::yield();
        });
    return Status();
  }
  void destroyEvent(DeviceEvent event) override { delete static_cast<EmulatedEvent*>(event); }

  Result<int> currentDevice() override { return currentOrdinal; }
  Status setCurrentDevice(int device) override {
    if (device < 0 || device >= kEmulatedDevices) {
      return invalidArgument("emulated device: no device " + std::to_string(device) +
                             " (the emulation has " + std::to_string(kEmulatedDevices) + ")");
    }
    currentOrdinal = device;
    return Status();
  }
  Result<bool> isCapturing(DeviceStream stream) override {
    if (stream == nullptr) return invalidArgument("emulated device: isCapturing on a null stream");
    return static_cast<EmulatedStream*>(stream)->capturing();
  }

  Result<Allocation> allocationOf(const void* ptr) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto address = reinterpret_cast<uintptr_t>(ptr);
    auto it = blocks_.upper_bound(address);
    if (find(ptr) == nullptr || it == blocks_.begin()) {
      return invalidArgument("emulated device: no allocation holds the address");
    }
    --it;
    return Allocation{reinterpret_cast<void*>(it->first), std::max<size_t>(it->second.bytes, 1)};
  }

  Result<std::string> exportHandle(void* ptr) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
      if (it == blocks_.end() || it->second.freed) {
        return invalidArgument("emulated device: exportHandle needs the start of an allocation");
      }
    }
    const size_t bytes = blockBytes(ptr);
    COLLIE_RETURN_IF_ERROR(registerSharedRange(this, ptr, bytes));
    SharedWindow w;
    if (!findSharedWindow(ptr, bytes, &w)) {
      return internalError("emulated device: allocation not found in the shared table");
    }
    char text[200];
    std::snprintf(
        text, sizeof(text), "emu:%llx:%d:%d:%llx:%llx:%llx:%llx",
        static_cast<unsigned long long>(w.regionId), w.pid, w.fd,
        static_cast<unsigned long long>(w.inode), static_cast<unsigned long long>(w.regionBytes),
        static_cast<unsigned long long>(w.base), static_cast<unsigned long long>(w.offset));
    return std::string(text);
  }

  Result<void*> openHandle(const std::string& handle) override {
    SharedWindow w;
    unsigned long long id = 0, inode = 0, regionBytes = 0, base = 0, offset = 0;
    if (std::sscanf(handle.c_str(), "emu:%llx:%d:%d:%llx:%llx:%llx:%llx", &id, &w.pid, &w.fd,
                    &inode, &regionBytes, &base, &offset) != 7 ||
        offset > regionBytes) {
      return invalidArgument("emulated device: malformed IPC handle '" + handle + "'");
    }
    w.regionId = id;
    w.inode = inode;
    w.regionBytes = regionBytes;
    w.base = base;
    w.offset = offset;
    if (w.pid != static_cast<int32_t>(::getpid())) {
      Result<void*> mapped = mapSharedWindow(w, "an emulated device allocation", -1);
      if (!mapped.isOk()) return mapped.status().withContext("emulated device: IPC open");
      std::lock_guard<std::mutex> lock(mutex_);
      mappings_[reinterpret_cast<uintptr_t>(*mapped) + w.offset] =
          Mapping{*mapped, static_cast<size_t>(w.regionBytes)};
      return static_cast<uint8_t*>(*mapped) + w.offset;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(static_cast<uintptr_t>(base + offset));
    if (it == blocks_.end() || it->second.freed) {
      return notFound("emulated device: IPC handle names no live allocation");
    }
    ++it->second.opens;
    return reinterpret_cast<void*>(it->first);
  }

  void closeHandle(void* ptr) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto mapping = mappings_.find(reinterpret_cast<uintptr_t>(ptr));
    if (mapping != mappings_.end()) {
      munmap(mapping->second.base, mapping->second.bytes);
      mappings_.erase(mapping);
      return;
    }
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == blocks_.end() || it->second.opens == 0) return;
    --it->second.opens;
    releaseIfUnused(it);
  }

  Status launchReduce(const DeviceReduceStep& step, DeviceStream stream) override {
    COLLIE_RETURN_IF_ERROR(cuda::checkRingReduceStep(step));
    auto kernel = cuda::kernelFor<cuda::RingReduceScatterFamily>(step.dtype, step.op);
    if (kernel == nullptr) return invalidArgument("emulated device: bad dtype or op");
    return enqueueLaunch(kernel, step, step.count * dataTypeSize(step.dtype), stream);
  }

  Status launchCopy(const DeviceCopyStep& step, DeviceStream stream) override {
    COLLIE_RETURN_IF_ERROR(cuda::checkRingCopyStep(step));
    return enqueueLaunch(&cuda::ringAllGatherStepKernel<>, step, step.bytes, stream);
  }

  Status launchScale(const DeviceScaleStep& args, DeviceStream stream) override {
    if (cuda::nonEmptyHasNull(args.count, {args.src, args.dst})) {
      return invalidArgument("emulated device: scale has a null buffer");
    }
    auto kernel = cuda::scaleKernelFor(args.dtype);
    if (kernel == nullptr) return invalidArgument("emulated device: bad dtype");
    if (args.count == 0) return Status();
    return enqueueLaunch(kernel, args, args.count * dataTypeSize(args.dtype), stream);
  }

  Status launchFingerprintCheck(const DeviceFingerprintCheck& check, DeviceStream stream) override {
    COLLIE_RETURN_IF_ERROR(cuda::checkFingerprintCheck(check));
    return enqueueLaunch(&cuda::fingerprintCheckKernel<>, check, 0, stream);
  }

  Status launchBoard(const DeviceBoardStep& step, DeviceStream stream) override {
    COLLIE_RETURN_IF_ERROR(cuda::checkBoardStep(step));
    auto kernel = cuda::boardKernelFor(step);
    if (kernel == nullptr) return invalidArgument("emulated device: bad dtype or op");
    return enqueueLaunch(kernel, step, 0, stream, step.blocks);
  }

  Status launchRingProgram(const DeviceRingProgram& program, DeviceStream stream) override {
    COLLIE_RETURN_IF_ERROR(cuda::checkRingProgram(program));
    auto kernel = cuda::ringProgramKernelFor(program);
    if (kernel == nullptr) return invalidArgument("emulated device: bad dtype or op");
    return enqueueLaunch(kernel, program, 0, stream, program.blocks);
  }

  Status launchDirect(const DeviceDirectStep& step, DeviceStream stream) override {
    COLLIE_RETURN_IF_ERROR(cuda::checkDirectStep(step));
    auto kernel = cuda::directKernelFor(step);
    if (kernel == nullptr) return invalidArgument("emulated device: bad dtype or op");
    return enqueueLaunch(kernel, step, 0, stream, step.blocks);
  }

 private:
  struct Block {
    size_t bytes = 0;
    int opens = 0;
    bool freed = false;
  };
  struct Mapping {  // another process's allocation, mapped here
    void* base;
    size_t bytes;
  };

  size_t blockBytes(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::max<size_t>(blocks_[reinterpret_cast<uintptr_t>(ptr)].bytes, 1);
  }

  template <typename Handle>
  Status enqueueLaunch(void (*kernel)(Handle), const Handle& handle, uint64_t bytes,
                       DeviceStream stream, unsigned givenGrid = 0) {
    if (stream == nullptr) return invalidArgument("emulated device: launch on a null stream");
    const unsigned grid =
        givenGrid != 0 ? givenGrid : cuda::launchGrid(bytes, kBlockThreads, kMaxBlocks);
    launches.fetch_add(1, std::memory_order_relaxed);
    static_cast<EmulatedStream*>(stream)->enqueue([kernel, handle, grid] {
      emulatedLaunch(kernel, dim3(grid), dim3(kBlockThreads), handle);
    });
    return Status();
  }

  // Requires mutex_.
  const Block* find(const void* ptr) const {
    const auto address = reinterpret_cast<uintptr_t>(ptr);
    auto it = blocks_.upper_bound(address);
    if (it == blocks_.begin()) return nullptr;
    --it;
    if (it->second.freed || address >= it->first + std::max<size_t>(it->second.bytes, 1)) {
      return nullptr;
    }
    return &it->second;
  }

  // Requires mutex_.
  void releaseIfUnused(std::map<uintptr_t, Block>::iterator it) {
    if (!it->second.freed || it->second.opens > 0) return;
    (void)freeShared(reinterpret_cast<void*>(it->first));
    blocks_.erase(it);
  }

  mutable std::mutex mutex_;
  std::map<uintptr_t, Block> blocks_;      // start address -> allocation
  std::map<uintptr_t, Mapping> mappings_;  // opened address -> mapping
};

uint64_t kernelLaunches() { return launches.load(std::memory_order_relaxed); }
uint64_t copyCount() { return copies.load(std::memory_order_relaxed); }

}  // namespace
}  // namespace collie

// The one symbol libcollie looks up (kDeviceEmulationEntry); the runtime is created once
// and never destroyed, as the CUDA one.
extern "C" __attribute__((visibility("default"))) const collie::DeviceEmulation*
collieDeviceEmulation() {
  static const collie::DeviceEmulation emulation{new collie::EmulatedRuntime(),
                                                 &collie::kernelLaunches, &collie::copyCount};
  return &emulation;
}
