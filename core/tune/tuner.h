// The tuner: which algorithm, chunk size and channel count a collective runs with.
//
// A latency/bandwidth cost model (alpha = microseconds per message, beta = bytes per
// microsecond per link, "constants") predicts each candidate's time; the cheapest
// wins. The constants come from config (COLLIE_TUNE_ALPHA_US, COLLIE_TUNE_BW_GBPS),
// from a per-host cache, or from a short probe when a communicator is created (see
// tune_probe.h). Every rank must decide the same: decide() is a pure function of its
// arguments and every rank uses rank 0's constants.
//
// The model (S = bytes, n = ranks, c = channels, k = chunk bytes, d = ceil(log2 n)):
//   ring all-reduce   R = ceil(S / (c k n)) rounds; 2(n-1) R c alpha + 2 (n-1)/n S / beta
//   tree all-reduce   K = ceil(S / (2 c k)); (2d + 1 + 8 (K c - 1)) alpha + 2 S / beta
//   chain bcast/reduce K = ceil(S / (c k)); (n - 1 + 2 (K c - 1)) alpha
//                                            + (S + (n - 2) min(k, S)) / beta
//   tree bcast/reduce (d + 3 (K c - 1)) alpha + (2 S + d min(k, S)) / beta
//   oneshot all-reduce (n = 2, S <= kOneShotMaxBytes)   alpha + S / beta
//   ring reduce-scatter / all-gather (only choice): (n - 1) R c alpha + (n - 1)/n S' / beta
//   dissemination barrier ceil(log2 n) alpha
//   all-to-all (S = one block) pairwise (n-1)(c alpha + S / beta); linear c alpha
//                      + (n-1) S / beta (posted at once: one latency); with a count per
//                      peer (alltoallv) always pairwise, since ranks know only their counts
//   gather / scatter (S = one block) linear (d + c) alpha + (n-1) S / beta
//   several hosts: predictHostsMicros() (hier, two levels; the others paced by the network)
//   team algorithms (board, direct, cma): core/plan/team_step.h, with the team's own constants
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
#include "core/plan/team_step.h"

namespace collie {

// Largest all-reduce the one-shot schedule (2 ranks) is considered for: beyond it the
// unpipelined whole-buffer message and reduction cost more than the ring's extra
// latency saves.
inline constexpr size_t kOneShotMaxBytes = 64 * 1024;

struct TuneConstants {
  double alphaUs = 20.0;           // per message
  double bwGBps = 2.0;             // per link, 1 GB/s = 1000 bytes/us
  std::string source = "default";  // default, config, cache, probe
  // Between hosts (a communicator over several): per message, and per host's link,
  // which its ranks share. 0: not known; the model then uses the constants above.
  double netAlphaUs = 0;
  double netBwGBps = 0;
};

// Constants outside these bounds are measurement errors (a probe descheduled mid-way),
// not hardware: clampConstants() pulls them in.
inline constexpr double kMinAlphaUs = 0.2, kMaxAlphaUs = 1000.0;
inline constexpr double kMinBwGBps = 0.05, kMaxBwGBps = 400.0;
// How much faster than the robust default another algorithm must be predicted.
inline constexpr double kRobustMargin = 0.25;
// The same for the hierarchical schedules against the flat ones over several hosts: both
// are paced by the measured inter-host link, whose bytes the model counts exactly.
inline constexpr double kHierMargin = 0.1;

TuneConstants clampConstants(TuneConstants constants);

// Hier's inter-host stage (COLLIE_HIER_HOSTS): the cost model's choice, or forced.
enum class HostStage : uint8_t { kAuto, kRing, kTree };

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

// Whether `algorithm` implements `kind` (ring: all-reduce, reduce-scatter, all-gather;
// tree: all-reduce, broadcast, reduce; chain: broadcast, reduce; oneshot: all-reduce on
// 2 ranks; pairwise: all-to-all; linear: all-to-all, gather, scatter; team algorithms:
// teamSupports()).
bool algorithmSupports(Algorithm algorithm, CollectiveKind kind);

// Predicted microseconds of one collective of `bytes` (the per-rank buffer size of the
// collective's count) on `nranks` ranks with a schedule algorithm.
double predictMicros(CollectiveKind kind, Algorithm algorithm, size_t bytes, int nranks,
                     int nchannels, size_t chunkBytes, const TuneConstants& constants);

// The same on `nhosts` hosts of `localSize` ranks each (schedules in host order, the
// inter-host constants from `constants` where known). A ring or tree is paced by its
// slowest link, an inter-host one: the model above with the inter-host constants.
// Hierarchical schedules (core/plan/hier.h; L = localSize, M = nhosts, d = ceil(log2 M)):
//   all-reduce, R = ceil(S / (c k n)) rounds:
//     2 (L-1) R c alpha + 2 (L-1)/L S / beta                (within hosts, twice)
//     + the cheaper between hosts (a host's L rings or trees share its link):
//       ring  2 (M-1) R c netAlpha + 2 (M-1)/M S / netBeta
//       tree  R c (2d + 1 + 8 (K-1)) netAlpha + 2 S / netBeta, K = ceil(min(S, c k n)
//             / (c L) / 2k) chunks per tree and round (*hostTree: the tree is cheaper,
//             or `stage` forces it)
//   all-gather / reduce-scatter (S one block, S' = n S), R = ceil(S / (c ceil(k / M))):
//     R c ((M-1) netAlpha + M (L-1) alpha) + (M-1)/M S' / netBeta + (L-1)/L S' / beta
//   broadcast / reduce, K = ceil(S / (c k)), p = min(k, S):
//     (L-1)(alpha + p / beta) + the cheaper between hosts:
//       chain (M-1)(netAlpha + p / netBeta) + 2 (K c - 1) netAlpha + S / netBeta
//       tree  d (netAlpha + p / netBeta) + 3 (K c - 1) netAlpha + 2 S / netBeta
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
