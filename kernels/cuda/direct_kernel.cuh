// The direct kernel: a whole all-reduce, reduce-scatter or all-gather in one launch on
// buffers that every rank registered as device windows, each rank loading its peers'
// inputs and storing into their outputs through the mappings (DeviceDirectStep in
// core/device/device_steps.h gives the contract: shares, parts, entry and exit flags).
// Block b of every rank handles the same part of each share, so a block synchronises
// only with the same block of its peers: no block of a grid ever waits for another block
// of the same grid (the host emulation runs a grid's blocks one after the other).
//
// Per block: the fingerprint check with block b of every peer (entry); one reduce-copy
// pass over its part (every source and destination at once: at most
// kDeviceMaxDirectRanks of each); fence; done = s + 1 and wait for every peer's (exit);
// the last block to finish advances the sequence number.
// Thread safety: device code.
#pragma once

#include "kernels/cuda/collective_kernels.cuh"

namespace collie::cuda {

static_assert(kDeviceMaxDirectRanks <= kMaxSources && kDeviceMaxDirectRanks <= kMaxDestinations,
              "one reduce-copy pass reads every input and writes every output");
static_assert(kDeviceMaxDirectBlocks * kDeviceDirectFlagWords * 8 <= 4096,
              "the direct flags fit their part of the region");

// The elements [lo, lo + n) of block b's part of a range of `length` elements.
struct DirectPart {
  uint64_t lo = 0;
  uint64_t n = 0;
};

__device__ __forceinline__ DirectPart directPart(uint64_t length, uint64_t perBlock, uint32_t b) {
  const uint64_t first = static_cast<uint64_t>(b) * perBlock;
  const uint64_t lo = first < length ? first : length;
  return DirectPart{lo, length - lo < perBlock ? length - lo : perBlock};
}

// Thread 0: done = s + 1 for block b, then waits until every peer's block b posted it
// too. False on a timeout (the code naming the peer is stored) or when the error word
// was set meanwhile.
__device__ __forceinline__ bool directExit(const DeviceDirectStep& p, uint32_t b, uint64_t s) {
  const size_t at = static_cast<size_t>(b) * kDeviceDirectFlagWords + 3;
  storeReleaseSys(p.ownBlockFlags + at, s + 1);
  const DeviceFingerprintCheck& check = p.check;
  const uint64_t timeout = check.timeoutNs != 0 ? check.timeoutNs : kDefaultStepTimeoutNs;
  const uint64_t start = globalTimerNs();
  for (int i = 0; i < check.npeers && i < kDeviceMaxCheckPeers; ++i) {
    for (uint32_t poll = 0; loadAcquireSys(p.peerBlockFlags[i] + at) < s + 1; ++poll) {
      if (failedMeanwhile(check.error, poll)) return false;
      if (globalTimerNs() - start > timeout) {
        storeErrorWord(check.error, check.timeoutBase + check.peerRank[i]);
        return false;
      }
      spinPause();
    }
  }
  return true;
}

// One pass: dsts = op over the sources, by the threads of this block. Sources and
// destinations are the first nsrcs / ndsts of the given arrays (constant indices only).
template <typename T, typename Op>
__device__ __forceinline__ void directPass(const void* const (&srcs)[kDeviceMaxDirectRanks],
                                           int nsrcs, void* const (&dsts)[kDeviceMaxDirectRanks],
                                           int ndsts, uint64_t count, int32_t divisor) {
  ReduceCopyArgs args;
  COLLIE_UNROLL
  for (int i = 0; i < kDeviceMaxDirectRanks; ++i) {
    args.srcs[i] = i < nsrcs ? srcs[i] : nullptr;
    args.dsts[i] = i < ndsts ? dsts[i] : nullptr;
  }
  args.nsrcs = nsrcs;
  args.ndsts = ndsts;
  args.count = count;
  args.divisor = divisor;
  reduceCopy<T, Op>(args, threadIdx.x, blockDim.x);
}

// Block b's part: every source and destination (null beyond nranks), then one pass.
// The kinds only fill the arrays, so that the pass (a whole reduce-copy, inlined) has
// one call site.
template <typename T, typename Op>
__device__ __forceinline__ void directMove(const DeviceDirectStep& p, uint32_t b) {
  const int n = p.nranks;
  const size_t es = sizeof(T);
  const void* srcs[kDeviceMaxDirectRanks] = {};
  void* dsts[kDeviceMaxDirectRanks] = {};
  int nsrcs = 0;
  int ndsts = 0;
  int32_t divisor = 0;
  DirectPart part{0, 0};
  switch (p.kind) {
    case DeviceBoardKind::kAllReduce: {
      // Share `rank` of the elements, from every input into every output.
      const uint64_t shareLo = static_cast<uint64_t>(p.rank) * p.shareCount;
      const uint64_t begin = shareLo < p.count ? shareLo : p.count;
      const uint64_t length = p.count - begin < p.shareCount ? p.count - begin : p.shareCount;
      part = directPart(length, p.perBlock, b);
      const size_t at = (begin + part.lo) * es;
      COLLIE_UNROLL
      for (int i = 0; i < kDeviceMaxDirectRanks; ++i) {
        if (i < n) {
          srcs[i] = static_cast<const uint8_t*>(p.inputs[i]) + at;
          dsts[i] = static_cast<uint8_t*>(p.outputs[i]) + at;
        }
      }
      nsrcs = n;
      ndsts = n;
      divisor = p.divisor;
      break;
    }
    case DeviceBoardKind::kReduceScatter: {
      // This rank's part of every input into its own output.
      part = directPart(p.count, p.perBlock, b);
      const size_t at = (static_cast<uint64_t>(p.rank) * p.count + part.lo) * es;
      COLLIE_UNROLL
      for (int i = 0; i < kDeviceMaxDirectRanks; ++i) {
        if (i < n) srcs[i] = static_cast<const uint8_t*>(p.inputs[i]) + at;
      }
      dsts[0] = static_cast<uint8_t*>(p.outputs[p.rank]) + part.lo * es;
      nsrcs = n;
      ndsts = 1;
      divisor = p.divisor;
      break;
    }
    case DeviceBoardKind::kAllGather: {
      // This rank's input into its place in every output (a place that is the input
      // itself, in place, is left alone).
      part = directPart(p.count, p.perBlock, b);
      const uint8_t* src = static_cast<const uint8_t*>(p.inputs[p.rank]) + part.lo * es;
      const size_t at = (static_cast<uint64_t>(p.rank) * p.count + part.lo) * es;
      COLLIE_UNROLL
      for (int i = 0; i < kDeviceMaxDirectRanks; ++i) {
        if (i < n) {
          uint8_t* dst = static_cast<uint8_t*>(p.outputs[i]) + at;
          if (dst != src) {
            // Compacted with constant indices: slot k holds the k-th destination kept.
            COLLIE_UNROLL
            for (int k = 0; k < kDeviceMaxDirectRanks; ++k) {
              if (k == ndsts) dsts[k] = dst;
            }
            ++ndsts;
          }
        }
      }
      srcs[0] = src;
      nsrcs = 1;
      break;
    }
  }
  if (part.n == 0 || ndsts == 0) return;
  directPass<T, Op>(srcs, nsrcs, dsts, ndsts, part.n, divisor);
}

// A kernel's parameters take at most 4 KiB; __grid_constant__ reads the peers'
// addresses in place.
static_assert(sizeof(DeviceDirectStep) <= 4096, "the direct step is a kernel parameter");

template <typename T, typename Op>
__global__ void directKernel(const __grid_constant__ DeviceDirectStep p) {
  const DeviceFingerprintCheck& check = p.check;
  const uint64_t s = *check.sequence;  // every block reads it before the last one advances it
  const uint32_t b = blockIdx.x;
  int ok = isFirstThreadOfBlock() ? loadErrorWord(check.error) == 0 : 1;
  if (!__syncthreads_and(ok)) return;

  // Entry: the fingerprint check with the same block of every peer.
  ok = 1;
  if (isFirstThreadOfBlock()) {
    const uint64_t start = globalTimerNs();
    if (b == 0) {
      ok = exchangeFingerprint(check, s, check.ownSlot, check.ownPosted,
                               [&check](int i, const uint64_t** posted, const uint64_t** slot) {
                                 *posted = check.peerPosted[i];
                                 *slot = check.peerSlot[i];
                               });
    } else {
      const size_t words = static_cast<size_t>(b) * kDeviceDirectFlagWords;
      uint64_t* mine = p.ownBlockFlags + words;
      ok = exchangeFingerprint(check, s, mine + 1, mine,
                               [&p, words](int i, const uint64_t** posted, const uint64_t** slot) {
                                 *posted = p.peerBlockFlags[i] + words;
                                 *slot = p.peerBlockFlags[i] + words + 1;
                               });
    }
    if (b == 0 && p.profile != nullptr) {
      atomicAdd(&p.profile[0], static_cast<unsigned long long>(globalTimerNs() - start));
      atomicAdd(&p.profile[1], 1ull);
    }
  }
  if (!__syncthreads_and(ok)) return;

  directMove<T, Op>(p, b);
  __threadfence_system();
  __syncthreads();

  // Exit: no peer touches this rank's buffers once every block passed it.
  ok = isFirstThreadOfBlock() ? directExit(p, b, s) : 1;
  if (!__syncthreads_and(ok)) return;
  if (isFirstThreadOfBlock() && lastBlockToFinish(p.blockCounter)) {
    *check.sequence = s + 1;
    __threadfence();
  }
}

}  // namespace collie::cuda
