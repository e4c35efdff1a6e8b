// Team collectives in a schedule: the team step, what a team offers the tuner, and how
// much of the board one collective needs.
//
// When one transport connects every rank of a communicator through memory they all map
// (UCC's "team" collectives), core/team runs whole collectives on that transport's team
// board (core/transport/team_board.h): with shm, every rank on one host, the board
// (every rank publishes its part on a shared board and computes its output from every
// part, in rank order), the direct all-reduce (single copy through buffers every rank
// registered) and the cma all-reduce (single copy through cross-memory attach). They are
// algorithms like ring and tree: named in `Algorithm`, costed and chosen by the tuner
// (core/tune/tuner.h), forced by COLLIE_ALGO, checked by the simulator.
//
// A schedule runs them through one step, kTeam, first on channel 0. Its `team` is a set
// of team algorithms, tried in kTeamOrder (direct, cma, board); each has a condition
// that the team decides from what every rank published for this collective, so that
// every rank takes the same branch: direct needs every rank's buffers registered, cma
// needs cross-memory attach to work between every pair (probed once) and every rank's
// all-reduce in place or at most TeamOffer::cmaMaxBytes, board needs every rank's part
// to fit the board (known from the arguments; the tuner only offers it then). The
// first whose condition holds runs the collective, and the steps after the team step,
// on every channel, are skipped. When none does ("declined", alike on every rank), the
// steps after it run: the fallback schedule. A team step with an empty set only checks
// that every rank runs the same collective (its fingerprint) before the fallback:
// a rank whose plan went through the team and one whose plan did not would otherwise
// wait for each other until the timeout instead of failing with Mismatch.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collie/types.h"
#include "core/plan/algorithm_spec.h"
#include "core/plan/schedule.h"

namespace collie {

// The order a team step tries its algorithms in.
inline constexpr Algorithm kTeamOrder[] = {Algorithm::kDirect, Algorithm::kCma, Algorithm::kBoard};

constexpr TeamAlgorithms teamBit(Algorithm algo) {
  return static_cast<TeamAlgorithms>(1u << static_cast<unsigned>(algo));
}
constexpr bool teamHas(TeamAlgorithms set, Algorithm algo) { return (set & teamBit(algo)) != 0; }
// The first algorithm of `set` in kTeamOrder, or kAuto for an empty set.
constexpr Algorithm firstTeamAlgorithm(TeamAlgorithms set) {
  for (Algorithm algo : kTeamOrder) {
    if (teamHas(set, algo)) return algo;
  }
  return Algorithm::kAuto;
}
// "direct>cma>board" (kTeamOrder), "check" for an empty set.
std::string teamAlgorithmsText(TeamAlgorithms set);

// The exchanges with one block size on every rank (all-to-all, gather, scatter): not
// alltoallv, whose counts differ per rank.
constexpr bool isEqualExchange(CollectiveKind kind) {
  return isExchange(kind) && kind != CollectiveKind::kAllToAllV;
}

// Whether team algorithm `algo` implements `kind`: board every collective but
// point-to-point, alltoallv and the v kinds (their team step only checks the
// fingerprint), direct all-reduce only, cma all-reduce and the equal exchanges (each
// rank pulls its blocks from the senders' buffers): their specs' implements().
inline bool teamSupports(Algorithm algo, CollectiveKind kind) {
  const AlgorithmSpec* spec = AlgorithmRegistry::instance().find(algo);
  return spec != nullptr && spec->isTeam() && spec->implements(kind);
}

// Whether the engine times cma against the schedule behind a team step for a collective
// of `bytes` (core/engine/single_copy_choice.h) rather than taking the tuner's word: an
// all-reduce whose team step has a schedule behind it and no board in its set, above the
// board's slot (`boardBytes`) and at most `measuredMaxBytes` (COLLIE_TUNE_ADAPT_MAX; 0:
// nowhere). The tuner offers cma wherever this holds, and the engine times it there.
constexpr bool cmaIsMeasured(CollectiveKind kind, size_t bytes, TeamAlgorithms algorithms,
                             bool scheduleBehind, size_t boardBytes, size_t measuredMaxBytes) {
  return kind == CollectiveKind::kAllReduce && scheduleBehind &&
         !teamHas(algorithms, Algorithm::kBoard) && bytes > boardBytes && bytes <= measuredMaxBytes;
}

// The most bytes one rank publishes on the board for a collective of `bytes` (its
// count's bytes) on `nranks` ranks: a reduce-scatter's, all-to-all's or scatter root's
// whole input, a broadcast root's buffer, nothing for a barrier.
constexpr size_t boardBytesOf(CollectiveKind kind, size_t bytes, int nranks) {
  switch (kind) {
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kScatter:  // the root publishes every block
      return bytes * static_cast<size_t>(nranks);
    case CollectiveKind::kBarrier:
      return 0;
    default:
      return bytes;
  }
}

// The cost model of the team algorithms (S bytes per rank, n ranks, microseconds):
//   board  boardAlphaUs (n - 1) + (n + 2) S / boardBytesPerUs   (copy in, read every
//          rank's part, write the output; from cache for the board's sizes); an
//          all-reduce from boardTwoShotBytes on: 2 boardAlphaUs (n - 1) + (4n - 1)/n S /
//          boardBytesPerUs (copy in, reduce a share, publish it, a meeting, copy the
//          others' shares)
//   direct F_direct(n) + 2 S / directBytesPerUs                 (read a share of
//          every input, write it to every output)
//   cma    F_cma(n) + 2 (n-1)/n S / cmaBytesPerUs               (pull and push through
//          process_vm_readv/writev, which pin every page); an exchange of blocks of S
//          bytes: F_cma(n) + P / cmaBytesPerUs, P the bytes a rank pulls ((n-1) S for
//          all-to-all and a gather's root, S for a scatter's leaves)
// F, the fixed cost of a single-copy all-reduce (two meetings, resolving the peers'
// buffers or probing), is calibrated so that it costs what the board costs at the
// measured crossover: cmaCrossoverBytes for cma (COLLIE_SHM_CMA_MIN; where a host's
// ranks outnumber its cores the board beats cma at every size it carries and the
// crossover is its size), directCrossoverBytes for direct (COLLIE_SHM_DIRECT_MIN). The per-byte
// rates are measured on the test VM (2 ranks, float sum; see docs/decisions/team-collectives.md),
// not probed per host.
struct TeamCosts {
  double boardAlphaUs = 0.2;
  double boardBytesPerUs = 80000;
  double directBytesPerUs = 100000;
  double cmaBytesPerUs = 37000;
};

// What a communicator's team can run: the same value on every rank (the team agrees on
// it when it connects). Empty (no algorithms) when there is no team.
struct TeamOffer {
  TeamAlgorithms algorithms = 0;           // team algorithms it runs (their conditions aside)
  size_t boardBytes = 0;                   // the most one rank may publish on the board
  size_t boardTwoShotBytes = SIZE_MAX;     // a board all-reduce this large runs in two shots
  size_t cmaCrossoverBytes = 0;            // board and cma cost the same here (see TeamCosts)
  size_t directCrossoverBytes = SIZE_MAX;  // board and direct cost the same here
  size_t cmaMaxBytes = 0;                  // an out-of-place cma all-reduce at most this
  TeamCosts costs;
  bool any() const { return algorithms != 0; }
};

// The team cost model's shared terms (the specs' formulas above): the board's time for
// `kind` of S bytes per rank on n ranks, and the fixed cost F of a single-copy
// all-reduce whose per-byte cost is `perByteUs`, calibrated to cost what the board costs
// at `crossoverBytes` (at most the board's size, at least 1 byte).
double boardMicros(CollectiveKind kind, double s, double n, const TeamOffer& offer);
double singleCopyFixedMicros(size_t crossoverBytes, double perByteUs, double n,
                             const TeamOffer& offer);

// Unsupported: team algorithm `algo` runs in a team step, not in steps of messages (what
// a team algorithm's spec answers when asked to plan steps).
Status teamStepOnly(Algorithm algo);

// Appends the team step (params.team) to channel 0 of `schedule`.
inline void planTeamStep(const PlanParams& params, Schedule* schedule) {
  Step step;
  step.kind = StepKind::kTeam;
  step.team = params.team;
  schedule->channels[0].push_back(step);
}

// Whether channel 0 of `schedule` starts with a team step; its set in *team.
inline bool hasTeamStep(const Schedule& schedule, TeamAlgorithms* team = nullptr) {
  if (schedule.channels.empty() || schedule.channels[0].empty() ||
      schedule.channels[0][0].kind != StepKind::kTeam) {
    return false;
  }
  if (team != nullptr) *team = schedule.channels[0][0].team;
  return true;
}

}  // namespace collie
