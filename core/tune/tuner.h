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
//   ring reduce-scatter / all-gather (only choice): (n - 1) R c alpha + (n - 1)/n S' / beta
// Channels run on one progress thread, so in the model they add messages, not
// bandwidth: unless COLLIE_NCHANNELS fixes it, the channel count is the cheapest of
// 1..configured that gives each channel a chunk (a tie keeps more channels).
//
// Robustness: the constants are measured on machines that may be busy, and the model
// is rough. The bandwidth-robust algorithm (ring for all-reduce, chain for broadcast
// and reduce) is the default; another wins only when predicted kRobustMargin faster.
// A forced algorithm gets the same chunk and channel choice as auto would give it.
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include "collie/types.h"

namespace collie {

struct TuneConstants {
  double alphaUs = 20.0;           // per message
  double bwGBps = 2.0;             // per link, 1 GB/s = 1000 bytes/us
  std::string source = "default";  // default, config, cache, probe
};

// Constants outside these bounds are measurement errors (a probe descheduled mid-way),
// not hardware: clampConstants() pulls them in.
inline constexpr double kMinAlphaUs = 0.2, kMaxAlphaUs = 1000.0;
inline constexpr double kMinBwGBps = 0.05, kMaxBwGBps = 400.0;
// How much faster than the robust default another algorithm must be predicted.
inline constexpr double kRobustMargin = 0.25;

TuneConstants clampConstants(TuneConstants constants);

struct TuneLimits {
  int maxChannels = 2;                  // connections per peer
  size_t chunkBytes = 0;                // 0: the tuner picks; else fixed (COLLIE_CHUNKSIZE)
  bool channelsFixed = false;           // COLLIE_NCHANNELS was set: use maxChannels
  Algorithm forced = Algorithm::kAuto;  // COLLIE_ALGO / Options::algorithm
};

struct TuneDecision {
  Algorithm algorithm = Algorithm::kRing;
  size_t chunkBytes = 512 * 1024;
  int nchannels = 1;
  double predictedUs = 0;
};

// Whether `algorithm` implements `kind` (ring: all-reduce, reduce-scatter, all-gather;
// tree: all-reduce, broadcast, reduce; chain: broadcast, reduce).
bool algorithmSupports(Algorithm algorithm, CollectiveKind kind);

// Predicted microseconds of one collective of `bytes` (the per-rank buffer size of the
// collective's count) on `nranks` ranks.
double predictMicros(CollectiveKind kind, Algorithm algorithm, size_t bytes, int nranks,
                     int nchannels, size_t chunkBytes, const TuneConstants& constants);

// The plan for one collective: per algorithm the cheapest chunk and channel count,
// then the robust default unless another is kRobustMargin cheaper. A forced algorithm
// that does not implement `kind` (tree for all-gather) is ignored for that collective.
// Deterministic: equal arguments give equal decisions on every rank.
TuneDecision decide(CollectiveKind kind, size_t bytes, int nranks, const TuneLimits& limits,
                    const TuneConstants& constants);

// The decision table `collie info --tuning` prints.
std::string decisionTable(const TuneLimits& limits, const TuneConstants& constants);

}  // namespace collie
