// Communicator::registerDeviceWindow and deregisterDeviceWindow: the collective
// registration of device memory that every rank maps (DeviceComm's user windows,
// core/device/device_comm.h), exchanged through two all-gathers of fixed-size entries
// on the host path.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "collie/communicator.h"
#include "core/comm/communicator_impl.h"
#include "core/log/log.h"

namespace collie {
namespace {

// One rank's entry in each round: "ok <line>" or "err <reason>", zero-padded.
constexpr size_t kEntryBytes = 512;

std::string registrationRankName(int rank) { return "rank " + std::to_string(rank); }

// Every rank's entry (rank order); the round's outcome is the same on every rank.
Result<std::vector<std::string>> exchangeEntries(Communicator& comm, const std::string& mine) {
  std::vector<char> sent(kEntryBytes, 0);
  std::memcpy(sent.data(), mine.data(), std::min(mine.size(), kEntryBytes - 1));
  std::vector<char> all(kEntryBytes * static_cast<size_t>(comm.size()), 0);
  Result<Work> gathered = comm.allGather(sent.data(), all.data(), kEntryBytes, DataType::kUint8);
  if (!gathered.isOk()) return gathered.status();
  COLLIE_RETURN_IF_ERROR(gathered->wait());
  std::vector<std::string> entries(comm.size());
  for (int r = 0; r < comm.size(); ++r) {
    const char* entry = all.data() + kEntryBytes * r;
    entries[r].assign(entry, strnlen(entry, kEntryBytes));
  }
  return entries;
}

// The first rank (rank order) whose entry is not "ok ...": its error, with its code
// when it is one of the two a registration gives, else InvalidArgument.
Status firstRefusal(const std::vector<std::string>& entries, const char* what) {
  for (size_t r = 0; r < entries.size(); ++r) {
    const std::string& entry = entries[r];
    if (entry.rfind("ok ", 0) == 0) continue;
    const bool unmappable = entry.rfind("err unsupported ", 0) == 0;
    const std::string reason = entry.substr(std::min<size_t>(
        entry.size(), entry.find(' ', 4) == std::string::npos ? 4 : entry.find(' ', 4) + 1));
    const std::string message = std::string(what) + ": " +
                                registrationRankName(static_cast<int>(r)) + ": " +
                                (reason.empty() ? "malformed entry" : reason);
    return Status(unmappable ? StatusCode::kUnsupported : StatusCode::kInvalidArgument, message,
                  static_cast<int>(r));
  }
  return Status();
}

std::string refusalOf(const Status& status) {
  return std::string("err ") +
         (status.code() == StatusCode::kUnsupported ? "unsupported " : "invalid ") +
         status.message();
}

}  // namespace

Status Communicator::registerDeviceWindow(void* ptr, size_t bytes) {
  Impl& self = *impl_;
  const std::string what = "registerDeviceWindow on " + registrationRankName(self.rank);
  if (self.device == nullptr) {
    // Alike on every rank: the windows were opened on all or none.
    return unsupported(what +
                       ": this communicator has no device windows (ranks on several "
                       "hosts, or no device runtime); collectives on device buffers take "
                       "the staged path");
  }
  // Round 1: every rank's range, or why it cannot offer one.
  Result<std::string> exported = self.device->exportWindow(ptr, bytes);
  Result<std::vector<std::string>> offers =
      exchangeEntries(*this, exported.isOk() ? "ok " + *exported : refusalOf(exported.status()));
  if (!offers.isOk()) return offers.status().withContext(what);
  COLLIE_RETURN_IF_ERROR(firstRefusal(*offers, "registerDeviceWindow"));
  std::vector<std::string> lines(offers->size());
  for (size_t r = 0; r < lines.size(); ++r) lines[r] = (*offers)[r].substr(3);
  // Round 2: whether every rank mapped every peer's range; a rank that could not
  // makes every rank drop the window.
  Status added = self.device->addWindow(ptr, bytes, lines);
  // A malformed entry or another size: every rank found it in the same entries.
  if (added.code() == StatusCode::kInvalidArgument) return added.withContext(what);
  Result<std::vector<std::string>> mapped =
      exchangeEntries(*this, added.isOk() ? std::string("ok mapped") : refusalOf(added));
  if (!mapped.isOk()) {
    if (added.isOk()) (void)self.device->removeWindow(ptr);
    return mapped.status().withContext(what);
  }
  Status agreed = firstRefusal(*mapped, "registerDeviceWindow");
  if (!agreed.isOk() && added.isOk()) (void)self.device->removeWindow(ptr);
  if (agreed.isOk()) {
    COLLIE_LOG(INFO, INIT) << what << ": a device window of " << bytes
                           << " bytes, mapped by every rank";
  }
  return agreed;
}

Status Communicator::deregisterDeviceWindow(const void* ptr) {
  Impl& self = *impl_;
  if (self.device == nullptr) {
    return notFound("deregisterDeviceWindow on " + registrationRankName(self.rank) +
                    ": this communicator has no device windows");
  }
  return self.device->removeWindow(ptr).withContext("deregisterDeviceWindow on " +
                                                    registrationRankName(self.rank));
}

}  // namespace collie
