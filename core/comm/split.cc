// Communicator::split: MPI_Comm_split / ncclCommSplit over an existing communicator,
// and Communicator::shrink: the survivors of a failure form a new communicator.
//
// The ranks exchange (color, key) with an all-gather on the parent, then each color's
// ranks create a communicator from a unique id derived from the parent's: same store
// address, a secret derived (SHA-256) from the parent's secret, the parent's split count
// and the color. Every rank of the parent calls split() in the same order, so the split count
// (and with it the derived id and store keys) agrees without further messages.
// shrink() exchanges nothing over the (possibly broken) parent: survivors derive the
// child id from the parent's, their shrink count and the excluded list, so only
// survivors that agree on the list meet.
#include <algorithm>
#include <cstring>

#include "collie/communicator.h"
#include "core/bootstrap/job_secret.h"
#include "core/log/log.h"

namespace collie {

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
  child.secret = deriveJobSecret(
      id_.secret, "split/" + std::to_string(splitIndex) + "/" + std::to_string(color));
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
  }
  const int newSize = nranks_ - static_cast<int>(gone.size());
  const int shrinkIndex = shrinks_++;
  UniqueId child = id_;
  child.secret = deriveJobSecret(id_.secret, "shrink/" + std::to_string(shrinkIndex) + "/" + list);
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
