#include "core/comm/join_agreement.h"

#include <unistd.h>

#include <algorithm>

#include "core/config/config.h"

namespace collie {
namespace {

constexpr char kMagic[] = "collie-join-v1";
constexpr auto kPoll = std::chrono::milliseconds(20);

Bytes toBytes(const std::string& text) { return Bytes(text.begin(), text.end()); }
std::string fromBytes(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

std::string recordKey(const JoinContext& ctx, int rank) {
  return ctx.jobKey + "/join/" + std::to_string(rank);
}
std::string failedKey(const JoinContext& ctx) { return ctx.jobKey + "/join/failed"; }

// A key's value if it is set now; empty otherwise (or on a store error).
std::string peek(Store& store, const std::string& key) {
  Result<Bytes> value = store.get(key, Clock::now());
  return value.isOk() ? fromBytes(*value) : std::string();
}

// Posts `reason` for the ranks still waiting, and returns it as this rank's error.
Status failSetup(const JoinContext& ctx, Status reason) {
  ctx.store->set(failedKey(ctx), toBytes(reason.toString()));
  return reason;
}

// A launcher's report that `peer` exited, or "" when it has not (one counter read while
// no rank of the job has exited).
std::string launcherReport(const JoinContext& ctx, int peer) {
  if (ctx.launcherExits.empty()) return "";
  Result<int64_t> exits = ctx.store->add(ctx.launcherExits + "/exits", 0);
  if (!exits.isOk() || *exits == 0) return "";
  return peek(*ctx.store, ctx.launcherExits + "/exit/" + std::to_string(peer));
}

}  // namespace

std::string JoinRecord::encode() const {
  std::string text = std::string(kMagic) + "\nhost=" + hostId + "\n";
  for (const auto& [field, value] : mustMatch) text += field + "=" + value + "\n";
  return text;
}

Result<JoinRecord> JoinRecord::decode(const std::string& text) {
  auto bad = [](const std::string& why) {
    return remoteError("malformed join record (" + why + ")");
  };
  if (text.size() > 65536) return bad("too long");
  size_t pos = text.find('\n');
  if (pos == std::string::npos || text.substr(0, pos) != kMagic)
    return bad("not " + std::string(kMagic));
  JoinRecord record;
  bool sawHost = false;
  for (size_t start = pos + 1; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) return bad("unterminated line");
    const std::string line = text.substr(start, end - start);
    size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0) return bad("line without field=value");
    std::string field = line.substr(0, eq), value = line.substr(eq + 1);
    if (field == "host" && !sawHost) {
      record.hostId = value;
      sawHost = true;
    } else {
      record.mustMatch.emplace_back(std::move(field), std::move(value));
    }
    start = end + 1;
  }
  if (!sawHost) return bad("no host");
  return record;
}

std::vector<std::pair<std::string, std::string>> mustMatchSettings(
    int nranks, const std::vector<std::pair<std::string, std::string>>& effective,
    const Config& config) {
  std::vector<std::pair<std::string, std::string>> fields = {{"nranks", std::to_string(nranks)}};
  fields.insert(fields.end(), effective.begin(), effective.end());
  for (const Config::Entry& entry : config.entries()) {
    const Knob& knob = *entry.knob;
    if (!knob.mustMatch) continue;
    // Values compare as what they mean: 256K and 262144 agree.
    fields.emplace_back(knob.name, config.comparable(entry));
  }
  return fields;
}

std::string describeDisagreement(const JoinRecord& mine, const JoinRecord& theirs, int peer) {
  const std::string them = "rank " + std::to_string(peer);
  if (mine.mustMatch.size() != theirs.mustMatch.size()) {
    return "the set-up fields differ in number (" + std::to_string(mine.mustMatch.size()) +
           " here, " + std::to_string(theirs.mustMatch.size()) + " on " + them +
           "): different collie versions?";
  }
  auto shown = [](const std::string& v) { return v.empty() ? std::string("(unset)") : v; };
  for (size_t i = 0; i < mine.mustMatch.size(); ++i) {
    const auto& [field, ours] = mine.mustMatch[i];
    const auto& [theirField, value] = theirs.mustMatch[i];
    if (field != theirField) {
      return "the set-up fields differ (" + field + " here, " + theirField + " on " + them +
             "): different collie versions?";
    }
    if (ours != value)
      return field + ": this rank " + shown(ours) + ", " + them + " " + shown(value);
  }
  return "";
}

std::string launcherExitPrefix(const std::string& jobTag) {
  return "collie/" + jobTag + "/launcher";
}

Result<std::vector<std::string>> exchangeJoinRecords(const JoinContext& ctx, const JoinRecord& mine,
                                                     Deadline deadline) {
  Store& store = *ctx.store;
  const std::string self = "rank " + std::to_string(ctx.rank);
  Result<int64_t> claims = store.add(ctx.jobKey + "/join/claims/" + std::to_string(ctx.rank), 1);
  if (!claims.isOk()) return claims.status();
  if (*claims > 1) {
    return failSetup(ctx, invalidArgument(self + " was claimed by " + std::to_string(*claims) +
                                          " processes of one job (host " + mine.hostId + ", pid " +
                                          std::to_string(::getpid()) +
                                          " came second): every rank must be given a "
                                          "different rank number in [0, nranks)"));
  }
  COLLIE_RETURN_IF_ERROR(store.set(recordKey(ctx, ctx.rank), toBytes(mine.encode())));
  std::vector<std::string> hosts(ctx.nranks);
  hosts[ctx.rank] = mine.hostId;
  for (int peer = 0; peer < ctx.nranks; ++peer) {
    if (peer == ctx.rank) continue;
    for (;;) {
      const Deadline poll = std::min(deadline, Clock::now() + kPoll);
      Result<Bytes> value = store.get(recordKey(ctx, peer), poll);
      if (value.isOk()) {
        Result<JoinRecord> theirs = JoinRecord::decode(fromBytes(*value));
        if (!theirs.isOk())
          return failSetup(ctx, theirs.status().withContext("rank " + std::to_string(peer)));
        std::string differs = describeDisagreement(mine, *theirs, peer);
        if (!differs.empty()) {
          return failSetup(ctx, mismatchError(self + " and rank " + std::to_string(peer) +
                                                  " set up differently: " + differs,
                                              peer));
        }
        hosts[peer] = theirs->hostId;
        break;
      }
      if (value.status().code() != StatusCode::kTimeout) return value.status();
      std::string failed = peek(store, failedKey(ctx));
      if (!failed.empty()) {
        return Status(StatusCode::kRemoteError,
                      self + ": another rank failed the set-up: " + failed);
      }
      std::string exited = launcherReport(ctx, peer);
      if (!exited.empty()) {
        return failSetup(ctx, remoteError(self + ": rank " + std::to_string(peer) + " " + exited +
                                              " before joining the communicator",
                                          peer));
      }
      if (Clock::now() >= deadline) {
        return timeoutError(self + ": rank " + std::to_string(peer) +
                                " did not join the communicator before the deadline "
                                "(COLLIE_TIMEOUT; a rank that should join is missing or slow)",
                            peer);
      }
    }
  }
  return hosts;
}

}  // namespace collie
