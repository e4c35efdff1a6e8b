// Ring (core/plan/ring.h): all-reduce as reduce-scatter then all-gather around a ring of
// the ranks, reduce-scatter and all-gather (with a count per rank too), and the robust
// default of all of them. Its steps are generated while they run.
//
// Cost (S bytes, n ranks, c channels, k chunk bytes, R = ceil(S / (c k n)) rounds):
//   all-reduce                      2 (n-1) R c alpha + 2 (n-1)/n S / beta
//   reduce-scatter, all-gather      (n-1) ceil(S / (c k)) c alpha + (n-1)/n n S / beta
//     with a count per rank (S the sum of the blocks, costed as equal ones):
//                                   (n-1) ceil(S / (n c k)) c alpha + (n-1)/n S / beta
//   the barrier (dissemination)     ceil(log2 n) alpha; point-to-point alpha
#include "core/plan/builtin_algorithms.h"
#include "core/plan/ring.h"

namespace collie {
namespace {

bool isReduceScatter(CollectiveKind kind) {
  return kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kReduceScatterV;
}

constexpr AlgorithmIdentity kRingIdentity = {
    .id = Algorithm::kRing,
    .name = "ring",
    .kinds = kindsWhere([](CollectiveKind kind) {
      return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter ||
             kind == CollectiveKind::kAllGather || hasBlockCounts(kind);
    }),
};

class RingSpec final : public AlgorithmSpec {
 public:
  RingSpec() : AlgorithmSpec(kRingIdentity) {}
  bool robustDefaultFor(CollectiveKind kind) const override { return implements(kind); }

  double predict(const CostQuery& q, bool* hostTree) const override {
    (void)hostTree;
    const auto [n, s, c, k, alpha, beta] = FlatTerms(q);
    switch (q.kind) {
      case CollectiveKind::kAllReduce: {
        const double rounds = ceilDivD(s, c * k * n);
        return 2 * (n - 1) * rounds * c * alpha + 2 * (n - 1) / n * s / beta;
      }
      case CollectiveKind::kReduceScatter:
      case CollectiveKind::kAllGather: {
        const double total = s * n;  // the full vector
        const double rounds = ceilDivD(s, c * k);
        return (n - 1) * rounds * c * alpha + (n - 1) / n * total / beta;
      }
      case CollectiveKind::kReduceScatterV:
      case CollectiveKind::kAllGatherV: {
        const double rounds = ceilDivD(s / n, c * k);
        return (n - 1) * rounds * c * alpha + (n - 1) / n * s / beta;
      }
      case CollectiveKind::kBarrier:
        return depthOf(q.nranks) * alpha;
      default:
        return alpha;
    }
  }

  Status plan(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
              Schedule* schedule) const override {
    if (args.kind == CollectiveKind::kAllReduce) {
      planRingAllReduce(args, params, chunkElems, schedule);
    } else if (isReduceScatter(args.kind)) {
      planRingReduceScatter(args, params, chunkElems, schedule);
    } else {
      planRingAllGather(args, params, chunkElems, schedule);
    }
    return Status();
  }

  bool streams(const CollectiveArgs& args, const PlanParams& params) const override {
    (void)params;
    return implements(args.kind);
  }
  Generator<Step> stream(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                         int channel) const override {
    if (args.kind == CollectiveKind::kAllReduce) {
      return ringAllReduceSteps(args, params, chunkElems, channel);
    }
    if (isReduceScatter(args.kind))
      return ringReduceScatterSteps(args, params, chunkElems, channel);
    return ringAllGatherSteps(args, params, chunkElems, channel);
  }
  size_t streamScratchBytes(const CollectiveArgs& args, size_t chunkElems) const override {
    return isReduceScatter(args.kind) ? ringReduceScatterScratch(args, chunkElems) : 0;
  }
};

}  // namespace

std::unique_ptr<const AlgorithmSpec> makeRingSpec() { return std::make_unique<RingSpec>(); }

}  // namespace collie
