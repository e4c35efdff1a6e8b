// The cost model's inputs: the constants a communicator's ranks agree on (measured by
// the tuner's probe, core/engine/tune_probe.h), and what one prediction is asked about.
// Every algorithm's predict() (core/plan/algorithm_spec.h) reads them; the tuner
// (core/tune/tuner.h) compares the predictions.
//
// Thread safety: plain values.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "collie/types.h"

namespace collie {

struct TeamOffer;  // core/plan/team_step.h

struct TuneConstants {
  double alphaUs = 20.0;           // per message
  double bwGBps = 2.0;             // per link, 1 GB/s = 1000 bytes/us
  std::string source = "default";  // default, config, cache, probe
  // Between hosts (a communicator over several): per message, and per host's link,
  // which its ranks share. 0: not known; the model then uses the constants above.
  double netAlphaUs = 0;
  double netBwGBps = 0;
};

// How much faster than the robust default another algorithm must be predicted.
inline constexpr double kRobustMargin = 0.25;
// The same for the hierarchical schedules against the flat ones over several hosts: both
// are paced by the measured inter-host link, whose bytes the model counts exactly.
inline constexpr double kHierMargin = 0.1;

// Hier's inter-host stage (COLLIE_HIER_HOSTS): the cost model's choice, or forced.
enum class HostStage : uint8_t { kAuto, kRing, kTree };

// One link's cost, what the formulas read of the constants.
struct LinkCost {
  double alphaUs = 20.0;  // per message
  double bwGBps = 2.0;    // 1 GB/s = 1000 bytes/us
};
inline LinkCost linkOf(const TuneConstants& constants) {
  return LinkCost{constants.alphaUs, constants.bwGBps};
}
// The inter-host link where the constants know it, else the intra-host one.
inline LinkCost netLinkOf(const TuneConstants& constants) {
  return constants.netBwGBps > 0 ? LinkCost{constants.netAlphaUs, constants.netBwGBps}
                                 : linkOf(constants);
}

// One prediction: `kind` of `bytes` (the per-rank buffer size of the collective's
// count) on `nranks` ranks, spread over `nhosts` hosts of `localSize` ranks each (0:
// uneven), with `nchannels` channels of `chunkBytes` chunks.
struct CostQuery {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  size_t bytes = 0;
  int nranks = 1;
  int nhosts = 1;
  int localSize = 0;
  int nchannels = 1;
  size_t chunkBytes = 1;
  LinkCost constants;  // within a host
  LinkCost net;        // between hosts: the inter-host link where known, else `constants`
  HostStage stage = HostStage::kAuto;
  // The team's offer, for a team algorithm's cost (its own constants): null otherwise.
  const TeamOffer* team = nullptr;

  // What paces a flat schedule: over several hosts its slowest link, an inter-host one.
  const LinkCost& pacing() const { return nhosts > 1 ? net : constants; }
};

// Helpers of the formulas.
inline double ceilDivD(double a, double b) { return std::max(1.0, std::ceil(a / b)); }
// ceil(log2 n): the depth of a binary tree of n ranks, the rounds of a dissemination.
inline int depthOf(int nranks) {
  int depth = 0;
  while ((1 << depth) < nranks) ++depth;
  return depth;
}
// Bytes per microsecond of a link.
inline double bytesPerUs(const LinkCost& link) { return std::max(link.bwGBps, 1e-6) * 1000.0; }

// The terms of a flat (one-level) formula: n ranks, S bytes, c channels, k chunk bytes
// (at least 1), and alpha and beta (bytes/us) of the link that paces it.
struct FlatTerms {
  explicit FlatTerms(const CostQuery& q)
      : n(q.nranks),
        s(static_cast<double>(q.bytes)),
        c(q.nchannels),
        k(static_cast<double>(std::max<size_t>(q.chunkBytes, 1))),
        alpha(q.pacing().alphaUs),
        beta(bytesPerUs(q.pacing())) {}
  double n, s, c, k, alpha, beta;
};

}  // namespace collie
