// The CUDA kernels of kernels/cuda, compiled by the host compiler and run through the
// emulator (kernels/cuda/emulation): every kernel, every dtype and op, odd sizes and
// misaligned pointers, against the host backend (kernels/cpu) applied as a left fold
// in source order, which is the bit-exact contract. The checks themselves are shared
// with the GPU test (tests/support/kernel_checks.h); here each kernel runs on the host
// buffers directly, with small blocks and at most 3 of them so that grid-stride loops
// wrap. Whole ring and tree all-reduces over emulated ranks are in
// cuda_collectives_emulation_test.cc.
#include <gtest/gtest.h>

#include <iterator>
#include <random>

#include "kernels/cuda/kernel_table.h"
#include "support/kernel_checks.h"

namespace collie::cuda {
namespace {

constexpr unsigned kBlock = 64;
constexpr unsigned kMaxBlocks = 3;

unsigned gridFor(size_t bytes) { return launchGrid(bytes, kBlock, kMaxBlocks); }

class EmulationLauncher : public testing::KernelLauncher {
 public:
  void reduceCopy(testing::KernelArena&, const ReduceCopyArgs& args, DataType dtype,
                  ReduceOp op) override {
    auto kernel = kernelFor<ReduceCopyFamily>(dtype, op);
    ASSERT_NE(kernel, nullptr);
    emulatedLaunch(kernel, dim3(gridFor(args.count * dataTypeSize(dtype))), dim3(kBlock), args);
  }
  void ringReduceStep(testing::KernelArena&, const DeviceReduceStep& step, DataType dtype,
                      ReduceOp op) override {
    emulatedLaunch(kernelFor<RingReduceScatterFamily>(dtype, op),
                   dim3(gridFor(step.count * dataTypeSize(dtype))), dim3(kBlock), step);
  }
  void ringCopyStep(testing::KernelArena&, const DeviceCopyStep& step) override {
    emulatedLaunch(&ringAllGatherStepKernel<>, dim3(gridFor(step.bytes)), dim3(kBlock), step);
  }
  void treeReduce(testing::KernelArena&, const TreeReduceStep& step, DataType dtype,
                  ReduceOp op) override {
    emulatedLaunch(kernelFor<TreeReduceFamily>(dtype, op),
                   dim3(gridFor(step.count * dataTypeSize(dtype))), dim3(kBlock), step);
  }
  void treeBroadcast(testing::KernelArena&, const TreeBroadcastStep& step) override {
    emulatedLaunch(&treeBroadcastKernel<>, dim3(gridFor(step.bytes)), dim3(kBlock), step);
  }
  void scale(testing::KernelArena&, const DeviceScaleStep& args, DataType dtype) override {
    auto kernel = scaleKernelFor(dtype);
    ASSERT_NE(kernel, nullptr);
    emulatedLaunch(kernel, dim3(gridFor(args.count * dataTypeSize(dtype))), dim3(kBlock), args);
  }
};

// Routes two sources into one destination to the streaming kernel wherever
// streamsTwoToOne allows it, with its own grid (a thread per pack), as the GPU launch
// does beyond L2; counts what ran.
class StreamingLauncher : public EmulationLauncher {
 public:
  void reduceCopy(testing::KernelArena& arena, const ReduceCopyArgs& args, DataType dtype,
                  ReduceOp op) override {
    const size_t es = dataTypeSize(dtype);
    if (!streamsTwoToOne(args, es)) {
      ++general;
      EmulationLauncher::reduceCopy(arena, args, dtype, op);
      return;
    }
    ++streamed;
    auto kernel = kernelFor<StreamingReduceCopyFamily>(dtype, op);
    ASSERT_NE(kernel, nullptr);
    emulatedLaunch(kernel, dim3(streamingBlocks(args.count, es, kBlock)), dim3(kBlock), args);
  }
  int streamed = 0;
  int general = 0;
};

TEST(CudaEmulation, StreamingReduceCopyTwoToOne) {
  StreamingLauncher launcher;
  std::mt19937_64 rng(5);
  const size_t sizes[] = {0, 1, 15, 16, 17, 33, 4099};
  for (DataType dtype : testing::kKernelTypes) {
    for (ReduceOp op : testing::kKernelOps) {
      if (!isValidFor(op, dtype)) continue;
      for (size_t i = 0; i < std::size(sizes); ++i) {
        testing::checkReduceCopyTwoToOne(launcher, rng, dtype, op, sizes[i], 1 + i % 15);
        if (HasFatalFailure()) return;
      }
    }
  }
  EXPECT_GT(launcher.streamed, 0);
  EXPECT_GT(launcher.general, 0);
}

TEST(CudaEmulation, StreamsTwoToOneOnlyForCongruentElementAlignedPointers) {
  alignas(16) static unsigned char buffer[256];
  ReduceCopyArgs args;
  args.srcs[0] = buffer;
  args.srcs[1] = buffer + 64;
  args.dsts[0] = buffer + 128;
  args.nsrcs = 2;
  args.ndsts = 1;
  EXPECT_TRUE(streamsTwoToOne(args, 4));
  args.srcs[0] = buffer + 4;
  args.srcs[1] = buffer + 68;
  args.dsts[0] = buffer + 132;
  EXPECT_TRUE(streamsTwoToOne(args, 4));   // congruent, whole elements past 16
  EXPECT_FALSE(streamsTwoToOne(args, 8));  // not element-aligned
  args.dsts[0] = buffer + 136;
  EXPECT_FALSE(streamsTwoToOne(args, 4));  // not congruent
  args.dsts[0] = buffer + 132;
  args.nsrcs = 3;
  EXPECT_FALSE(streamsTwoToOne(args, 4));
  args.nsrcs = 2;
  args.ndsts = 2;
  EXPECT_FALSE(streamsTwoToOne(args, 4));
  EXPECT_EQ(streamingBlocks(0, 4, 128), 1u);
  EXPECT_EQ(streamingBlocks(1024, 4, 128), 2u);  // 256 packs
  EXPECT_EQ(streamingBlocks(1025, 4, 128), 2u);  // the tail element: a thread of block 0
  EXPECT_EQ(streamingBlocks(1028, 4, 128), 3u);  // a pack more
}

TEST(CudaEmulation, ReduceCopyEveryTypeOpSizeAndAlignment) {
  EmulationLauncher launcher;
  testing::reduceCopyMatrix(launcher, testing::kKernelSizes);
}

// PREMUL_SUM's multiply, every dtype and size, aligned, misaligned and in place.
TEST(CudaEmulation, ScaleEveryTypeSizeAndAlignment) {
  EmulationLauncher launcher;
  testing::scaleMatrix(launcher, testing::kKernelSizes);
}

TEST(CudaEmulation, ReduceCopyEveryByteOffset) {
  EmulationLauncher launcher;
  testing::reduceCopyByteOffsets(launcher);
}

// Ring reduce-scatter step and all-gather step, one launch each, on every dtype/op.
TEST(CudaEmulation, RingStepKernels) {
  EmulationLauncher launcher;
  testing::ringStepMatrix(launcher, testing::kKernelSizes);
}

// Tree reduce with 0, 1 and 2 children, and tree broadcast to 0..2 children.
TEST(CudaEmulation, TreeKernels) {
  EmulationLauncher launcher;
  testing::treeStepMatrix(launcher, testing::kKernelSizes);
}

}  // namespace
}  // namespace collie::cuda
