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
#include "core/comm/communicator_impl.h"
#include "core/comm/options_config.h"
#include "core/log/log.h"
#include "core/net/job_secret.h"

namespace collie {
namespace {

// A child runs on its parent's device (NCCL's split and shrink keep the parent's), not
// on whichever device is current on the thread that creates it (a non-blocking split
// runs on a thread of its own): that device is current while the child is created.
template <typename Create>
Result<std::unique_ptr<Communicator>> onParentDevice(DeviceRuntime* runtime, int device,
                                                     Create create) {
  if (runtime == nullptr || device < 0) return create();
  Result<int> callers = runtime->currentDevice();
  if (!callers.isOk()) return callers.status();
  if (*callers != device) COLLIE_RETURN_IF_ERROR(runtime->setCurrentDevice(device));
  Result<std::unique_ptr<Communicator>> created = create();
  if (*callers != device) (void)runtime->setCurrentDevice(*callers);
  return created;
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::split(int color, int key,
                                                          const Options& options) {
  Impl& self = *impl_;
  int32_t mine[2] = {color < 0 ? -1 : color, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(self.nranks));
  Result<Work> gathered = allGather(mine, all.data(), 2, DataType::kInt32);
  if (!gathered.isOk()) return gathered.status().withContext("split");
  COLLIE_RETURN_IF_ERROR(gathered->wait().withContext("split: exchanging colors"));
  const int splitIndex = self.splits++;
  if (color < 0) return std::unique_ptr<Communicator>();

  std::vector<std::pair<int32_t, int>> members;  // (key, parent rank)
  for (int r = 0; r < self.nranks; ++r) {
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  }
  std::sort(members.begin(), members.end());
  int newRank = 0;
  while (members[newRank].second != self.rank) ++newRank;

  UniqueId child = self.id;
  child.secret = deriveJobSecret(
      self.id.secret, "split/" + std::to_string(splitIndex) + "/" + std::to_string(color));
  // The parent's snapshot with the split's own overrides on top: the environment is not
  // read again, so a child is configured like its parent unless `options` says otherwise.
  Result<Config> settings = configWithOptions(self.config, options);
  COLLIE_LOG(INFO, INIT) << "split #" << splitIndex << ": rank " << self.rank << " color " << color
                         << " key " << key << " -> rank " << newRank << " of " << members.size();
  Result<std::unique_ptr<Communicator>> created =
      settings.isOk() ? onParentDevice(self.deviceRuntime, self.deviceOrdinal,
                                       [&] {
                                         return Impl::create(
                                             child, newRank, static_cast<int>(members.size()),
                                             *settings, options.store ? options.store : self.store);
                                       })
                      : Result<std::unique_ptr<Communicator>>(settings.status());
  setLogRank(self.rank);  // log lines keep naming the rank of the parent
  if (!created.isOk()) {
    return created.status().withContext("split #" + std::to_string(splitIndex) + " color " +
                                        std::to_string(color) + " on rank " +
                                        std::to_string(self.rank));
  }
  return created;
}

Result<std::unique_ptr<Communicator>> Communicator::shrink(const std::vector<int>& excluded) {
  Impl& self = *impl_;
  std::vector<int> gone = excluded;
  std::sort(gone.begin(), gone.end());
  gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
  std::string list;
  int newRank = self.rank;
  for (int r : gone) {
    if (r < 0 || r >= self.nranks) {
      return invalidArgument("shrink on rank " + std::to_string(self.rank) + ": excluded rank " +
                             std::to_string(r) + " is outside [0, " + std::to_string(self.nranks) +
                             ")");
    }
    if (r == self.rank) {
      return invalidArgument("shrink on rank " + std::to_string(self.rank) +
                             ": this rank is in the excluded list; only survivors call shrink");
    }
    if (r < self.rank) --newRank;
    list += (list.empty() ? "" : ",") + std::to_string(r);
  }
  const int newSize = self.nranks - static_cast<int>(gone.size());
  const int shrinkIndex = self.shrinks++;
  UniqueId child = self.id;
  child.secret =
      deriveJobSecret(self.id.secret, "shrink/" + std::to_string(shrinkIndex) + "/" + list);
  COLLIE_LOG(INFO, INIT) << "shrink #" << shrinkIndex << ": rank " << self.rank << " -> rank "
                         << newRank << " of " << newSize << " without ranks [" << list << "]";
  Result<std::unique_ptr<Communicator>> created = onParentDevice(
      self.deviceRuntime, self.deviceOrdinal,
      [&] { return Impl::create(child, newRank, newSize, self.config, self.store); });
  setLogRank(self.rank);
  if (!created.isOk()) {
    return created.status().withContext("shrink on rank " + std::to_string(self.rank) +
                                        " (excluding [" + list + "])");
  }
  (*created)->impl_->storeServer = self.storeServer;
  return created;
}

}  // namespace collie
