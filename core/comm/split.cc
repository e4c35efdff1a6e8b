// Communicator::split: MPI_Comm_split / ncclCommSplit over an existing communicator,
// and Communicator::shrink: the survivors of a failure form a new communicator.
//
// The ranks exchange (color, key) with an all-gather on the parent, then each color's
// ranks create a communicator from a unique id derived from the parent's: same store
// address, a secret mixed from the parent's secret, the parent's split count and the
// color. Every rank of the parent calls split() in the same order, so the split count
// (and with it the derived id and store keys) agrees without further messages.
// shrink() exchanges nothing over the (possibly broken) parent: survivors derive the
// child id from the parent's, their shrink count and the excluded list, so only
// survivors that agree on the list meet.
#include <algorithm>
#include <cstring>

#include "collie/communicator.h"
#include "core/log/log.h"

namespace collie {
namespace {

uint64_t mix64(uint64_t x) {  // SplitMix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Not a KDF: the child secret only has to differ per (split, color) and be unknown to
// whoever does not know the parent's secret.
JobSecret deriveSecret(const JobSecret& parent, int splitIndex, int color) {
  uint64_t halves[2];
  std::memcpy(halves, parent.data(), sizeof(halves));
  uint64_t salt = mix64((static_cast<uint64_t>(splitIndex) << 32) ^ static_cast<uint32_t>(color));
  uint64_t out[2];
  out[0] = mix64(halves[0] ^ mix64(halves[1] ^ salt));
  out[1] = mix64(halves[1] ^ mix64(out[0] ^ salt ^ 0x5bd1e995ull));
  JobSecret secret;
  std::memcpy(secret.data(), out, sizeof(out));
  return secret;
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::split(int color, int key,
                                                          const Options& options) {
  int32_t mine[2] = {color < 0 ? -1 : color, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(nranks_));
  Result<Work> gathered = allGather(mine, all.data(), 2, DataType::kInt32);
  if (!gathered.isOk()) return gathered.status().withContext("split");
  COLLIE_RETURN_IF_ERROR(gathered->wait().withContext("split: exchanging colors"));
  const int splitIndex = splits_++;
  if (color < 0) return std::unique_ptr<Communicator>();

  std::vector<std::pair<int32_t, int>> members;  // (key, parent rank)
  for (int r = 0; r < nranks_; ++r) {
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  }
  std::sort(members.begin(), members.end());
  int newRank = 0;
  while (members[newRank].second != rank_) ++newRank;

  UniqueId child = id_;
  child.secret = deriveSecret(id_.secret, splitIndex, color);
  Options merged = options_;
  if (options.timeout.count() > 0) merged.timeout = options.timeout;
  if (!options.transport.empty()) merged.transport = options.transport;
  if (options.algorithm != Algorithm::kAuto) merged.algorithm = options.algorithm;
  if (options.nchannels > 0) merged.nchannels = options.nchannels;
  if (options.chunkBytes > 0) merged.chunkBytes = options.chunkBytes;
  if (!options.hostId.empty()) merged.hostId = options.hostId;
  merged.store = options.store ? options.store : store_;
  COLLIE_LOG(INFO, INIT) << "split #" << splitIndex << ": rank " << rank_ << " color " << color
                         << " key " << key << " -> rank " << newRank << " of " << members.size();
  Result<std::unique_ptr<Communicator>> created =
      create(child, newRank, static_cast<int>(members.size()), merged);
  setLogRank(rank_);  // log lines keep naming the rank of the parent
  if (!created.isOk()) {
    return created.status().withContext("split #" + std::to_string(splitIndex) + " color " +
                                        std::to_string(color) + " on rank " +
                                        std::to_string(rank_));
  }
  return created;
}

Result<std::unique_ptr<Communicator>> Communicator::shrink(const std::vector<int>& excluded) {
  std::vector<int> gone = excluded;
  std::sort(gone.begin(), gone.end());
  gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
  std::string list;
  uint64_t listHash = 0x51ed270b;
  int newRank = rank_;
  for (int r : gone) {
    if (r < 0 || r >= nranks_) {
      return invalidArgument("shrink on rank " + std::to_string(rank_) + ": excluded rank " +
                             std::to_string(r) + " is outside [0, " + std::to_string(nranks_) +
                             ")");
    }
    if (r == rank_) {
      return invalidArgument("shrink on rank " + std::to_string(rank_) +
                             ": this rank is in the excluded list; only survivors call shrink");
    }
    if (r < rank_) --newRank;
    list += (list.empty() ? "" : ",") + std::to_string(r);
    listHash = mix64(listHash ^ static_cast<uint64_t>(r));
  }
  const int newSize = nranks_ - static_cast<int>(gone.size());
  const int shrinkIndex = shrinks_++;
  // A negative index keeps shrink's secrets apart from split's.
  UniqueId child = id_;
  child.secret = deriveSecret(id_.secret, -1 - shrinkIndex, static_cast<int>(listHash));
  Options merged = options_;
  merged.store = store_;
  COLLIE_LOG(INFO, INIT) << "shrink #" << shrinkIndex << ": rank " << rank_ << " -> rank "
                         << newRank << " of " << newSize << " without ranks [" << list << "]";
  Result<std::unique_ptr<Communicator>> created = create(child, newRank, newSize, merged);
  setLogRank(rank_);
  if (!created.isOk()) {
    return created.status().withContext("shrink on rank " + std::to_string(rank_) +
                                        " (excluding [" + list + "])");
  }
  (*created)->storeServer_ = storeServer_;
  return created;
}

}  // namespace collie
