// The direct kernel: a whole all-reduce, reduce-scatter, all-gather or all-to-all in one
// launch on buffers that every rank registered as device windows, each rank loading its
// peers' inputs and storing into their outputs through the mappings (DeviceDirectStep in
// core/device/device_steps.h gives the contract: shares, parts, entry and exit flags).
// Block b of every rank handles the same part of each share, so a block synchronises
// only with the same block of its peers: no block of a grid ever waits for another block
// of the same grid (the host emulation runs a grid's blocks one after the other).
//
// Per block: the fingerprint check with block b of every peer (entry); the reduce-copy
// passes over its part (one up to 4 ranks: every source and destination at once; more
// beyond, kMaxSources sources and kMaxDestinations destinations a pass); fence;
// done = s + 1 and wait for every peer's (exit); the last block to finish advances the
// sequence number.
// Thread safety: device code.
#pragma once

#include "kernels/cuda/collective_kernels.cuh"

namespace collie::cuda {

static_assert(kMaxSources == kMaxDestinations, "a pass reads and writes as many ranks");
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

// Block b's part as numbered lists of addresses: source j (in fold order) and
// destination j. Rank q's buffer is picked with constant indices only (see
// reduceCopyElement), so nothing goes to local memory.
struct DirectWork {
  const DeviceDirectStep* p = nullptr;
  int nsrcs = 0;
  int ndsts = 0;
  int srcFirst = 0;  // source j: rank (srcFirst + j) % n's input, srcAt bytes in
  int dstFirst = 0;  // destination j: rank (dstFirst + j) % n's output, dstAt bytes in
  size_t srcAt = 0;
  size_t dstAt = 0;
  // All-to-all: source j goes to destination j alone, which is this rank's output at
  // dstAt + (the source's rank) * pairStride.
  bool pairs = false;
  size_t pairStride = 0;
  uint64_t count = 0;
  int32_t divisor = 0;

  __device__ __forceinline__ int rankAt(int first, int j) const {
    const int q = first + j;
    return q >= p->nranks ? q - p->nranks : q;
  }
  __device__ __forceinline__ const void* source(int j) const {
    const int q = rankAt(srcFirst, j);
    const void* base = nullptr;
    COLLIE_UNROLL
    for (int i = 0; i < kDeviceMaxDirectRanks; ++i) {
      if (i == q) base = p->inputs[i];
    }
    return static_cast<const uint8_t*>(base) + srcAt;
  }
  __device__ __forceinline__ void* destination(int j) const {
    if (pairs) {
      return static_cast<uint8_t*>(p->outputs[p->rank]) + dstAt + rankAt(srcFirst, j) * pairStride;
    }
    const int q = rankAt(dstFirst, j);
    void* base = nullptr;
    COLLIE_UNROLL
    for (int i = 0; i < kDeviceMaxDirectRanks; ++i) {
      if (i == q) base = p->outputs[i];
    }
    return static_cast<uint8_t*>(base) + dstAt;
  }
};

// Block b's lists for the step's kind (DeviceDirectStep gives the fold orders).
template <typename T>
__device__ __forceinline__ DirectWork directWorkOf(const DeviceDirectStep& p, uint32_t b) {
  const int n = p.nranks;
  const size_t es = sizeof(T);
  // More sources than one pass reads: fold from this rank's own input on, so that in
  // place the accumulator (this rank's output, destination 0) holds nothing unread.
  const int foldFirst = n > kMaxSources ? p.rank : 0;
  DirectWork w;
  w.p = &p;
  switch (p.kind) {
    case DeviceBoardKind::kAllReduce: {
      // Share `rank` of the elements, from every input into every output.
      const uint64_t shareLo = static_cast<uint64_t>(p.rank) * p.shareCount;
      const uint64_t begin = shareLo < p.count ? shareLo : p.count;
      const uint64_t length = p.count - begin < p.shareCount ? p.count - begin : p.shareCount;
      const DirectPart part = directPart(length, p.perBlock, b);
      w.count = part.n;
      w.srcAt = w.dstAt = (begin + part.lo) * es;
      w.nsrcs = w.ndsts = n;
      w.srcFirst = foldFirst;
      w.dstFirst = p.rank;
      w.divisor = p.divisor;
      break;
    }
    case DeviceBoardKind::kReduceScatter:
    case DeviceBoardKind::kAllToAll: {
      // Block `rank` of every input: folded into this rank's output (reduce-scatter), or
      // each into its place there (all-to-all, from this rank's own on: at pass j rank r
      // reads rank r + j, so the ranks read different peers).
      const DirectPart part = directPart(p.count, p.perBlock, b);
      w.count = part.n;
      w.srcAt = (static_cast<uint64_t>(p.rank) * p.count + part.lo) * es;
      w.dstAt = part.lo * es;
      w.nsrcs = n;
      w.dstFirst = p.rank;
      if (p.kind == DeviceBoardKind::kAllToAll) {
        w.pairs = true;
        w.pairStride = p.count * es;
        w.ndsts = n;
        w.srcFirst = p.rank;
      } else {
        w.ndsts = 1;
        w.srcFirst = foldFirst;
        w.divisor = p.divisor;
      }
      break;
    }
    case DeviceBoardKind::kAllGather: {
      // This rank's input into its place in every output; in place, its own place is
      // the input itself and is left alone.
      const DirectPart part = directPart(p.count, p.perBlock, b);
      w.count = part.n;
      w.srcAt = part.lo * es;
      w.dstAt = (static_cast<uint64_t>(p.rank) * p.count + part.lo) * es;
      w.nsrcs = 1;
      w.srcFirst = p.rank;
      w.dstFirst = p.rank;
      w.ndsts = n;
      if (w.destination(0) == w.source(0)) {
        w.dstFirst = w.rankAt(p.rank, 1);
        w.ndsts = n - 1;
      }
      break;
    }
  }
  return w;
}

// The passes over block b's part, by the threads of the block: each reads at most
// kMaxSources sources and writes at most kMaxDestinations destinations.
//   - reduce: the first pass folds sources 0..; a later one folds destination 0 (the
//     accumulator) and the next sources into it; the pass that folds the last source
//     divides and writes destinations 0.. (a fold of one source is a copy);
//   - copy: the rest of the destinations from destination 0 (from source 0 when there
//     is one source);
//   - pairs (all-to-all): source j to destination j, one pair a pass.
// Up to 4 ranks that is one pass, as the fold in rank order. A reducing or copying pass
// reads what the previous one wrote with other threads, hence the barrier between
// passes; the pairs of an all-to-all touch disjoint bytes (the API refuses an all-to-all
// in place), so they need none. The passes stay a loop with one reduce-copy call site
// (each inlines a whole reduce-copy).
template <typename T, typename Op>
__device__ __forceinline__ void directPasses(const DirectWork& w) {
  static_assert(kMaxSources >= 2 && kMaxDestinations >= 1, "a pass adds a source");
  int nextSrc = 0;
  int nextDst = 0;
  COLLIE_NO_UNROLL
  for (bool first = true; nextSrc < w.nsrcs || nextDst < w.ndsts; first = false) {
    if (!first && !w.pairs) __syncthreads();
    ReduceCopyArgs args;
    int ns = 0;
    int nd = 0;
    args.divisor = 0;
    if (w.pairs) {
      args.srcs[0] = w.source(nextSrc);
      args.dsts[0] = w.destination(nextSrc);
      ns = nd = 1;
      nextDst = ++nextSrc;
    } else {
      const bool reducing = nextSrc < w.nsrcs;
      if (!reducing || nextSrc > 0) {
        args.srcs[0] = w.nsrcs == 1 ? w.source(0) : w.destination(0);
        ns = 1;
      }
      if (reducing) {
        COLLIE_UNROLL
        for (int k = 0; k < kMaxSources; ++k) {
          if (k >= ns && nextSrc < w.nsrcs) {
            args.srcs[k] = w.source(nextSrc++);
            ns = k + 1;
          }
        }
      }
      if (reducing && nextSrc < w.nsrcs) {
        args.dsts[0] = w.destination(0);  // a partial fold, into the accumulator
        nd = 1;
      } else {
        if (reducing) args.divisor = w.divisor;
        COLLIE_UNROLL
        for (int k = 0; k < kMaxDestinations; ++k) {
          if (nextDst < w.ndsts) {
            args.dsts[k] = w.destination(nextDst++);
            nd = k + 1;
          }
        }
      }
    }
    args.nsrcs = ns;
    args.ndsts = nd;
    args.count = w.count;
    reduceCopy<T, Op>(args, threadIdx.x, blockDim.x);
  }
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

  const DirectWork work = directWorkOf<T>(p, b);
  if (work.count > 0) directPasses<T, Op>(work);
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
