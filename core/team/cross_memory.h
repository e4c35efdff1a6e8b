// The cma collectives: single copy over unregistered buffers through the peers' memory's
// pull() and push() (cross-memory attach, core/transport/peer_memory.h).
//
// All-reduce: every rank publishes its buffer addresses (core/team/single_copy.cc does,
// in its board note). Rank r owns share r of the elements (shareRange(), as the direct
// all-reduce). For each tile of its share (kCrossMemoryTileBytes over all peers, so that
// it stays in cache) it pulls every peer's part of the input, reduces those and its own
// input straight into its own output (fused: no separate copy pass), and pushes that
// tile, still in cache, into every peer's output. So each input byte is read once and
// each output byte written once, and every element is reduced once, by one rank, in the
// order of the schedule behind the team step (core/plan/fold_order.h: the ring's, else
// rank order): all outputs hold the same bits, the bits the ring would give. In-place
// buffers are safe: share r of any rank's buffer is read and then written only by rank
// r, tile by tile.
//
// Exchanges (all-to-all, gather, scatter): each rank pulls the blocks it receives
// straight from the senders' inputs into its output, one copy per block and no staging
// (as Open MPI's vader/sm does with CMA). The caller waits until every rank pulled before
// anyone returns (a sender's input must stay valid until then).
//
// Thread safety: a CrossMemoryAllReduce is used by one thread at a time; the functions
// are reentrant (the buffers aside).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collie/status.h"
#include "collie/types.h"
#include "core/plan/fold_order.h"
#include "core/transport/peer_memory.h"

namespace collie {

// What one rank published for a cross-memory collective.
struct CrossMemoryRank {
  uint64_t input = 0;   // address of its input in its process
  uint64_t output = 0;  // address of its output in its process
};

// Tile budget: the pulled parts of all peers together stay within this many bytes (in
// cache next to the output tile being written): 256 KiB, and 1 MiB where this rank's
// share is 4 MiB or more. Paired on 2 ranks (docs/decisions/huge-pages-cma.md): 1 MiB
// tiles were 13-20% faster at 4-256 MiB (fewer system calls, each pinning few folios in
// huge pages); below, where one or two tiles cover a share, 256 KiB stays as it was.
constexpr size_t kCrossMemoryTileBytes = 256 * 1024;
constexpr size_t kCrossMemoryLargeTileBytes = 1024 * 1024;
constexpr size_t kCrossMemoryLargeShareBytes = 4 << 20;

class CrossMemoryAllReduce {
 public:
  // Share `rank` of `count` elements: for each tile, pulls every peer's part of the
  // input, reduces them with `input`'s in `fold`'s order into `output` and pushes the
  // result into every peer's output. `output` may equal `input`.
  Status reduceShare(PeerMemory& memory, int rank, const std::vector<CrossMemoryRank>& ranks,
                     const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
                     const FoldOrder& fold);

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> buffer_;  // pulled tiles + scratch, 64-byte aligned
  size_t bufferBytes_ = 0;
  std::vector<const uint8_t*> sources_;  // a tile's sources, kept between calls
};

// Whether every rank this rank's part of `kind` reaches lets it through (before anyone
// writes an output): an all-reduce reads and writes back a few bytes of every peer's
// output, an exchange reads a few bytes of each input it pulls from. false, with *why,
// when the kernel refuses; an error for a gone peer or a bad address.
Result<bool> probeCrossMemory(PeerMemory& memory, int rank,
                              const std::vector<CrossMemoryRank>& ranks, CollectiveKind kind,
                              int root, size_t bytes, std::string* why);

// The ranks whose input rank `rank` reads in exchange `kind` on `nranks` ranks: every
// other rank for an all-to-all and a gather's root, the root for a scatter's leaves,
// none otherwise.
std::vector<int> exchangeSources(CollectiveKind kind, int root, int rank, int nranks);

// This rank's part of exchange `kind` of blocks of `bytes` bytes: an all-to-all pulls
// block `rank` of every peer's input into block p of `output` (p the peer) and copies its
// own; a gather's root pulls every peer's input into its block; a scatter's leaf pulls
// its block of the root's input, the root copies its own. `ranks` as published, this rank's at
// `rank`.
Status pullBlocks(PeerMemory& memory, int rank, const std::vector<CrossMemoryRank>& ranks,
                  CollectiveKind kind, int root, const void* input, void* output, size_t bytes);

// How many shares reduceShare() reduced and how many exchanges pullBlocks() ran in this
// process (tests: shows the path ran).
uint64_t crossMemoryShareCount();
uint64_t crossMemoryExchangeCount();

}  // namespace collie
