// The CUDA DeviceRuntime (core/device/device_runtime.h): the CUDA runtime API for
// memory, streams, events and IPC handles, and the launch API of cuda_kernels.h for
// the step kernels. hardwareDeviceRuntime() returns it only when a device is present.
//
// Ran on an H200 (scripts/gpu-check.sh, docs/gpu/); the tests here run the emulated
// runtime, whose logic this file mirrors.
#include <cuda.h>  // the driver's types, for cuMemGetAddressRange through the runtime
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "core/device/device_runtime.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/step_checks.h"

namespace collie {
namespace {

Status cudaCall(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status();
  (void)cudaGetLastError();
  return internalError(std::string("cuda: ") + what + " failed: " + cudaGetErrorName(err) + " (" +
                       cudaGetErrorString(err) + ")");
}

struct IpcHandle {
  int32_t pid = 0;
  uintptr_t address = 0;
  cudaIpcMemHandle_t ipc;
};

class CudaRuntime final : public DeviceRuntime {
 public:
  std::string name() const override { return "cuda"; }
  bool isDevicePointer(const void* ptr) const override { return cuda::isDevicePointer(ptr); }

  // Zero-filled before it returns: cudaMemset alone is asynchronous on the legacy
  // default stream, which a non-blocking stream does not wait for, so a copy queued
  // on such a stream right after could land first and then be zeroed (seen on an H200
  // with ranks of several processes time-sliced on one GPU).
  Result<void*> allocate(size_t bytes) override {
    void* ptr = nullptr;
    const size_t n = std::max<size_t>(bytes, 1);
    COLLIE_RETURN_IF_ERROR(cudaCall(cudaMalloc(&ptr, n), "cudaMalloc"));
    Status zeroed = cudaCall(cudaMemset(ptr, 0, n), "cudaMemset");
    if (zeroed.isOk()) zeroed = cudaCall(cudaStreamSynchronize(cudaStreamLegacy), "cudaMemset");
    if (!zeroed.isOk()) {
      cudaFree(ptr);
      return zeroed;
    }
    return ptr;
  }
  void free(void* ptr) override { (void)cudaFree(ptr); }

  Result<void*> allocateMapped(size_t bytes) override {
    void* ptr = nullptr;
    COLLIE_RETURN_IF_ERROR(cudaCall(cudaHostAlloc(&ptr, std::max<size_t>(bytes, 1),
                                                  cudaHostAllocMapped | cudaHostAllocPortable),
                                    "cudaHostAlloc"));
    std::memset(ptr, 0, std::max<size_t>(bytes, 1));
    return ptr;  // unified addressing: the device uses the same address
  }
  void freeMapped(void* ptr) override { (void)cudaFreeHost(ptr); }

  // A blocking stream: it orders with the legacy default stream (stream 0) as NCCL's
  // collectives on stream 0 do, so a program's cudaMemcpy/cudaMemset before a
  // collective without a stream is complete before its kernels read the buffers.
  Result<DeviceStream> createStream() override {
    cudaStream_t stream = nullptr;
    COLLIE_RETURN_IF_ERROR(
        cudaCall(cudaStreamCreateWithFlags(&stream, cudaStreamDefault), "cudaStreamCreate"));
    return static_cast<DeviceStream>(stream);
  }
  void destroyStream(DeviceStream stream) override {
    (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream));
  }

  Status memcpyAsync(void* dst, const void* src, size_t bytes, DeviceStream stream) override {
    return cudaCall(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)),
        "cudaMemcpyAsync");
  }

  Result<DeviceEvent> recordEvent(DeviceStream stream) override {
    cudaEvent_t event = nullptr;
    COLLIE_RETURN_IF_ERROR(
        cudaCall(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"));
    Status recorded =
        cudaCall(cudaEventRecord(event, static_cast<cudaStream_t>(stream)), "cudaEventRecord");
    if (!recorded.isOk()) {
      cudaEventDestroy(event);
      return recorded;
    }
    return static_cast<DeviceEvent>(event);
  }
  // An error of the stream (a failed kernel) also ends the wait; the caller reads the
  // error word to tell.
  bool queryEvent(DeviceEvent event) override {
    const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) return false;
    if (err != cudaSuccess) (void)cudaGetLastError();
    return true;
  }
  Status streamWaitEvent(DeviceStream stream, DeviceEvent event) override {
    return cudaCall(
        cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0),
        "cudaStreamWaitEvent");
  }
  void destroyEvent(DeviceEvent event) override {
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }

  // A handle is (pid, address, cudaIpcMemHandle_t): CUDA refuses to open an IPC
  // handle in the process that made it, so ranks that are threads of one process use
  // the address itself (unified addressing).
  Result<int> currentDevice() override {
    int device = 0;
    COLLIE_RETURN_IF_ERROR(cudaCall(cudaGetDevice(&device), "cudaGetDevice"));
    return device;
  }
  Status setCurrentDevice(int device) override {
    return cudaCall(cudaSetDevice(device), "cudaSetDevice");
  }
  Result<bool> isCapturing(DeviceStream stream) override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    COLLIE_RETURN_IF_ERROR(
        cudaCall(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status),
                 "cudaStreamIsCapturing"));
    return status != cudaStreamCaptureStatusNone;
  }

  // The driver's cuMemGetAddressRange, reached through the runtime (no link to libcuda).
  Result<Allocation> allocationOf(const void* ptr) override {
    using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
    static GetAddressRange getRange = [] {
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
      if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                           &found) != cudaSuccess ||
          found != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        fn = nullptr;
      }
      return reinterpret_cast<GetAddressRange>(fn);
    }();
    if (getRange == nullptr) return unsupported("cuda: the driver has no cuMemGetAddressRange");
    CUdeviceptr base = 0;
    size_t bytes = 0;
    if (getRange(&base, &bytes, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) {
      return invalidArgument("cuda: no device allocation holds the address");
    }
    return Allocation{reinterpret_cast<void*>(base), bytes};
  }

  Result<std::string> exportHandle(void* ptr) override {
    IpcHandle handle;
    handle.pid = static_cast<int32_t>(::getpid());
    handle.address = reinterpret_cast<uintptr_t>(ptr);
    COLLIE_RETURN_IF_ERROR(cudaCall(cudaIpcGetMemHandle(&handle.ipc, ptr), "cudaIpcGetMemHandle"));
    return std::string(reinterpret_cast<const char*>(&handle), sizeof(handle));
  }
  Result<void*> openHandle(const std::string& text) override {
    IpcHandle handle;
    if (text.size() != sizeof(handle)) {
      return invalidArgument("cuda: IPC handle of " + std::to_string(text.size()) +
                             " bytes, expected " + std::to_string(sizeof(handle)));
    }
    std::memcpy(&handle, text.data(), sizeof(handle));
    if (handle.pid == static_cast<int32_t>(::getpid())) {
      void* ptr = reinterpret_cast<void*>(handle.address);
      COLLIE_RETURN_IF_ERROR(enablePeerAccessTo(ptr));
      return ptr;
    }
    // A process opens an allocation once (CUDA refuses a second open of the same
    // handle); later opens share the mapping and count.
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string key(reinterpret_cast<const char*>(&handle.ipc), sizeof(handle.ipc));
    if (auto known = byHandle_.find(key); known != byHandle_.end()) {
      ++opened_[known->second].opens;
      return known->second;
    }
    void* ptr = nullptr;
    COLLIE_RETURN_IF_ERROR(
        cudaCall(cudaIpcOpenMemHandle(&ptr, handle.ipc, cudaIpcMemLazyEnablePeerAccess),
                 "cudaIpcOpenMemHandle"));
    byHandle_[key] = ptr;
    opened_[ptr] = Opened{key, 1};
    return ptr;
  }
  // Ranks that are threads of one process on different GPUs (ncclCommInitAll, one thread
  // per device) use each other's addresses as they are, and a kernel on this thread's
  // current device may only load and store another device's memory once peer access
  // from this device to that one is on (cudaIpcMemLazyEnablePeerAccess does it for
  // handles opened by another process). Unsupported when the two devices have no
  // peer-to-peer path: the caller then stages through host memory on every rank.
  static Status enablePeerAccessTo(const void* ptr) {
    cudaPointerAttributes attributes{};
    COLLIE_RETURN_IF_ERROR(
        cudaCall(cudaPointerGetAttributes(&attributes, ptr), "cudaPointerGetAttributes"));
    int current = 0;
    COLLIE_RETURN_IF_ERROR(cudaCall(cudaGetDevice(&current), "cudaGetDevice"));
    if (attributes.type != cudaMemoryTypeDevice || attributes.device == current) return Status();
    int reachable = 0;
    COLLIE_RETURN_IF_ERROR(cudaCall(cudaDeviceCanAccessPeer(&reachable, current, attributes.device),
                                    "cudaDeviceCanAccessPeer"));
    if (reachable == 0) {
      return unsupported("cuda: device " + std::to_string(current) + " cannot access device " +
                         std::to_string(attributes.device) +
                         "'s memory (no peer-to-peer path between them)");
    }
    const cudaError_t enabled = cudaDeviceEnablePeerAccess(attributes.device, 0);
    if (enabled == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();  // another rank's window on that device came first
      return Status();
    }
    return cudaCall(enabled, "cudaDeviceEnablePeerAccess");
  }

  void closeHandle(void* ptr) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = opened_.find(ptr);
      if (it == opened_.end()) return;  // same-process address: nothing to close
      if (--it->second.opens > 0) return;
      byHandle_.erase(it->second.key);
      opened_.erase(it);
    }
    (void)cudaIpcCloseMemHandle(ptr);
  }

  Status launchReduce(const DeviceReduceStep& step, DeviceStream stream) override {
    cuda::LaunchConfig config;
    config.stream = stream;
    return cuda::launchRingReduceScatterStep(step, step.dtype, step.op, config);
  }
  Status launchCopy(const DeviceCopyStep& step, DeviceStream stream) override {
    cuda::LaunchConfig config;
    config.stream = stream;
    return cuda::launchRingAllGatherStep(step, config);
  }
  Status launchScale(const DeviceScaleStep& step, DeviceStream stream) override {
    cuda::LaunchConfig config;
    config.stream = stream;
    return cuda::launchScale(step, step.dtype, config);
  }
  Status launchFingerprintCheck(const DeviceFingerprintCheck& check, DeviceStream stream) override {
    cuda::LaunchConfig config;
    config.stream = stream;
    return cuda::launchFingerprintCheck(check, config);
  }
  Status launchBoard(const DeviceBoardStep& step, DeviceStream stream) override {
    cuda::LaunchConfig config;
    config.stream = stream;
    return cuda::launchBoard(step, config);
  }
  Status launchRingProgram(const DeviceRingProgram& program, DeviceStream stream) override {
    cuda::LaunchConfig config;
    config.stream = stream;
    return cuda::launchRingProgram(program, config);
  }
  Status launchDirect(const DeviceDirectStep& step, DeviceStream stream) override {
    cuda::LaunchConfig config;
    config.stream = stream;
    return cuda::launchDirect(step, config);
  }

 private:
  struct Opened {
    std::string key;  // the cudaIpcMemHandle_t's bytes
    int opens = 0;
  };
  std::mutex mutex_;
  std::map<void*, Opened> opened_;         // pointers from cudaIpcOpenMemHandle
  std::map<std::string, void*> byHandle_;  // and the handles they came from
};

}  // namespace

DeviceRuntime* hardwareDeviceRuntime() {
  if (cuda::deviceCount() == 0) return nullptr;
  static CudaRuntime* runtime = new CudaRuntime();
  return runtime;
}

}  // namespace collie
