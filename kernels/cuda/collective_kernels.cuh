// The CUDA kernels of collie: one launch per step of a ring or tree schedule, on the
// pointers that CUDA IPC / P2P give (this rank's buffers and its peers'), plus the bare
// reduce-copy kernel. Each kernel is a template over the element type T and the op
// functor (SumOp/ProdOp/MinOp/MaxOp of kernels/common/ops.h; kAvg is SumOp with
// divisor = nranks on the final step); the copy kernels move bytes and have no
// template parameters. Instantiations come from kernels/cuda/kernel_table.h.
//
// Every kernel: 1-D grid and block, any size; waits on its DeviceStepSync, does its part of
// the work in grid-stride loops (reduce_copy.cuh), then posts its DeviceStepSync.
// Thread safety: device code.
#pragma once

#include "kernels/cuda/cuda_compat.h"
#include "kernels/cuda/device_handles.h"
#include "kernels/cuda/device_sync.cuh"
#include "kernels/cuda/reduce_copy.cuh"

namespace collie::cuda {

// args.dsts = the non-null ones of (a, b, c), in that order. Every array index is a
// constant (an index counted at run time would put the arrays in local memory; see
// reduceCopyBody).
__device__ __forceinline__ void setDestinations(ReduceCopyArgs& args, void* a, void* b,
                                                void* c = nullptr) {
  args.dsts[0] = a != nullptr ? a : b != nullptr ? b : c;
  args.dsts[1] = a != nullptr && b != nullptr ? b : c;
  args.dsts[2] = c;
  args.ndsts = (a != nullptr) + (b != nullptr) + (c != nullptr);
}

// A tree step's children, clamped to [0, kMaxTreeChildren] (the launch checks them).
static_assert(kMaxTreeChildren == 2, "the tree kernels name each child slot");
__device__ __forceinline__ int childCount(int nchildren) {
  return nchildren < 0 ? 0 : nchildren > kMaxTreeChildren ? kMaxTreeChildren : nchildren;
}

template <typename T, typename Op>
__global__ void reduceCopyKernel(const ReduceCopyArgs args) {
  reduceCopy<T, Op>(args, gridThreadIndex(), gridThreadCount());
}

// The bare reduce-copy of two sources into one destination over buffers beyond the
// L2 cache: one pack per thread, a grid covering the body (see reduceCopyTwoToOnePack).
template <typename T, typename Op>
__global__ void streamingReduceCopyKernel(const ReduceCopyArgs args) {
  reduceCopyTwoToOnePack<T, Op>(args, gridThreadIndex());
}

// Ring reduce-scatter step: r = op(local, incoming) to out and/or the next rank.
template <typename T, typename Op>
__global__ void ringReduceScatterStepKernel(const DeviceReduceStep step) {
  if (!stepWait(step.sync)) return;
  ReduceCopyArgs args;
  args.srcs[0] = step.local;
  args.srcs[1] = slotAt(step.incoming, step.sync.recvCount, step.sync);
  args.nsrcs = 2;
  setDestinations(args, step.out, slotAt(step.peerOut, step.sync.sendCount, step.sync));
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
__global__ void ringAllGatherStepKernel(const DeviceCopyStep step) {
  (void)CopyUnitIsByte<Unit>();
  if (!stepWait(step.sync)) return;
  const void* src = slotAt(step.src, step.sync.recvCount, step.sync);
  ReduceCopyArgs args;
  args.srcs[0] = src;
  args.nsrcs = 1;
  setDestinations(args, step.out != src ? step.out : nullptr,
                  slotAt(step.peerOut, step.sync.sendCount, step.sync));
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
  args.srcs[1] = step.children[0];
  args.srcs[2] = step.children[1];
  args.nsrcs = 1 + childCount(step.nchildren);
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
  const int nchildren = childCount(step.nchildren);
  setDestinations(args, step.out != step.src ? step.out : nullptr,
                  nchildren > 0 ? step.childOut[0] : nullptr,
                  nchildren > 1 ? step.childOut[1] : nullptr);
  args.count = step.bytes;
  reduceCopy<Unit, CopyOp<Unit>>(args, gridThreadIndex(), gridThreadCount());
  stepPost(step.sync);
}

// Thread 0 of a block: the fingerprint check of the collective with sequence number s
// (DeviceFingerprintCheck), publishing through ownSlot (slot 0's address; skipped when
// null) and ownPosted, and reading peer i's flags from peerFlags(i, &posted, &slot0).
// True when every peer posted the same fingerprint; false when the error word holds a
// code (stored here: a timeout or a mismatch naming the peer, or earlier).
template <typename PeerFlags>
__device__ __forceinline__ bool exchangeFingerprint(const DeviceFingerprintCheck& check, uint64_t s,
                                                    uint64_t* ownSlot, uint64_t* ownPosted,
                                                    PeerFlags peerFlags) {
  if (loadErrorWord(check.error) != 0) return false;
  // The device-held sequence number, when there is one, picks the slot and completes
  // the fingerprint and the posted value.
  const uint64_t slot = check.sequence != nullptr ? s % 2 : 0;
  const uint64_t fingerprint = check.sequence != nullptr
                                   ? check.fingerprint | ((s & 0xFFFFF) << check.sequenceShift)
                                   : check.fingerprint;
  const uint64_t posted = s + check.posted;
  if (ownSlot != nullptr) {
    storeReleaseSys(ownSlot + slot, fingerprint);
    storeReleaseSys(ownPosted, posted);
  }
  const uint64_t timeout = check.timeoutNs != 0 ? check.timeoutNs : kDefaultStepTimeoutNs;
  const uint64_t start = globalTimerNs();
  for (int i = 0; i < check.npeers && i < kDeviceMaxCheckPeers; ++i) {
    const uint64_t* peerPosted = nullptr;
    const uint64_t* peerSlot = nullptr;
    peerFlags(i, &peerPosted, &peerSlot);
    for (uint32_t poll = 0; loadAcquireSys(peerPosted) < posted; ++poll) {
      if (failedMeanwhile(check.error, poll)) return false;
      if (globalTimerNs() - start > timeout) {
        storeErrorWord(check.error, check.timeoutBase + check.peerRank[i]);
        return false;
      }
      spinPause();
    }
    const uint64_t theirs = loadAcquireSys(peerSlot + slot);
    if (theirs != fingerprint) {
      storeReleaseSys(check.peerFingerprint, theirs);
      if (check.ownFingerprint != nullptr) storeReleaseSys(check.ownFingerprint, fingerprint);
      storeErrorWord(check.error, check.mismatchBase + check.peerRank[i]);
      return false;
    }
  }
  return true;
}

// The fingerprint check that opens a collective (DeviceFingerprintCheck): thread 0 of
// block 0 does it all; the check moves no data. A template only so that this header
// can be included by several translation units (used with Unit = uint8_t).
template <typename Unit = uint8_t>
__global__ void fingerprintCheckKernel(const DeviceFingerprintCheck check) {
  (void)CopyUnitIsByte<Unit>();
  if (blockIdx.x != 0 || !isFirstThreadOfBlock()) return;
  const uint64_t s = check.sequence != nullptr ? *check.sequence : 0;
  const bool agreed =
      exchangeFingerprint(check, s, check.ownSlot, check.ownPosted,
                          [&check](int i, const uint64_t** posted, const uint64_t** slot) {
                            *posted = check.peerPosted[i];
                            *slot = check.peerSlot[i];
                          });
  if (agreed && check.advanceSequence && check.sequence != nullptr) *check.sequence = s + 1;
}

}  // namespace collie::cuda
