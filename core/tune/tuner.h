// The tuner: which algorithm, chunk size and channel count a collective runs with.
//
// A latency/bandwidth cost model (alpha = microseconds per message, beta = bytes per
// microsecond per link, "constants") predicts each candidate's time; the cheapest
// wins. The constants come from config (COLLIE_TUNE_ALPHA_US, COLLIE_TUNE_BW_GBPS),
// from a per-host cache, or from a short probe when a communicator is created (see
// tune_probe.h). Every rank must decide the same: decide() is a pure function of its
// arguments and every rank uses rank 0's constants.
//
// The model of each schedule algorithm is its spec's (core/plan/<name>_spec.cc, registered
// in core/plan/algorithm_spec.h's AlgorithmRegistry): ring, tree, chain, oneshot, hier,
// pairwise, linear. The tuner weighs a collective's candidates from that registry: the
// kind's robust default first (ring for all-reduce, reduce-scatter, all-gather, the
// barrier and point-to-point; chain for broadcast and reduce; pairwise for all-to-all;
// linear for gather and scatter), then every other spec that implements the kind and is
// offered for it (oneshot: 2 ranks, up to kOneShotMaxBytes; hier: two levels; linear:
// not alltoallv), in registration order; one replaces the best so far only when
// predicted its margin() faster. Team algorithms (board, direct, cma) are specs too,
// costed from the team's offer (core/plan/team_step.h), weighed by the rules below.
// Channels run on one progress thread, so in the model they add messages, not
// bandwidth: unless COLLIE_NCHANNELS fixes it, the channel count is the cheapest of
// 1..configured that gives each channel a chunk (a tie keeps more channels).
//
// Robustness: the constants are measured on machines that may be busy, and the model
// is rough. The bandwidth-robust algorithm (ring for all-reduce, chain for broadcast
// and reduce, pairwise for all-to-all) is the default; another wins only when predicted
// kRobustMargin faster. A forced algorithm gets the same chunk and channel choice as auto would
// give it.
//
// Team collectives (core/plan/team_step.h): when the communicator has a team (TuneLimits::
// team) every collective but point-to-point gets a team step first. The board, where
// every rank's part fits it, is the robust default against the schedules (it needs no
// FIFO and no thread hand-off): a schedule wins only when predicted kRobustMargin
// cheaper, and then the board is not tried. Direct and cma, whose conditions only the
// run can tell (registered buffers; cross-memory attach allowed, in place or small
// enough), are tried first when predicted cheaper than what runs otherwise; what runs
// otherwise (the board, or the schedule's steps) follows as their fallback. A forced
// team algorithm runs alone, without a fallback; a forced schedule algorithm runs
// without a team step (nor its fingerprint meeting).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "collie/types.h"
#include "core/plan/algorithm_spec.h"
#include "core/plan/cost_model.h"
#include "core/plan/oneshot.h"
#include "core/plan/team_step.h"

namespace collie {

// Constants outside these bounds are measurement errors (a probe descheduled mid-way),
// not hardware: clampConstants() pulls them in.
inline constexpr double kMinAlphaUs = 0.2, kMaxAlphaUs = 1000.0;
inline constexpr double kMinBwGBps = 0.05, kMaxBwGBps = 400.0;

TuneConstants clampConstants(TuneConstants constants);

struct TuneLimits {
  int maxChannels = 2;                  // connections per peer
  size_t chunkBytes = 0;                // 0: the tuner picks; else fixed (COLLIE_CHUNKSIZE)
  bool channelsFixed = false;           // COLLIE_NCHANNELS was set: use maxChannels
  Algorithm forced = Algorithm::kAuto;  // COLLIE_ALGO / Options::algorithm
  TeamOffer team;                       // the communicator's team (empty: none)
  // All-reduces up to this many bytes whose team step has a schedule behind it time cma
  // against that schedule on the job (COLLIE_TUNE_ADAPT_MAX, core/engine/
  // single_copy_choice.h): there cma is offered whatever the model predicts, so that the
  // measurement, not the probe's constants, decides. 0: the model decides everywhere.
  size_t measuredCmaMaxBytes = 0;
  int nhosts = 1;     // hosts the ranks are on (core/plan/layout.h)
  int localSize = 0;  // ranks on each host when all have as many, else 0
  HostStage hostStage = HostStage::kAuto;
};

struct TuneDecision {
  // The choice: what runs when its condition holds (a team algorithm's, see above).
  Algorithm algorithm = Algorithm::kRing;
  size_t chunkBytes = 512 * 1024;  // of the steps
  int nchannels = 1;               // of the steps
  double predictedUs = 0;          // of `algorithm`
  bool teamStep = false;           // a team step first, trying `team`
  TeamAlgorithms team = 0;
  // The algorithm of the steps (after the team step: its fallback); kAuto when the team
  // step is all (the board, or a forced team algorithm).
  Algorithm steps = Algorithm::kRing;
  // Hier: its inter-host stage runs as a tree (PlanParams::hostTree).
  bool hostTree = false;
};

// Whether `algorithm` implements `kind`: its spec's implements(), teamSupports() for a
// team algorithm, true for kAuto.
bool algorithmSupports(Algorithm algorithm, CollectiveKind kind);

// Predicted microseconds of one collective of `bytes` (the per-rank buffer size of the
// collective's count) on `nranks` ranks with schedule algorithm `algorithm`'s spec (the
// kind's robust default's when `algorithm` does not implement `kind`, or is kAuto).
double predictMicros(CollectiveKind kind, Algorithm algorithm, size_t bytes, int nranks,
                     int nchannels, size_t chunkBytes, const TuneConstants& constants);

// Predicted microseconds of `kind` of `bytes` per rank on `nranks` ranks with team
// algorithm `algo`, which must implement `kind`, on a team that offers `offer`: its spec's
// prediction (core/plan/board_spec.cc, direct_spec.cc, cma_spec.cc); 0 for an algorithm
// that is not a team's.
double predictTeamMicros(Algorithm algo, CollectiveKind kind, size_t bytes, int nranks,
                         const TeamOffer& offer);

// The same on `nhosts` hosts of `localSize` ranks each (schedules in host order, the
// inter-host constants from `constants` where known). A flat ring or tree is paced by
// its slowest link, an inter-host one; hier (core/plan/hier_spec.cc) costs its levels
// and sets *hostTree where its inter-host stage is a tree (cheaper, or `stage` forces
// it).
double predictHostsMicros(CollectiveKind kind, Algorithm algorithm, size_t bytes, int nranks,
                          int nhosts, int localSize, int nchannels, size_t chunkBytes,
                          const TuneConstants& constants, bool* hostTree = nullptr,
                          HostStage stage = HostStage::kAuto);

// Why a forced team algorithm (limits.forced) cannot run this collective on this
// communicator (no team, not offered, too large for the board), as the error every
// rank gives; empty when it can, or when nothing team is forced for this kind.
std::string forcedTeamUnavailable(CollectiveKind kind, size_t bytes, int nranks,
                                  const TuneLimits& limits);

// The plan for one collective: per algorithm the cheapest chunk and channel count,
// then the robust default unless another is kRobustMargin cheaper. A forced algorithm
// that does not implement `kind` (tree for all-gather) is ignored for that collective,
// and so is one that cannot run on this communicator's shape (oneshot beyond 2 ranks,
// hier unless limits give several hosts of as many ranks, more than one: a job forcing
// hier still runs its one-host sub-communicators).
// Deterministic: equal arguments give equal decisions on every rank.
TuneDecision decide(CollectiveKind kind, size_t bytes, int nranks, const TuneLimits& limits,
                    const TuneConstants& constants);

// The decision table `collie info --tuning` prints.
std::string decisionTable(const TuneLimits& limits, const TuneConstants& constants);

// Per all-reduce size on `nranks` ranks: every algorithm's predicted microseconds
// (team ones from limits.team) and the plan decide() makes ("direct>cma>ring": the team
// step's set, then the fallback).
std::string algorithmTable(const TuneLimits& limits, const TuneConstants& constants, int nranks);

// "ring/512K/2", "board", "direct>cma>ring/1M/2", "check>ring/512K/1": a decision in
// one cell.
std::string decisionText(const TuneDecision& decision);

}  // namespace collie
