#include "core/team/cross_memory.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/team/direct_share.h"

namespace collie {
namespace {

std::atomic<uint64_t> gShares{0};
std::atomic<uint64_t> gExchanges{0};

// Copies this rank's own block (nothing when it is already in place).
void copyOwn(void* to, const void* from, size_t bytes) {
  if (bytes > 0 && to != from) std::memmove(to, from, bytes);
}

}  // namespace

uint64_t crossMemoryShareCount() { return gShares.load(std::memory_order_relaxed); }
uint64_t crossMemoryExchangeCount() { return gExchanges.load(std::memory_order_relaxed); }

Result<bool> probeCrossMemory(PeerMemory& memory, int rank,
                              const std::vector<CrossMemoryRank>& ranks, CollectiveKind kind,
                              int root, size_t bytes, std::string* why) {
  const int n = static_cast<int>(ranks.size());
  if (kind == CollectiveKind::kAllReduce) {
    for (int peer = 0; peer < n; ++peer) {
      if (peer == rank) continue;
      Result<bool> allowed = memory.probe(peer, ranks[peer].output, bytes, /*write=*/true, why);
      if (!allowed.isOk() || !*allowed) return allowed;
    }
    return true;
  }
  // An exchange only reads the peers' inputs (its leaves' outputs may be null).
  for (int peer : exchangeSources(kind, root, rank, n)) {
    Result<bool> allowed = memory.probe(peer, ranks[peer].input, bytes, /*write=*/false, why);
    if (!allowed.isOk() || !*allowed) return allowed;
  }
  return true;
}

Status CrossMemoryAllReduce::reduceShare(PeerMemory& memory, int rank,
                                         const std::vector<CrossMemoryRank>& ranks,
                                         const void* input, void* output, size_t count,
                                         DataType dtype, ReduceOp op, const FoldOrder& fold) {
  const int n = static_cast<int>(ranks.size());
  const size_t es = dataTypeSize(dtype);
  const size_t peers = static_cast<size_t>(std::max(1, n - 1));
  const ShareRange share = shareRange(count, es, n, rank);
  const size_t budget = (share.end - share.begin) * es >= kCrossMemoryLargeShareBytes
                            ? kCrossMemoryLargeTileBytes
                            : kCrossMemoryTileBytes;
  const size_t tileBytes = std::max<size_t>(4096, budget / peers / 64 * 64);
  const size_t need = (peers + 1) * tileBytes;  // a pulled tile per peer + scratch
  if (bufferBytes_ < need) {
    buffer_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, need)));
    if (!buffer_) return systemError("team: allocating the cross-memory tiles", ENOMEM);
    bufferBytes_ = need;
  }
  gShares.fetch_add(1, std::memory_order_relaxed);
  const size_t tile = tileBytes / es;
  uint8_t* scratch = buffer_.get() + peers * tileBytes;
  std::vector<const uint8_t*>& sources = sources_;
  sources.resize(n);
  for (size_t first = share.begin; first < share.end; first += tile) {
    const size_t elems = std::min(tile, share.end - first);
    const size_t offset = first * es;
    uint8_t* pulled = buffer_.get();
    for (int r = 0; r < n; ++r) {
      if (r == rank) {
        sources[r] = static_cast<const uint8_t*>(input) + offset;
        continue;
      }
      COLLIE_RETURN_IF_ERROR(memory.pull(r, ranks[r].input + offset, pulled, elems * es));
      sources[r] = pulled;
      pulled += tileBytes;
    }
    uint8_t* result = static_cast<uint8_t*>(output) + offset;
    reduceAsFolded(result, sources, first, elems, count, fold, dtype, op, scratch);
    for (int r = 0; r < n; ++r) {
      if (r == rank) continue;
      COLLIE_RETURN_IF_ERROR(memory.push(r, ranks[r].output + offset, result, elems * es));
    }
  }
  return Status();
}

std::vector<int> exchangeSources(CollectiveKind kind, int root, int rank, int nranks) {
  std::vector<int> sources;
  const bool all =
      kind == CollectiveKind::kAllToAll || (kind == CollectiveKind::kGather && rank == root);
  // From the next rank on, so that the ranks of an all-to-all start on different peers.
  for (int k = 1; k < nranks && all; ++k) sources.push_back((rank + k) % nranks);
  if (kind == CollectiveKind::kScatter && rank != root) sources.push_back(root);
  return sources;
}

Status pullBlocks(PeerMemory& memory, int rank, const std::vector<CrossMemoryRank>& ranks,
                  CollectiveKind kind, int root, const void* input, void* output, size_t bytes) {
  const int n = static_cast<int>(ranks.size());
  gExchanges.fetch_add(1, std::memory_order_relaxed);
  const auto* in = static_cast<const uint8_t*>(input);
  auto* out = static_cast<uint8_t*>(output);
  if (bytes == 0) return Status();
  switch (kind) {
    case CollectiveKind::kAllToAll:
      copyOwn(out + rank * bytes, in + rank * bytes, bytes);
      for (int peer : exchangeSources(kind, root, rank, n)) {
        COLLIE_RETURN_IF_ERROR(
            memory.pull(peer, ranks[peer].input + rank * bytes, out + peer * bytes, bytes));
      }
      return Status();
    case CollectiveKind::kGather:
      if (rank != root) return Status();
      copyOwn(out + rank * bytes, in, bytes);
      for (int peer : exchangeSources(kind, root, rank, n)) {
        COLLIE_RETURN_IF_ERROR(memory.pull(peer, ranks[peer].input, out + peer * bytes, bytes));
      }
      return Status();
    case CollectiveKind::kScatter:
      if (rank == root) {
        copyOwn(out, in + rank * bytes, bytes);
        return Status();
      }
      return memory.pull(root, ranks[root].input + rank * bytes, out, bytes);
    default:
      return invalidArgument("team: cross-memory exchange of " + std::string(collectiveName(kind)));
  }
}

}  // namespace collie
