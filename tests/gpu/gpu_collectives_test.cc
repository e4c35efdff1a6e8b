// GPU tests: the CUDA kernels on device memory, and the collectives on device buffers.
// Without a CUDA device the program prints "skipped: no CUDA device" and exits 77,
// which ctest reports as skipped (SKIP_RETURN_CODE), never as passed.
//
// The kernel tests are the device-side twins of tests/emulation/cuda_kernels_emulation
// _test.cc: the same checks (tests/support/kernel_checks.h), run on a device mirror of
// the host buffers, with the sizes of the emulation test plus one large count
// (COLLIE_GPU_KERNEL_LARGE elements, default 2^22 + 3; 0 leaves it out).
//
// Ran on an NVIDIA H200 through scripts/gpu-check.sh (reports in bench/results/gpu/); this
// project's own machines have no GPU. The collectives test exercises the engine's
// device path (docs/cuda.md) with ranks as threads of one process.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "core/kernel/device_memory.h"
#include "kernels/cuda/cuda_kernels.h"
#include "support/kernel_checks.h"
#include "support/rank_threads.h"
#include "support/reference.h"

namespace collie {
namespace {

// Runs each kernel on a device copy of the arena (same offsets modulo 256: cudaMalloc
// returns 256-byte aligned blocks) and copies the arena back.
class GpuLauncher : public testing::KernelLauncher {
 public:
  explicit GpuLauncher(cuda::LaunchConfig config = {}) : config_(config) {}
  ~GpuLauncher() override { cudaFree(device_); }

  void reduceCopy(testing::KernelArena& arena, const cuda::ReduceCopyArgs& args, DataType dtype,
                  ReduceOp op) override {
    cuda::ReduceCopyArgs moved = args;
    if (!toDevice(arena)) return;
    for (const void*& p : moved.srcs) p = relocate(arena, p);
    for (void*& p : moved.dsts) p = relocate(arena, p);
    finish(arena, cuda::launchReduceCopy(moved, dtype, op, config_));
  }
  void ringReduceStep(testing::KernelArena& arena, const DeviceReduceStep& step, DataType dtype,
                      ReduceOp op) override {
    DeviceReduceStep moved = step;
    if (!toDevice(arena)) return;
    moved.local = relocate(arena, step.local);
    moved.incoming = relocate(arena, step.incoming);
    moved.out = relocate(arena, step.out);
    moved.peerOut = relocate(arena, step.peerOut);
    finish(arena, cuda::launchRingReduceScatterStep(moved, dtype, op, config_));
  }
  void ringCopyStep(testing::KernelArena& arena, const DeviceCopyStep& step) override {
    DeviceCopyStep moved = step;
    if (!toDevice(arena)) return;
    moved.src = relocate(arena, step.src);
    moved.out = relocate(arena, step.out);
    moved.peerOut = relocate(arena, step.peerOut);
    finish(arena, cuda::launchRingAllGatherStep(moved, config_));
  }
  void treeReduce(testing::KernelArena& arena, const cuda::TreeReduceStep& step, DataType dtype,
                  ReduceOp op) override {
    cuda::TreeReduceStep moved = step;
    if (!toDevice(arena)) return;
    moved.local = relocate(arena, step.local);
    for (const void*& p : moved.children) p = relocate(arena, p);
    moved.out = relocate(arena, step.out);
    finish(arena, cuda::launchTreeReduce(moved, dtype, op, config_));
  }
  void treeBroadcast(testing::KernelArena& arena, const cuda::TreeBroadcastStep& step) override {
    cuda::TreeBroadcastStep moved = step;
    if (!toDevice(arena)) return;
    moved.src = relocate(arena, step.src);
    moved.out = relocate(arena, step.out);
    for (void*& p : moved.childOut) p = relocate(arena, p);
    finish(arena, cuda::launchTreeBroadcast(moved, config_));
  }
  void scale(testing::KernelArena& arena, const DeviceScaleStep& args, DataType dtype) override {
    DeviceScaleStep moved = args;
    if (!toDevice(arena)) return;
    moved.src = relocate(arena, args.src);
    moved.dst = relocate(arena, args.dst);
    finish(arena, cuda::launchScale(moved, dtype, config_));
  }

 private:
  bool toDevice(testing::KernelArena& arena) {
    if (arena.used() > capacity_) {
      cudaFree(device_);
      device_ = nullptr;
      capacity_ = 0;
      if (cudaMalloc(&device_, arena.used()) != cudaSuccess) {
        ADD_FAILURE() << "cudaMalloc of " << arena.used() << " bytes failed";
        return false;
      }
      capacity_ = arena.used();
    }
    if (cudaMemcpy(device_, arena.base(), arena.used(), cudaMemcpyHostToDevice) != cudaSuccess) {
      ADD_FAILURE() << "copy to the device failed";
      return false;
    }
    return true;
  }
  template <typename P>
  P relocate(testing::KernelArena& arena, P host) {
    if (host == nullptr) return host;
    const ptrdiff_t distance = static_cast<const unsigned char*>(host) - arena.base();
    return static_cast<P>(static_cast<void*>(static_cast<unsigned char*>(device_) + distance));
  }
  void finish(testing::KernelArena& arena, Status launched) {
    ASSERT_TRUE(launched.isOk()) << launched.toString();
    const cudaError_t synced = cudaDeviceSynchronize();
    ASSERT_EQ(synced, cudaSuccess) << cudaGetErrorString(synced);
    ASSERT_EQ(cudaMemcpy(arena.base(), device_, arena.used(), cudaMemcpyDeviceToHost), cudaSuccess);
  }

  cuda::LaunchConfig config_;
  void* device_ = nullptr;
  size_t capacity_ = 0;
};

// The emulation test's sizes, then the large count.
std::vector<size_t> gpuSizes() {
  std::vector<size_t> sizes(std::begin(testing::kKernelSizes), std::end(testing::kKernelSizes));
  const char* large = std::getenv("COLLIE_GPU_KERNEL_LARGE");
  const size_t count = large ? std::strtoull(large, nullptr, 10) : (size_t{1} << 22) + 3;
  if (count > 0) sizes.push_back(count);
  return sizes;
}

TEST(GpuKernels, ReduceCopyEveryTypeOpSizeAndAlignment) {
  GpuLauncher launcher;
  testing::reduceCopyMatrix(launcher, gpuSizes());
}

// PREMUL_SUM's multiply on the device, every dtype, the sizes and the large count.
TEST(GpuKernels, ScaleEveryTypeSizeAndAlignment) {
  GpuLauncher launcher;
  const std::vector<size_t> sizes = gpuSizes();
  testing::scaleMatrix(launcher, sizes);
}

TEST(GpuKernels, ReduceCopyEveryByteOffset) {
  GpuLauncher launcher;
  testing::reduceCopyByteOffsets(launcher);
}

TEST(GpuKernels, RingStepKernels) {
  GpuLauncher launcher;
  testing::ringStepMatrix(launcher, gpuSizes());
}

TEST(GpuKernels, TreeKernels) {
  GpuLauncher launcher;
  testing::treeStepMatrix(launcher, gpuSizes());
}

// Buffers of 64 MiB, three of them beyond any L2 cache, where the launch sizes the grid
// to cover them: two sources into one destination (the streaming kernel where the
// pointers are congruent, the general kernel where not), and the general kernel's other
// shapes.
TEST(GpuKernels, ReduceCopyBeyondL2) {
  GpuLauncher launcher;
  std::mt19937_64 rng(6);
  const std::pair<DataType, ReduceOp> cases[] = {
      {DataType::kFloat32, ReduceOp::kSum},  {DataType::kBFloat16, ReduceOp::kSum},
      {DataType::kBFloat16, ReduceOp::kAvg}, {DataType::kFloat16, ReduceOp::kProd},
      {DataType::kFloat64, ReduceOp::kMax},  {DataType::kInt8, ReduceOp::kBxor}};
  for (const auto& [dtype, op] : cases) {
    const size_t count = (size_t{64} << 20) / dataTypeSize(dtype) + 5;
    testing::checkReduceCopyTwoToOne(launcher, rng, dtype, op, count, 3);
    if (HasFatalFailure()) return;
  }
  const size_t count = (size_t{64} << 20) / 4 + 3;
  testing::checkReduceCopy(launcher, rng, DataType::kFloat32, ReduceOp::kSum, count, 3, 1, {0});
  testing::checkReduceCopy(launcher, rng, DataType::kFloat32, ReduceOp::kMin, count, 1, 2, {4});
}

// Grids far smaller than the data, so every grid-stride loop wraps many times.
TEST(GpuKernels, SmallGridsWrap) {
  GpuLauncher launcher(cuda::LaunchConfig{.grid = 3, .block = 64});
  testing::reduceCopyMatrix(launcher, testing::kKernelSizes);
  testing::ringStepMatrix(launcher, testing::kKernelSizes);
  testing::treeStepMatrix(launcher, testing::kKernelSizes);
}

TEST(GpuKernels, DeviceMemoryIsRecognised) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  EXPECT_TRUE(isDeviceMemory(p));
  EXPECT_TRUE(isDeviceMemory(static_cast<char*>(p) + 63));
  cudaFree(p);
  int onHost = 0;
  EXPECT_FALSE(isDeviceMemory(&onHost));
}

// Ranks as threads of one process: the CUDA IPC same-process shortcut. Every rank
// finishes its set-up on stream 0 before any rank starts the collective: collie's
// streams are blocking (docs/decisions/device-streams.md), so one rank's cudaMemcpy
// would wait for another rank's collective in flight, which waits for this rank (the
// H200 run of 2026-11-27 stalled that way until the deadline).
TEST(Gpu, AllReduceOnDeviceBuffers) {
  const int nranks = 2;
  const size_t count = 1 << 16;
  auto comms = testing::makeCommunicators(nranks, Options{});
  ASSERT_EQ(comms.size(), static_cast<size_t>(nranks));
  std::barrier setUp(nranks);
  testing::onEveryRank(nranks, [&](int r) {
    const size_t bytes = count * sizeof(float);
    std::vector<uint8_t> input = testing::makeInput(DataType::kFloat32, ReduceOp::kSum, r, count);
    void *send = nullptr, *recv = nullptr;
    ASSERT_EQ(cudaMalloc(&send, bytes), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&recv, bytes), cudaSuccess);
    cudaMemcpy(send, input.data(), bytes, cudaMemcpyHostToDevice);
    setUp.arrive_and_wait();
    auto work = comms[r]->allReduce(send, recv, count, DataType::kFloat32, ReduceOp::kSum);
    ASSERT_TRUE(work.isOk()) << work.status().toString();
    ASSERT_TRUE(work->wait().isOk());
    std::vector<uint8_t> out(bytes);
    cudaMemcpy(out.data(), recv, bytes, cudaMemcpyDeviceToHost);
    EXPECT_EQ(out,
              testing::expectedReduction(DataType::kFloat32, ReduceOp::kSum, nranks, 0, count));
    cudaFree(send);
    cudaFree(recv);
  });
}

}  // namespace
}  // namespace collie

int main(int argc, char** argv) {
  if (collie::cudaDeviceCount() == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
