// The first exchange of Communicator::create: every rank publishes what it joins with
// and reads every peer's before any transport connects.
//
// Each rank claims its rank number (a store counter: a second claimant fails at once)
// and publishes a join record: its host id and every setting that must be equal on
// every rank (nranks, the forced transport, algorithm, channels, chunk size, and the
// knobs the config table marks must-match). A rank that finds a peer's record differing
// in any field fails with Mismatch naming the field, the peer and both values, and posts
// the reason under the communicator's "setup failed" key; every other rank waiting in
// the exchange sees that key and fails with the same reason. So disagreements end the
// set-up on every rank within milliseconds instead of a COLLIE_TIMEOUT later.
//
// Under `collie run` the launcher also posts each rank's exit (launcherExitKey): a rank
// that exits before joining fails the others at once, naming it and its exit status.
//
// Thread safety: the functions are reentrant; one exchange per communicator creation.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "collie/store.h"
#include "core/config/config.h"

namespace collie {

struct JoinRecord {
  std::string hostId;
  // (field, value) pairs every rank must agree on, in a fixed order.
  std::vector<std::pair<std::string, std::string>> mustMatch;

  std::string encode() const;
  static Result<JoinRecord> decode(const std::string& text);
};

// The must-match fields of this rank: nranks and the effective settings given, then
// every knob marked must-match, as this communicator's snapshot `config` holds it (so an
// override given in code on one rank only differs like an environment variable would).
std::vector<std::pair<std::string, std::string>> mustMatchSettings(
    int nranks, const std::vector<std::pair<std::string, std::string>>& effective,
    const Config& config);

// The first field where `mine` and `theirs` differ, as "field: this rank X, rank P Y";
// empty when they agree.
std::string describeDisagreement(const JoinRecord& mine, const JoinRecord& theirs, int peer);

// Where `collie run` posts that a rank exited: the job-wide key "<prefix>/exit/<rank>"
// holds "exited with status S" or "was killed by signal N"; "<prefix>/exits" counts them.
std::string launcherExitPrefix(const std::string& jobTag);

struct JoinContext {
  Store* store = nullptr;
  std::string jobKey;         // this communicator's key prefix
  std::string launcherExits;  // launcherExitPrefix(tag), or "" to not watch
  int rank = 0;
  int nranks = 1;
};

// Claims ctx.rank, publishes `mine`, waits for every peer's record and returns every
// rank's host id. Fails as the header describes; Timeout naming the first missing rank
// after `deadline`.
Result<std::vector<std::string>> exchangeJoinRecords(const JoinContext& ctx, const JoinRecord& mine,
                                                     Deadline deadline);

}  // namespace collie
