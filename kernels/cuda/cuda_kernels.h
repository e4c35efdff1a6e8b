// Host API of the CUDA kernels (built only with CUDA, into the static library
// collie_cuda that libcollie links): launches one step kernel of
// collective_kernels.cuh on a stream, and answers device queries.
//
// Contract:
//   - launch*() validate the handle (counts of sources/destinations, non-null
//     pointers for a non-empty step, dtype/op) and return InvalidArgument without
//     launching when it is wrong; otherwise they enqueue the kernel on
//     config.stream (a cudaStream_t; null is the legacy default stream) and return
//     at once. A launch failure (no device, bad configuration) is a SystemError-style
//     Unsupported/Internal status naming the CUDA error. Errors that happen while the
//     kernel runs (a step timeout) are reported through the handle's DeviceStepSync::error.
//   - deviceCount() is 0 when there is no driver or no device (never an error).
//   - isDevicePointer(p) is true for device or managed memory of any device.
// Thread safety: all functions may be called from any thread (CUDA runtime rules).
#pragma once

#include "collie/status.h"
#include "collie/types.h"
#include "kernels/cuda/device_handles.h"

namespace collie::cuda {

// grid 0: the launch sizes the grid. A step: up to 16 blocks. The bare reduce-copy: the
// blocks resident on every SM while its buffers fit in L2, a grid covering the buffers
// beyond (and there, for two sources and one destination, its streaming kernel in
// blocks of 128 threads, whatever `block` says); launchReduceCopy's comment says why.
struct LaunchConfig {
  unsigned grid = 0;
  unsigned block = 256;  // threads per block, a multiple of 32, at most 1024
  void* stream = nullptr;
};

Status launchReduceCopy(const ReduceCopyArgs& args, DataType dtype, ReduceOp op,
                        const LaunchConfig& config);
// PREMUL_SUM's multiply (DeviceScaleStep); a null pointer with a non-zero count or a bad dtype
// is InvalidArgument.
Status launchScale(const DeviceScaleStep& args, DataType dtype, const LaunchConfig& config);
Status launchRingReduceScatterStep(const DeviceReduceStep& step, DataType dtype, ReduceOp op,
                                   const LaunchConfig& config);
Status launchRingAllGatherStep(const DeviceCopyStep& step, const LaunchConfig& config);
Status launchTreeReduce(const TreeReduceStep& step, DataType dtype, ReduceOp op,
                        const LaunchConfig& config);
Status launchTreeBroadcast(const TreeBroadcastStep& step, const LaunchConfig& config);
// step.blocks blocks of kBoardBlockThreads (config.grid and config.block are ignored).
Status launchBoard(const DeviceBoardStep& step, const LaunchConfig& config);
// program.blocks blocks of kRingBlockThreads (config.grid and config.block are ignored).
Status launchRingProgram(const DeviceRingProgram& program, const LaunchConfig& config);
// step.blocks blocks of kDirectBlockThreads (config.grid and config.block are ignored).
Status launchDirect(const DeviceDirectStep& step, const LaunchConfig& config);
// One block of config.block threads (config.grid is ignored).
Status launchFingerprintCheck(const DeviceFingerprintCheck& check, const LaunchConfig& config);

int deviceCount();
bool isDevicePointer(const void* ptr);

}  // namespace collie::cuda
