// The CUDA kernels of collie: one launch per step of a ring or tree schedule, on the
// pointers that CUDA IPC / P2P give (this rank's buffers and its peers'), plus the bare
// reduce-copy kernel. Each kernel is a template over the element type T and the op
// functor (SumOp/ProdOp/MinOp/MaxOp of kernels/common/ops.h; kAvg is SumOp with
// divisor = nranks on the final step); the copy kernels move bytes and have no
// template parameters. Instantiations come from kernels/cuda/kernel_table.h.
//
// Every kernel: 1-D grid and block, any size; waits on its StepSync, does its part of
// the work in grid-stride loops (reduce_copy.cuh), then posts its StepSync.
// Thread safety: device code.
#pragma once

#include "kernels/cuda/cuda_compat.h"
#include "kernels/cuda/device_handles.h"
#include "kernels/cuda/device_sync.cuh"
#include "kernels/cuda/reduce_copy.cuh"

namespace collie::cuda {

template <typename T, typename Op>
__global__ void reduceCopyKernel(const ReduceCopyArgs args) {
  reduceCopy<T, Op>(args, gridThreadIndex(), gridThreadCount());
}

// Ring reduce-scatter step: r = op(local, incoming) to out and/or the next rank.
template <typename T, typename Op>
__global__ void ringReduceScatterStepKernel(const RingReduceStep step) {
  if (!stepWait(step.sync)) return;
  ReduceCopyArgs args;
  args.srcs[0] = step.local;
  args.srcs[1] = step.incoming;
  args.nsrcs = 2;
  if (step.out != nullptr) args.dsts[args.ndsts++] = step.out;
  if (step.peerOut != nullptr) args.dsts[args.ndsts++] = step.peerOut;
  args.count = step.count;
  args.divisor = step.divisor;
  reduceCopy<T, Op>(args, gridThreadIndex(), gridThreadCount());
  stepPost(step.sync);
}

// The copy kernels are templates over their unit of copy only so that this header can
// be included by several translation units; they are used with Unit = uint8_t (bytes;
// the 16-byte body is the same for every unit).
template <typename Unit = uint8_t>
struct CopyUnitIsByte {
  static_assert(sizeof(Unit) == 1, "copy kernels count bytes");
};

// Ring all-gather step: copy src to out (unless it is src) and to the next rank.
template <typename Unit = uint8_t>
__global__ void ringAllGatherStepKernel(const RingCopyStep step) {
  (void)CopyUnitIsByte<Unit>();
  if (!stepWait(step.sync)) return;
  ReduceCopyArgs args;
  args.srcs[0] = step.src;
  args.nsrcs = 1;
  if (step.out != nullptr && step.out != step.src) args.dsts[args.ndsts++] = step.out;
  if (step.peerOut != nullptr) args.dsts[args.ndsts++] = step.peerOut;
  args.count = step.bytes;
  reduceCopy<Unit, CopyOp<Unit>>(args, gridThreadIndex(), gridThreadCount());
  stepPost(step.sync);
}

// Tree reduce: out = op(local, child 0, child 1), children in order.
template <typename T, typename Op>
__global__ void treeReduceKernel(const TreeReduceStep step) {
  if (!stepWait(step.sync)) return;
  ReduceCopyArgs args;
  args.srcs[0] = step.local;
  args.nsrcs = 1;
  for (int c = 0; c < step.nchildren && c < kMaxTreeChildren; ++c) {
    args.srcs[args.nsrcs++] = step.children[c];
  }
  args.dsts[0] = step.out;
  args.ndsts = 1;
  args.count = step.count;
  args.divisor = step.divisor;
  reduceCopy<T, Op>(args, gridThreadIndex(), gridThreadCount());
  stepPost(step.sync);
}

// Tree broadcast: copy src to out (unless it is src) and to every child.
template <typename Unit = uint8_t>
__global__ void treeBroadcastKernel(const TreeBroadcastStep step) {
  (void)CopyUnitIsByte<Unit>();
  if (!stepWait(step.sync)) return;
  ReduceCopyArgs args;
  args.srcs[0] = step.src;
  args.nsrcs = 1;
  if (step.out != nullptr && step.out != step.src) args.dsts[args.ndsts++] = step.out;
  for (int c = 0; c < step.nchildren && c < kMaxTreeChildren; ++c) {
    args.dsts[args.ndsts++] = step.childOut[c];
  }
  args.count = step.bytes;
  reduceCopy<Unit, CopyOp<Unit>>(args, gridThreadIndex(), gridThreadCount());
  stepPost(step.sync);
}

// The fingerprint check that opens a collective (FingerprintCheck): thread 0 of
// block 0 does it all; the check moves no data. A template only so that this header
// can be included by several translation units (used with Unit = uint8_t).
template <typename Unit = uint8_t>
__global__ void fingerprintCheckKernel(const FingerprintCheck check) {
  (void)CopyUnitIsByte<Unit>();
  if (blockIdx.x != 0 || !isFirstThreadOfBlock()) return;
  if (loadErrorWord(check.error) != 0) return;
  if (check.ownSlot != nullptr) {
    storeReleaseSys(check.ownSlot, check.fingerprint);
    storeReleaseSys(check.ownPosted, check.posted);
  }
  const uint64_t timeout = check.timeoutNs != 0 ? check.timeoutNs : kDefaultStepTimeoutNs;
  const uint64_t start = globalTimerNs();
  for (int i = 0; i < check.npeers && i < kMaxCheckPeers; ++i) {
    while (loadAcquireSys(check.peerPosted[i]) < check.posted) {
      if (globalTimerNs() - start > timeout) {
        storeErrorWord(check.error, check.timeoutBase + check.peerRank[i]);
        return;
      }
      spinPause();
    }
    const uint64_t theirs = loadAcquireSys(check.peerSlot[i]);
    if (theirs != check.fingerprint) {
      storeReleaseSys(check.peerFingerprint, theirs);
      storeErrorWord(check.error, check.mismatchBase + check.peerRank[i]);
      return;
    }
  }
}

}  // namespace collie::cuda
