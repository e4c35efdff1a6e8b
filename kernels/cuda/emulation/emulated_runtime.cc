// The emulated DeviceRuntime (core/device/device_runtime.h): the device path of the
// engine on a machine without a GPU, for tests. "Device" memory is host memory that
// a registry records (so isDevicePointer() is true for it and for nothing else), a
// stream is an EmulatedStream (an in-order worker thread), and the step kernels are
// the sources of kernels/cuda compiled by the host compiler and run by
// emulatedLaunch() on the stream's worker. IPC handles name an allocation of this
// process: ranks that are threads of one process can open each other's memory;
// ranks in other processes get Unsupported.
//
// An allocation stays mapped while a peer holds it open (openHandle without
// closeHandle), as CUDA IPC memory does, so a rank that leaves early does not pull
// memory from under a peer's running kernels.
#include "kernels/cuda/emulation/emulated_runtime.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "core/device/device_runtime.h"
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
constexpr size_t kAlignment = 256;  // like cudaMalloc

std::atomic<uint64_t> launches{0};
std::atomic<uint64_t> copies{0};

class EmulatedRuntime final : public DeviceRuntime {
 public:
  std::string name() const override { return "emulated"; }

  bool isDevicePointer(const void* ptr) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return find(ptr) != nullptr;
  }

  Result<void*> allocate(size_t bytes) override {
    const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    void* ptr = std::aligned_alloc(kAlignment, rounded);
    if (ptr == nullptr) {
      return internalError("emulated device: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    std::memset(ptr, 0, rounded);
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
        [event] { event->reached.store(true, std::memory_order_release); });
    return static_cast<DeviceEvent>(event);
  }
  bool queryEvent(DeviceEvent event) override { return static_cast<EmulatedEvent*>(event)->done(); }
  Status streamWaitEvent(DeviceStream stream, DeviceEvent event) override {
    if (stream == nullptr) return invalidArgument("emulated device: wait on a null stream");
    auto* awaited = static_cast<EmulatedEvent*>(event);
    static_cast<EmulatedStream*>(stream)->enqueue([awaited] {
      while (!awaited->done()) std::this_thread::yield();
    });
    return Status();
  }
  void destroyEvent(DeviceEvent event) override { delete static_cast<EmulatedEvent*>(event); }

  Result<std::string> exportHandle(void* ptr) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == blocks_.end()) {
      return invalidArgument("emulated device: exportHandle needs the start of an allocation");
    }
    char text[64];
    std::snprintf(text, sizeof(text), "emu:%d:%llx", static_cast<int>(::getpid()),
                  static_cast<unsigned long long>(it->first));
    return std::string(text);
  }

  Result<void*> openHandle(const std::string& handle) override {
    int pid = 0;
    unsigned long long address = 0;
    if (std::sscanf(handle.c_str(), "emu:%d:%llx", &pid, &address) != 2) {
      return invalidArgument("emulated device: malformed IPC handle '" + handle + "'");
    }
    if (pid != static_cast<int>(::getpid())) {
      return unsupported("emulated device: IPC handle of process " + std::to_string(pid) +
                         "; the emulation shares memory only between ranks of one process");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(static_cast<uintptr_t>(address));
    if (it == blocks_.end() || it->second.freed) {
      return notFound("emulated device: IPC handle names no live allocation");
    }
    ++it->second.opens;
    return reinterpret_cast<void*>(it->first);
  }

  void closeHandle(void* ptr) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == blocks_.end() || it->second.opens == 0) return;
    --it->second.opens;
    releaseIfUnused(it);
  }

  Status launchReduce(const DeviceReduceStep& in, DeviceStream stream) override {
    const cuda::RingReduceStep step = cuda::toRingReduceStep(in);
    COLLIE_RETURN_IF_ERROR(cuda::checkRingReduceStep(step));
    auto kernel = cuda::kernelFor<cuda::RingReduceScatterFamily>(in.dtype, in.op);
    if (kernel == nullptr) return invalidArgument("emulated device: bad dtype or op");
    return enqueueLaunch(kernel, step, step.count * dataTypeSize(in.dtype), stream);
  }

  Status launchCopy(const DeviceCopyStep& in, DeviceStream stream) override {
    const cuda::RingCopyStep step = cuda::toRingCopyStep(in);
    COLLIE_RETURN_IF_ERROR(cuda::checkRingCopyStep(step));
    return enqueueLaunch(&cuda::ringAllGatherStepKernel<>, step, step.bytes, stream);
  }

 private:
  struct Block {
    size_t bytes = 0;
    int opens = 0;
    bool freed = false;
  };

  template <typename Handle>
  Status enqueueLaunch(void (*kernel)(Handle), const Handle& handle, uint64_t bytes,
                       DeviceStream stream) {
    if (stream == nullptr) return invalidArgument("emulated device: launch on a null stream");
    const unsigned grid = cuda::launchGrid(bytes, kBlockThreads, kMaxBlocks);
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
    std::free(reinterpret_cast<void*>(it->first));
    blocks_.erase(it);
  }

  mutable std::mutex mutex_;
  std::map<uintptr_t, Block> blocks_;  // start address -> allocation
};

}  // namespace

uint64_t emulatedCopies() { return copies.load(std::memory_order_relaxed); }
uint64_t emulatedKernelLaunches() { return launches.load(std::memory_order_relaxed); }

DeviceRuntime* emulatedDeviceRuntime() {
  static EmulatedRuntime* runtime = new EmulatedRuntime();
  return runtime;
}

}  // namespace collie
