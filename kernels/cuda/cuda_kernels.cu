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

// Blocks of `block` threads of `kernel` that are resident on every SM of the current
// device at once (the bare reduce-copy's grid: it streams whole buffers, unlike a
// step's one slot, and a second wave of blocks would leave SMs idle at its end).
// Cached per kernel and device.
unsigned residentBlocks(const void* kernel, unsigned block) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, unsigned>, unsigned> known;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return kDefaultMaxBlocks;
  }
  const auto key = std::make_tuple(kernel, device, block);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(key); it != known.end()) return it->second;
  int sms = 0, perSm = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, static_cast<int>(block), 0) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return kDefaultMaxBlocks;
  }
  const unsigned blocks =
      std::max(kDefaultMaxBlocks, static_cast<unsigned>(sms) * static_cast<unsigned>(perSm));
  known.emplace(key, blocks);
  return blocks;
}

template <typename Handle>
Status launch(void (*kernel)(Handle), const Handle& handle, uint64_t bytes,
              const LaunchConfig& config, const char* what,
              unsigned maxBlocks = kDefaultMaxBlocks) {
  if (kernel == nullptr) return invalidArgument(std::string("cuda: ") + what + ": bad dtype or op");
  COLLIE_RETURN_IF_ERROR(checkConfig(config));
  const unsigned grid = config.grid != 0 ? config.grid : launchGrid(bytes, config.block, maxBlocks);
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
  auto* kernel = kernelFor<ReduceCopyFamily>(dtype, op);
  const unsigned maxBlocks =
      kernel != nullptr ? residentBlocks(reinterpret_cast<const void*>(kernel), config.block) : 1;
  return launch(kernel, args, args.count * dataTypeSize(dtype), config, "reduce-copy launch",
                maxBlocks);
}

Status launchScale(const ScaleArgs& args, DataType dtype, const LaunchConfig& config) {
  if (nonEmptyHasNull(args.count, {args.src, args.dst})) {
    return invalidArgument("cuda: scale has a null buffer");
  }
  if (args.count == 0) return Status();
  const ScaleFn kernel = scaleKernelFor(dtype);
  const unsigned maxBlocks =
      kernel != nullptr ? residentBlocks(reinterpret_cast<const void*>(kernel), config.block) : 1;
  return launch(kernel, args, args.count * dataTypeSize(dtype), config, "scale launch", maxBlocks);
}

Status launchRingReduceScatterStep(const RingReduceStep& step, DataType dtype, ReduceOp op,
                                   const LaunchConfig& config) {
  COLLIE_RETURN_IF_ERROR(checkRingReduceStep(step));
  return launch(kernelFor<RingReduceScatterFamily>(dtype, op), step,
                step.count * dataTypeSize(dtype), config, "ring reduce-scatter launch");
}

Status launchRingAllGatherStep(const RingCopyStep& step, const LaunchConfig& config) {
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

Status launchFingerprintCheck(const FingerprintCheck& check, const LaunchConfig& config) {
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
