#include "transports/shm/shm_cma_exchange.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace collie::shm {
namespace {

std::atomic<uint64_t> gExchanges{0};

// Copies this rank's own block (nothing when it is already in place).
void copyOwn(void* to, const void* from, size_t bytes) {
  if (bytes > 0 && to != from) std::memmove(to, from, bytes);
}

}  // namespace

uint64_t crossMemoryExchangeCount() { return gExchanges.load(std::memory_order_relaxed); }

std::vector<int> exchangeSources(CollectiveKind kind, int root, int rank, int nranks) {
  std::vector<int> sources;
  const bool all =
      kind == CollectiveKind::kAllToAll || (kind == CollectiveKind::kGather && rank == root);
  // From the next rank on, so that the ranks of an all-to-all start on different peers.
  for (int k = 1; k < nranks && all; ++k) sources.push_back((rank + k) % nranks);
  if (kind == CollectiveKind::kScatter && rank != root) sources.push_back(root);
  return sources;
}

Status pullBlocks(const std::vector<CrossMemoryRank>& ranks, int rank, CollectiveKind kind,
                  int root, const void* input, void* output, size_t bytes) {
  const int n = static_cast<int>(ranks.size());
  gExchanges.fetch_add(1, std::memory_order_relaxed);
  const auto* in = static_cast<const uint8_t*>(input);
  auto* out = static_cast<uint8_t*>(output);
  if (bytes == 0) return Status();
  switch (kind) {
    case CollectiveKind::kAllToAll:
      copyOwn(out + rank * bytes, in + rank * bytes, bytes);
      for (int peer : exchangeSources(kind, root, rank, n)) {
        COLLIE_RETURN_IF_ERROR(pullFromPeer(peer, ranks[peer].pid, ranks[peer].input + rank * bytes,
                                            out + peer * bytes, bytes));
      }
      return Status();
    case CollectiveKind::kGather:
      if (rank != root) return Status();
      copyOwn(out + rank * bytes, in, bytes);
      for (int peer : exchangeSources(kind, root, rank, n)) {
        COLLIE_RETURN_IF_ERROR(
            pullFromPeer(peer, ranks[peer].pid, ranks[peer].input, out + peer * bytes, bytes));
      }
      return Status();
    case CollectiveKind::kScatter:
      if (rank == root) {
        copyOwn(out, in + rank * bytes, bytes);
        return Status();
      }
      return pullFromPeer(root, ranks[root].pid, ranks[root].input + rank * bytes, out, bytes);
    default:
      return invalidArgument("shm: cross-memory exchange of " + std::string(collectiveName(kind)));
  }
}

}  // namespace collie::shm
