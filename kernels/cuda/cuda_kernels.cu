// Host side of the CUDA kernels: validation, grid choice, cudaLaunchKernel. The
// instantiations of every (type, op) are made here, through kernel_table.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/kernel_table.h"
#include "kernels/cuda/step_checks.h"

namespace collie::cuda {
namespace {

Status cudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status();
  std::string message = std::string("cuda: ") + what + " failed: " + cudaGetErrorName(err) + " (" +
                        cudaGetErrorString(err) + ")";
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
    return unsupported(message + "; this machine has no usable CUDA device");
  }
  return internalError(message);
}

Status checkConfig(const LaunchConfig& config) {
  if (config.block == 0 || config.block > 1024 || config.block % 32 != 0) {
    return invalidArgument("cuda: block size " + std::to_string(config.block) +
                           " must be a multiple of 32 in [32, 1024]");
  }
  return Status();
}

// What the grid of a kernel over whole buffers (the bare reduce-copy, scale) depends on,
// per kernel, device and block size.
struct GridLimits {
  unsigned residentBlocks = kDefaultMaxBlocks;  // blocks resident on every SM at once
  uint64_t l2Bytes = 0;
};

GridLimits gridLimitsOf(const void* kernel, unsigned block) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, unsigned>, GridLimits> known;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return GridLimits();
  }
  const auto key = std::make_tuple(kernel, device, block);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(key); it != known.end()) return it->second;
  int sms = 0, perSm = 0, l2 = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, static_cast<int>(block), 0) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return GridLimits();
  }
  GridLimits grid;
  grid.residentBlocks =
      std::max(kDefaultMaxBlocks, static_cast<unsigned>(sms) * static_cast<unsigned>(perSm));
  grid.l2Bytes = static_cast<uint64_t>(l2);
  known.emplace(key, grid);
  return grid;
}

// The bare reduce-copy's blocks beyond the L2 cache, per thread: 4 packs of the
// general kernel, 1 of the streaming one (in blocks of kStreamingBlockThreads).
inline constexpr uint64_t kBeyondL2PacksPerThread = 4;
inline constexpr unsigned kStreamingBlockThreads = 128;

template <typename Handle>
Status launch(void (*kernel)(Handle), const Handle& handle, uint64_t bytes,
              const LaunchConfig& config, const char* what) {
  if (kernel == nullptr) return invalidArgument(std::string("cuda: ") + what + ": bad dtype or op");
  COLLIE_RETURN_IF_ERROR(checkConfig(config));
  const unsigned grid =
      config.grid != 0 ? config.grid : launchGrid(bytes, config.block, kStepMaxBlocks);
  void* args[] = {const_cast<Handle*>(&handle)};
  return cudaStatus(
      cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(grid), dim3(config.block), args,
                       0, static_cast<cudaStream_t>(config.stream)),
      what);
}

}  // namespace

Status launchReduceCopy(const ReduceCopyArgs& args, DataType dtype, ReduceOp op,
                        const LaunchConfig& config) {
  if (args.nsrcs < 1 || args.nsrcs > kMaxSources || args.ndsts < 1 ||
      args.ndsts > kMaxDestinations) {
    return invalidArgument("cuda: reduce-copy needs 1.." + std::to_string(kMaxSources) +
                           " sources and 1.." + std::to_string(kMaxDestinations) + " destinations");
  }
  for (int i = 0; i < args.nsrcs; ++i) {
    if (nonEmptyHasNull(args.count, {args.srcs[i]})) return invalidArgument("cuda: null source");
  }
  for (int i = 0; i < args.ndsts; ++i) {
    if (nonEmptyHasNull(args.count, {args.dsts[i]})) {
      return invalidArgument("cuda: null destination");
    }
  }
  // The grid, unless the caller gave one. Measured on an H200 (float and bfloat16 sum
  // of two buffers into a third, docs/decisions/cuda-reduce-copy-grid.md):
  //   - buffers that fit in L2 together: the blocks resident on every SM at once, each
  //     thread looping over the packs;
  //   - beyond L2: a grid covering the whole body, as the streaming kernel (one pack
  //     per thread) for two sources and one destination, else the general kernel with
  //     four packs per thread. A loop over resident blocks left HBM 6-10% idle there.
  const size_t elementSize = dataTypeSize(dtype);
  const uint64_t bytes = args.count * elementSize;
  auto* kernel = kernelFor<ReduceCopyFamily>(dtype, op);
  if (kernel == nullptr || config.grid != 0) {
    return launch(kernel, args, bytes, config, "reduce-copy launch");
  }
  COLLIE_RETURN_IF_ERROR(checkConfig(config));
  const GridLimits device = gridLimitsOf(reinterpret_cast<const void*>(kernel), config.block);
  const uint64_t touched = bytes * static_cast<uint64_t>(args.nsrcs + args.ndsts);
  LaunchConfig sized = config;
  if (device.l2Bytes == 0 || touched <= device.l2Bytes) {
    sized.grid = launchGrid(bytes, config.block, device.residentBlocks);
  } else if (streamsTwoToOne(args, elementSize)) {
    sized.block = kStreamingBlockThreads;
    sized.grid = streamingBlocks(args.count, elementSize, sized.block);
    return launch(kernelFor<StreamingReduceCopyFamily>(dtype, op), args, bytes, sized,
                  "reduce-copy launch");
  } else {
    sized.grid = launchGrid(bytes / kBeyondL2PacksPerThread, config.block, kMaxGridBlocks);
  }
  return launch(kernel, args, bytes, sized, "reduce-copy launch");
}

Status launchScale(const DeviceScaleStep& args, DataType dtype, const LaunchConfig& config) {
  if (nonEmptyHasNull(args.count, {args.src, args.dst})) {
    return invalidArgument("cuda: scale has a null buffer");
  }
  if (args.count == 0) return Status();
  const ScaleFn kernel = scaleKernelFor(dtype);
  const uint64_t bytes = args.count * dataTypeSize(dtype);
  LaunchConfig sized = config;
  if (kernel != nullptr && sized.grid == 0 && checkConfig(sized).isOk()) {
    // Resident blocks at every size (the scale kernel's grid was not measured beyond L2).
    sized.grid =
        launchGrid(bytes, sized.block,
                   gridLimitsOf(reinterpret_cast<const void*>(kernel), sized.block).residentBlocks);
  }
  return launch(kernel, args, bytes, sized, "scale launch");
}

Status launchRingReduceScatterStep(const DeviceReduceStep& step, DataType dtype, ReduceOp op,
                                   const LaunchConfig& config) {
  COLLIE_RETURN_IF_ERROR(checkRingReduceStep(step));
  return launch(kernelFor<RingReduceScatterFamily>(dtype, op), step,
                step.count * dataTypeSize(dtype), config, "ring reduce-scatter launch");
}

Status launchRingAllGatherStep(const DeviceCopyStep& step, const LaunchConfig& config) {
  COLLIE_RETURN_IF_ERROR(checkRingCopyStep(step));
  return launch(&ringAllGatherStepKernel<>, step, step.bytes, config, "ring all-gather launch");
}

Status launchTreeReduce(const TreeReduceStep& step, DataType dtype, ReduceOp op,
                        const LaunchConfig& config) {
  if (step.nchildren < 0 || step.nchildren > kMaxTreeChildren) {
    return invalidArgument("cuda: tree reduce takes 0.." + std::to_string(kMaxTreeChildren) +
                           " children");
  }
  if (nonEmptyHasNull(step.count, {step.local, step.out}) ||
      (step.nchildren > 0 && nonEmptyHasNull(step.count, {step.children[0]})) ||
      (step.nchildren > 1 && nonEmptyHasNull(step.count, {step.children[1]}))) {
    return invalidArgument("cuda: tree reduce has a null buffer");
  }
  COLLIE_RETURN_IF_ERROR(checkSync(step.sync, "tree reduce"));
  return launch(kernelFor<TreeReduceFamily>(dtype, op), step, step.count * dataTypeSize(dtype),
                config, "tree reduce launch");
}

Status launchTreeBroadcast(const TreeBroadcastStep& step, const LaunchConfig& config) {
  if (step.nchildren < 0 || step.nchildren > kMaxTreeChildren) {
    return invalidArgument("cuda: tree broadcast takes 0.." + std::to_string(kMaxTreeChildren) +
                           " children");
  }
  if (nonEmptyHasNull(step.bytes, {step.src}) ||
      (step.nchildren > 0 && nonEmptyHasNull(step.bytes, {step.childOut[0]})) ||
      (step.nchildren > 1 && nonEmptyHasNull(step.bytes, {step.childOut[1]}))) {
    return invalidArgument("cuda: tree broadcast has a null buffer");
  }
  COLLIE_RETURN_IF_ERROR(checkSync(step.sync, "tree broadcast"));
  return launch(&treeBroadcastKernel<>, step, step.bytes, config, "tree broadcast launch");
}

Status launchBoard(const DeviceBoardStep& step, const LaunchConfig& config) {
  COLLIE_RETURN_IF_ERROR(checkBoardStep(step));
  LaunchConfig sized = config;
  sized.grid = step.blocks;
  sized.block = kBoardBlockThreads;
  return launch(boardKernelFor(step), step, 0, sized, "board launch");
}

Status launchRingProgram(const DeviceRingProgram& program, const LaunchConfig& config) {
  COLLIE_RETURN_IF_ERROR(checkRingProgram(program));
  LaunchConfig sized = config;
  sized.grid = program.blocks;
  sized.block = kRingBlockThreads;
  return launch(ringProgramKernelFor(program), program, 0, sized, "ring program launch");
}

Status launchDirect(const DeviceDirectStep& step, const LaunchConfig& config) {
  COLLIE_RETURN_IF_ERROR(checkDirectStep(step));
  LaunchConfig sized = config;
  sized.grid = step.blocks;
  sized.block = kDirectBlockThreads;
  return launch(directKernelFor(step), step, 0, sized, "direct launch");
}

Status launchFingerprintCheck(const DeviceFingerprintCheck& check, const LaunchConfig& config) {
  COLLIE_RETURN_IF_ERROR(checkFingerprintCheck(check));
  LaunchConfig one = config;
  one.grid = 1;
  one.block = 32;
  return launch(&fingerprintCheckKernel<>, check, 0, one, "fingerprint check launch");
}

int deviceCount() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the error so later calls do not see it
      return 0;
    }
    return n;
  }();
  return count;
}

bool isDevicePointer(const void* ptr) {
  if (ptr == nullptr || deviceCount() == 0) return false;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

}  // namespace collie::cuda
