// DeviceRuntime: what the engine's device path needs from a GPU runtime, as an
// interface, so that core never names CUDA. Two implementations exist, chosen by the
// build and at communicator creation (selectDeviceRuntime):
//   - the CUDA runtime (kernels/cuda/cuda_device_runtime.cc, with a device present);
//   - the emulated runtime (kernels/cuda/emulation/emulated_runtime.cc): "device"
//     memory is host memory recorded in a registry, a stream is an in-order worker
//     thread, and the same kernel sources run through the host emulation header. A
//     component of its own, for tests: libcollie_device_emulation.so, loaded on demand
//     (kernels/cuda/emulation/emulated_runtime.h), absent from installed builds.
//
// Contract:
//   - Pointers returned by allocate() are device memory of this runtime:
//     isDevicePointer() is true for every byte of them until free(). They are zero
//     when allocate() returns (no zeroing is left in flight on any stream).
//   - allocateMapped() returns memory both the host and the device read and write
//     (pinned, mapped host memory on CUDA): the engine keeps error words there.
//   - Work on a stream runs in enqueue order. memcpyAsync, launches and recordEvent
//     enqueue and return at once; queryEvent() is true once the stream reached the
//     event (and everything before it finished). streamWaitEvent() makes later work
//     on `stream` wait for `event`. A null DeviceStream is not valid. createStream()
//     makes a stream that also orders with the runtime's default stream (CUDA: a
//     blocking stream, so work a program queued on stream 0 comes first, as for
//     NCCL's collectives on stream 0).
//   - exportHandle(p) describes an allocate() block so that another rank on the same
//     host can openHandle() it (CUDA IPC; the emulation: same process only) and get a
//     pointer to the same memory that its kernels may read and write.
//   - launchFingerprintCheck enqueues the check kernel that opens a collective
//     (DeviceFingerprintCheck); bad arguments return InvalidArgument.
//   - launchScale enqueues PREMUL_SUM's multiply (DeviceScaleStep); bad arguments
//     return InvalidArgument and enqueue nothing.
//   - launchReduce/launchCopy enqueue one step kernel (kernels/cuda/collective_kernels
//     .cuh): wait for the step's flags, reduce or copy, post the flags; see
//     DeviceStepSync. Bad arguments return InvalidArgument and enqueue nothing.
//   - launchBoard enqueues the board kernel of a whole collective (DeviceBoardStep):
//     a grid of step.blocks blocks; bad arguments return InvalidArgument and enqueue
//     nothing.
//   - launchRingProgram enqueues the ring program kernel of a whole ring-shaped
//     schedule (DeviceRingProgram): a grid of program.blocks blocks; bad arguments
//     return InvalidArgument and enqueue nothing.
//   - launchDirect enqueues the direct kernel of a whole collective on registered
//     windows (DeviceDirectStep): a grid of step.blocks blocks; bad arguments return
//     InvalidArgument and enqueue nothing.
//   - allocationOf(p) is the allocate() block (CUDA: the cudaMalloc allocation) that
//     holds p: its start and bytes, for exportHandle; InvalidArgument when p is not in
//     one.
//   - currentDevice()/setCurrentDevice() are the calling thread's current device
//     (CUDA: cudaGetDevice/cudaSetDevice; the emulation keeps one per thread, 0 unless
//     set, ordinals 0..kEmulatedDevices-1).
//   - isCapturing(stream) is true while work enqueued on `stream` would be recorded
//     into a CUDA graph instead of running (cudaStreamIsCapturing; the emulation: a
//     flag its tests set on the stream).
//   - Errors: Status values naming the call; never exceptions, never abort.
// Thread safety: every method may be called from any thread; a stream's order is the
// order in which calls on it return.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "collie/status.h"
#include "collie/types.h"
#include "core/device/device_steps.h"

namespace collie {

using DeviceStream = void*;  // cudaStream_t, or an emulated stream
using DeviceEvent = void*;

inline constexpr int kEmulatedDevices = 8;  // ordinals the emulated runtime accepts

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  virtual std::string name() const = 0;  // "cuda" or "emulated"
  virtual bool isDevicePointer(const void* ptr) const = 0;

  virtual Result<void*> allocate(size_t bytes) = 0;  // zero-filled
  virtual void free(void* ptr) = 0;
  virtual Result<void*> allocateMapped(size_t bytes) = 0;  // zero-filled
  virtual void freeMapped(void* ptr) = 0;

  virtual Result<DeviceStream> createStream() = 0;
  virtual void destroyStream(DeviceStream stream) = 0;  // waits for its work first
  virtual Status memcpyAsync(void* dst, const void* src, size_t bytes, DeviceStream stream) = 0;
  virtual Result<DeviceEvent> recordEvent(DeviceStream stream) = 0;
  virtual bool queryEvent(DeviceEvent event) = 0;
  virtual Status streamWaitEvent(DeviceStream stream, DeviceEvent event) = 0;
  virtual void destroyEvent(DeviceEvent event) = 0;

  virtual Result<int> currentDevice() = 0;
  virtual Status setCurrentDevice(int device) = 0;
  virtual Result<bool> isCapturing(DeviceStream stream) = 0;

  struct Allocation {
    void* base = nullptr;
    size_t bytes = 0;
  };
  virtual Result<Allocation> allocationOf(const void* ptr) = 0;
  virtual Result<std::string> exportHandle(void* ptr) = 0;
  virtual Result<void*> openHandle(const std::string& handle) = 0;
  virtual void closeHandle(void* ptr) = 0;

  virtual Status launchReduce(const DeviceReduceStep& step, DeviceStream stream) = 0;
  virtual Status launchCopy(const DeviceCopyStep& step, DeviceStream stream) = 0;
  virtual Status launchScale(const DeviceScaleStep& step, DeviceStream stream) = 0;
  virtual Status launchFingerprintCheck(const DeviceFingerprintCheck& check,
                                        DeviceStream stream) = 0;
  virtual Status launchBoard(const DeviceBoardStep& step, DeviceStream stream) = 0;
  virtual Status launchRingProgram(const DeviceRingProgram& program, DeviceStream stream) = 0;
  virtual Status launchDirect(const DeviceDirectStep& step, DeviceStream stream) = 0;
};

// Defined by the build (kernels/): the CUDA runtime when CUDA is built and a device is
// present, null otherwise; and the emulated runtime, loaded from its library on the
// first call, or NotFound naming what was tried when this build or installation has
// none. Process-wide singletons, never destroyed.
DeviceRuntime* hardwareDeviceRuntime();
Result<DeviceRuntime*> emulatedDeviceRuntime();
// The file emulatedDeviceRuntime() loads (from libcollie's folder, then the library path).
inline constexpr const char* kDeviceEmulationLibrary = "libcollie_device_emulation.so";

// The runtime a new communicator uses: a real device first, then the emulation when
// `emulation` (its COLLIE_DEVICE_EMULATION, core/device/device_knobs.h) asks for it, else
// null (device buffers are then Unsupported). Fails (NotFound, naming the knob) only when
// the emulation is asked for, is not there, and no device is present.
Result<DeviceRuntime*> selectDeviceRuntime(bool emulation);

// Polls `event` (sleeping between polls) until it completed, true, or `deadline` passed,
// false.
bool waitForEvent(DeviceRuntime& runtime, DeviceEvent event,
                  std::chrono::steady_clock::time_point deadline);

}  // namespace collie
