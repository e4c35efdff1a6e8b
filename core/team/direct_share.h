// The direct all-reduce's arithmetic (core/team/board_collectives.h runs it over buffers
// every rank registered, collie/shared_memory.h): rank r owns share r of the elements
// (64-byte aligned cuts). It loads that share from every rank's input, reduces tile by
// tile in a cache-resident scratch (no copy-then-reduce), and writes each finished tile
// into every rank's output (plain stores; streaming ones out of place from
// kDirectStreamingMinBytes). Every element is computed once, by one rank, in the order of
// the schedule behind the team step (core/plan/fold_order.h: the ring's, else rank
// order), so all outputs hold the same bits, and the bits the fallback would give;
// in-place buffers are safe because only rank r touches share r of any buffer.
//
// Thread safety: reentrant (the buffers aside).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collie/types.h"
#include "core/plan/fold_order.h"

namespace collie {

// The elements [begin, end) of share `rank` of `count` elements of `elementBytes` bytes
// over `nranks` ranks: cuts at 64-byte boundaries (every element size divides 64), the
// last share ends at `count`.
struct ShareRange {
  size_t begin = 0;
  size_t end = 0;
};
ShareRange shareRange(size_t count, size_t elementBytes, int nranks, int rank);

// dst = sources[0] op sources[1] op ... in that order (kAvg divided by sources.size() at
// the end). dst may be one of the sources; `scratch` (elems elements) holds the partial
// result for three or more sources, so that dst is written only by the last step.
void reduceInOrder(uint8_t* dst, const std::vector<const uint8_t*>& sources, size_t elems,
                   DataType dtype, ReduceOp op, uint8_t* scratch);

// dst = elements [at, at + elems) of a `count`-element all-reduce, sources[r] pointing at
// rank r's values of element `at`, combined in `fold`'s order (core/plan/fold_order.h:
// rank order as reduceInOrder(), or the ring's; kAvg divided at the end). Aliasing and
// `scratch` as for reduceInOrder().
void reduceAsFolded(uint8_t* dst, const std::vector<const uint8_t*>& sources, size_t at,
                    size_t elems, size_t count, const FoldOrder& fold, DataType dtype, ReduceOp op,
                    uint8_t* scratch);

// Reduces share `rank` of `count` elements over `inputs` (in `fold`'s order) into every
// one of `outputs`. `scratch` holds kDirectTileBytes bytes, 64-byte aligned;
// `tileSources` is the caller's room for a tile's source pointers (resized here; kept
// between calls, it allocates once). With `stream` the tiles are written with streaming
// (non-temporal) stores and fenced before returning: for outputs that are not in cache
// (out of place, at least kDirectStreamingMinBytes).
constexpr size_t kDirectTileBytes = 16 * 1024;
constexpr size_t kDirectStreamingTileBytes = 2 * 1024;
// 16 MiB: at 4 MiB (2 ranks, 16 MiB of inputs and outputs, inside the 32 MiB L3) plain
// stores won on a quiet machine (178 against 322 us, docs/decisions/roofline-shm.md);
// from 16 MiB the streaming stores do (1444 against 2078 us).
constexpr size_t kDirectStreamingMinBytes = 16 << 20;
void directAllReduceShare(const std::vector<const uint8_t*>& inputs,
                          const std::vector<uint8_t*>& outputs, size_t count, DataType dtype,
                          ReduceOp op, const FoldOrder& fold, int rank, uint8_t* scratch,
                          std::vector<const uint8_t*>* tileSources, bool stream);

// How many shares directAllReduceShare() reduced in this process (for tests and
// diagnostics: it shows that the direct path ran).
uint64_t directShareCount();

}  // namespace collie
