// The board kernel: a whole all-reduce, reduce-scatter or all-gather in one launch,
// every rank reading every peer's board through its mapped device window
// (DeviceBoardStep in core/device/device_steps.h gives the contract and why the slots
// need no "free" wait). Block b of every rank handles the same elements, so a block
// synchronises only with the same block of its peers: no block of a grid ever waits
// for another block of the same grid (the host emulation runs a grid's blocks one
// after the other).
//
// Per block: copy its part of the input onto this rank's board (slot s % 2); fence;
// thread 0 publishes the fingerprint and waits for every peer's (exchangeFingerprint,
// block 0 on the check's own flags); the block reads every rank's board and writes
// its part of the output; the last block to finish advances the sequence number.
// Thread safety: device code.
#pragma once

#include "kernels/cuda/collective_kernels.cuh"

namespace collie::cuda {

// Board r's slot-0 address (constant indices only: see reduceCopyElement).
__device__ __forceinline__ uint8_t* boardOf(const DeviceBoardStep& step, int r) {
  uint8_t* board = nullptr;
  COLLIE_UNROLL
  for (int i = 0; i < kDeviceMaxBoardRanks; ++i) {
    if (i == r) board = static_cast<uint8_t*>(step.boards[i]);
  }
  return board;
}

// count elements from src to dst, by the threads of this block.
template <typename T>
__device__ __forceinline__ void blockCopy(const void* src, void* dst, uint64_t count) {
  ReduceCopyArgs args;
  args.srcs[0] = src;
  args.nsrcs = 1;
  args.dsts[0] = dst;
  args.ndsts = 1;
  args.count = count;
  reduceCopy<T, CopyOp<T>>(args, threadIdx.x, blockDim.x);
}

// dst[i] = op over r in rank order of board_r[offset + i] (slot `slotOffset`), divided
// on the last pass: at most kMaxSources sources a pass, the later passes folding into
// what dst holds.
template <typename T, typename Op>
__device__ __forceinline__ void blockFold(const DeviceBoardStep& step, size_t slotOffset,
                                          size_t offset, void* dst, uint64_t count) {
  static_assert(kDeviceMaxBoardRanks <= kMaxSources + 2 * (kMaxSources - 1),
                "three passes fold every board");
  const int n = step.nranks;
  ReduceCopyArgs args;
  args.dsts[0] = dst;
  args.ndsts = 1;
  args.count = count;
  auto source = [&](int r) -> const void* { return boardOf(step, r) + slotOffset + offset; };
  // Pass 0: boards 0..3; pass k: dst and the next kMaxSources - 1 boards. The passes
  // stay a loop (not unrolled): each inlines a whole reduce-copy, and unrolled they made
  // the board kernels 60% of the library's PTX and of its compile time.
  int next = 0;
  for (int pass = 0; pass < 3; ++pass) {
    if (next >= n) break;
    int used = 0;
    if (pass > 0) {
      __syncthreads();  // every thread's part of dst is written before anyone reads it
      args.srcs[0] = dst;
      used = 1;
    }
    COLLIE_UNROLL
    for (int k = 0; k < kMaxSources; ++k) {
      if (k >= used && next < n) {
        args.srcs[k] = source(next++);
        used = k + 1;
      }
    }
    args.nsrcs = used;
    args.divisor = next >= n ? step.divisor : 0;
    reduceCopy<T, Op>(args, threadIdx.x, blockDim.x);
  }
}

// Counts this block as finished; the last one advances the sequence number.
__device__ __forceinline__ void finishBoardBlock(const DeviceBoardStep& step, uint64_t s) {
  __syncthreads();
  if (isFirstThreadOfBlock() && lastBlockToFinish(step.blockCounter)) {
    *step.check.sequence = s + 1;
    __threadfence();
  }
}

template <typename T, typename Op>
__global__ void boardKernel(const DeviceBoardStep step) {
  const DeviceFingerprintCheck& check = step.check;
  const uint64_t s = *check.sequence;  // every block reads it before the last one advances it
  const size_t slotOffset = static_cast<size_t>(s % 2) * step.slotBytes;
  const uint32_t b = blockIdx.x;
  const uint64_t first = static_cast<uint64_t>(b) * step.perBlock;
  const uint64_t lo = first < step.count ? first : step.count;
  const uint64_t n = step.count - lo < step.perBlock ? step.count - lo : step.perBlock;
  const size_t es = sizeof(T);
  const uint8_t* input = static_cast<const uint8_t*>(step.input);
  uint8_t* output = static_cast<uint8_t*>(step.output);
  if (b > 0 && n == 0) {  // nothing here on any rank (the same collective everywhere)
    finishBoardBlock(step, s);
    return;
  }
  int ok = isFirstThreadOfBlock() ? loadErrorWord(check.error) == 0 : 1;
  if (!__syncthreads_and(ok)) return;

  // Publish this block's part of the input.
  uint8_t* own = boardOf(step, step.rank) + slotOffset;
  const int parts = step.kind == DeviceBoardKind::kReduceScatter ? step.nranks : 1;
  for (int q = 0; q < parts; ++q) {
    const size_t at = (static_cast<size_t>(q) * step.count + lo) * es;
    blockCopy<T>(input + at, own + at, n);
  }
  __threadfence_system();
  __syncthreads();

  // The fingerprint check with the same block of every peer: block 0 on the check's
  // flags, block b > 0 on flags of its own.
  ok = 1;
  if (isFirstThreadOfBlock()) {
    if (b == 0) {
      const uint64_t start = globalTimerNs();
      ok = exchangeFingerprint(check, s, check.ownSlot, check.ownPosted,
                               [&check](int i, const uint64_t** posted, const uint64_t** slot) {
                                 *posted = check.peerPosted[i];
                                 *slot = check.peerSlot[i];
                               });
      if (step.profile != nullptr) {
        atomicAdd(&step.profile[0], static_cast<unsigned long long>(globalTimerNs() - start));
        atomicAdd(&step.profile[1], 1ull);
      }
    } else {
      const size_t words = static_cast<size_t>(b - 1) * kDeviceBoardFlagWords;
      uint64_t* mine = step.ownBlockFlags + words;
      ok = exchangeFingerprint(
          check, s, mine + 1, mine,
          [&step, words](int i, const uint64_t** posted, const uint64_t** slot) {
            *posted = step.peerBlockFlags[i] + words;
            *slot = step.peerBlockFlags[i] + words + 1;
          });
    }
  }
  if (!__syncthreads_and(ok)) return;

  // This block's part of the output, from every rank's board.
  // (One fold call for both reducing kinds: each call site inlines the whole fold.)
  if (step.kind == DeviceBoardKind::kAllGather) {
    for (int r = 0; r < step.nranks; ++r) {
      blockCopy<T>(boardOf(step, r) + slotOffset + lo * es,
                   output + (static_cast<size_t>(r) * step.count + lo) * es, n);
    }
  } else {
    const size_t part = step.kind == DeviceBoardKind::kReduceScatter
                            ? static_cast<size_t>(step.rank) * step.count
                            : 0;  // all-reduce: the same elements of every board
    blockFold<T, Op>(step, slotOffset, (part + lo) * es, output + lo * es, n);
  }
  finishBoardBlock(step, s);
}

}  // namespace collie::cuda
