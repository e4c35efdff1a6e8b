// Launch geometry of the kernels: block sizes, grid caps and the grid of a launch.
// Kept apart from kernel_table.h because the tables take every kernel's address, and so
// compile every (type, op) instantiation of every family into any unit that includes
// them: bench/gpu_streaming_variants.cu, which needs only streamingBlocks, spent 400 s
// of CPU compiling the whole library's kernels a second time.
//
// Contract: launchGrid() picks a 1-D grid for a step; streamsTwoToOne() says whether a
// reduce-copy may run as streamingReduceCopyKernel, streamingBlocks() gives its grid.
// Thread safety: pure functions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device_handles.h"

namespace collie::cuda {

inline constexpr unsigned kDefaultBlockThreads = 256;
inline constexpr unsigned kDefaultMaxBlocks = 32;
// The grid cap of the step kernels (every launch with grid 0 but the bare reduce-copy's
// and scale's, which size their own). A step kernel's blocks all wait for the peers'
// flags and share the GPU with the peers' step kernels: on an H200 under MPS, grids of
// 16 blocks ran the device all-reduce in 0.52-0.92x the time of 32 blocks at 1-256 MiB
// on 2 and 4 ranks, 8 blocks lost at 16 MiB, and 66 or more blocks were 1.4-14x slower,
// one 264-block grid on 4 ranks timing out (docs/decisions/cuda-reduce-copy-grid.md,
// "The step kernels' grid").
inline constexpr unsigned kStepMaxBlocks = 16;
inline constexpr unsigned kMaxGridBlocks = 0x7fffffffu;  // gridDim.x's limit from sm_30 on

// Enough blocks to give each thread about one 16-byte pack, at most maxBlocks.
inline unsigned launchGrid(uint64_t bytes, unsigned blockThreads, unsigned maxBlocks) {
  const uint64_t perBlock = static_cast<uint64_t>(blockThreads) * 16;
  const uint64_t blocks = (bytes + perBlock - 1) / perBlock;
  return static_cast<unsigned>(std::clamp<uint64_t>(blocks, 1, std::max(1u, maxBlocks)));
}

// Whether a reduce-copy can run as streamingReduceCopyKernel: two sources, one
// destination, every pointer aligned to the element and at the same offset modulo 16.
inline bool streamsTwoToOne(const ReduceCopyArgs& args, size_t elementSize) {
  if (args.nsrcs != 2 || args.ndsts != 1 || elementSize == 0) return false;
  const uintptr_t a = reinterpret_cast<uintptr_t>(args.srcs[0]);
  const uintptr_t b = reinterpret_cast<uintptr_t>(args.srcs[1]);
  const uintptr_t c = reinterpret_cast<uintptr_t>(args.dsts[0]);
  return a % elementSize == 0 && b % elementSize == 0 && c % elementSize == 0 && a % 16 == b % 16 &&
         a % 16 == c % 16;
}

// streamingReduceCopyKernel's grid: a thread per 16-byte pack of the body (at least one
// block, which also covers the head and tail elements, fewer than a block's threads).
inline unsigned streamingBlocks(uint64_t count, size_t elementSize, unsigned blockThreads) {
  const uint64_t packs = count * elementSize / 16;
  const uint64_t blocks = (packs + blockThreads - 1) / blockThreads;
  return static_cast<unsigned>(std::clamp<uint64_t>(blocks, 1, kMaxGridBlocks));
}

}  // namespace collie::cuda
