// Device bandwidth of the reduce-copy kernel (2 inputs -> 1 output, float32 and
// bfloat16 sum) against cudaMemcpy device-to-device in the same run, the HBM roofline,
// at sizes 1 MiB x4 .. --max-bytes (default 256 MiB). Figures are bytes moved per
// second: 3 x size for reduce-copy (two reads, one write), 2 x size for the copy.
// Each figure is the best of --reps batches of --iters back-to-back calls, timed on
// the host between two device synchronisations (the kernel is launched by libcollie's
// own CUDA runtime, so events of this program's runtime are not used to time it).
// Prints one JSON object. Without a device: "skipped: no CUDA device", exit 77.
//
// Usage: gpu_reduce_copy_bench [--max-bytes N] [--iters N] [--reps N]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "core/kernel/device_memory.h"
#include "kernels/cuda/cuda_kernels.h"

namespace {

double bestSeconds(int reps, int iters, const std::function<bool()>& call) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    if (cudaDeviceSynchronize() != cudaSuccess) return -1;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      if (!call()) return -1;
    }
    if (cudaDeviceSynchronize() != cudaSuccess) return -1;
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    best = std::min(best, elapsed.count() / iters);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  size_t maxBytes = size_t{256} << 20;
  int iters = 20;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--max-bytes") maxBytes = std::strtoull(argv[i + 1], nullptr, 10);
    if (flag == "--iters") iters = std::atoi(argv[i + 1]);
    if (flag == "--reps") reps = std::atoi(argv[i + 1]);
  }
  if (collie::cudaDeviceCount() == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  void *a = nullptr, *b = nullptr, *c = nullptr;
  if (cudaMalloc(&a, maxBytes) != cudaSuccess || cudaMalloc(&b, maxBytes) != cudaSuccess ||
      cudaMalloc(&c, maxBytes) != cudaSuccess) {
    std::fprintf(stderr, "gpu_reduce_copy_bench: cudaMalloc of 3 x %zu bytes failed\n", maxBytes);
    return 1;
  }
  cudaMemset(a, 0, maxBytes);  // zeros: finite in every type
  cudaMemset(b, 0, maxBytes);
  std::printf("{\"device\": \"%s\", \"iters\": %d, \"reps\": %d, \"rows\": [", prop.name, iters,
              reps);
  const char* separator = "";
  for (size_t bytes = size_t{1} << 20; bytes <= maxBytes; bytes *= 4) {
    const double copy = bestSeconds(reps, iters, [&] {
      return cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice, nullptr) == cudaSuccess;
    });
    double reduce[2] = {};
    const collie::DataType types[2] = {collie::DataType::kFloat32, collie::DataType::kBFloat16};
    for (int t = 0; t < 2; ++t) {
      collie::cuda::ReduceCopyArgs args;
      args.srcs[0] = a;
      args.srcs[1] = b;
      args.nsrcs = 2;
      args.dsts[0] = c;
      args.ndsts = 1;
      args.count = bytes / collie::dataTypeSize(types[t]);
      reduce[t] = bestSeconds(reps, iters, [&] {
        return collie::cuda::launchReduceCopy(args, types[t], collie::ReduceOp::kSum, {}).isOk();
      });
    }
    if (copy <= 0 || reduce[0] <= 0 || reduce[1] <= 0) {
      std::fprintf(stderr, "gpu_reduce_copy_bench: a CUDA call failed at %zu bytes: %s\n", bytes,
                   cudaGetErrorString(cudaGetLastError()));
      return 1;
    }
    std::printf(
        "%s\n  {\"bytes\": %zu, \"memcpy_us\": %.3f, \"memcpy_GBps\": %.1f, \"float32_us\": %.3f, "
        "\"float32_GBps\": %.1f, \"bfloat16_us\": %.3f, \"bfloat16_GBps\": %.1f}",
        separator, bytes, copy * 1e6, 2.0 * bytes / copy / 1e9, reduce[0] * 1e6,
        3.0 * bytes / reduce[0] / 1e9, reduce[1] * 1e6, 3.0 * bytes / reduce[1] / 1e9);
    separator = ",";
  }
  std::printf("\n]}\n");
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 0;
}
