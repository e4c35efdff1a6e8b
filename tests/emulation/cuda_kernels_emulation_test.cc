// The CUDA kernels of kernels/cuda, compiled by the host compiler and run through the
// emulator (kernels/cuda/emulation): every kernel, every dtype and op, odd sizes and
// misaligned pointers, against the host backend (kernels/cpu) applied as a left fold
// in source order, which is the bit-exact contract. The checks themselves are shared
// with the GPU test (tests/support/kernel_checks.h); here each kernel runs on the host
// buffers directly, with small blocks and at most 3 of them so that grid-stride loops
// wrap. Whole ring and tree all-reduces over emulated ranks are in
// cuda_collectives_emulation_test.cc.
#include <gtest/gtest.h>

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
  void ringReduceStep(testing::KernelArena&, const RingReduceStep& step, DataType dtype,
                      ReduceOp op) override {
    emulatedLaunch(kernelFor<RingReduceScatterFamily>(dtype, op),
                   dim3(gridFor(step.count * dataTypeSize(dtype))), dim3(kBlock), step);
  }
  void ringCopyStep(testing::KernelArena&, const RingCopyStep& step) override {
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
  void scale(testing::KernelArena&, const ScaleArgs& args, DataType dtype) override {
    auto kernel = scaleKernelFor(dtype);
    ASSERT_NE(kernel, nullptr);
    emulatedLaunch(kernel, dim3(gridFor(args.count * dataTypeSize(dtype))), dim3(kBlock), args);
  }
};

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
