// Chain (core/plan/chain.h): broadcast and reduce pipelined along a chain of the ranks
// from (or to) the root; their robust default.
//
// Cost (S bytes, n ranks, c channels, k chunk bytes, K = ceil(S / (c k))):
//   (n - 1 + 2 (K c - 1)) alpha + (S + (n - 2) min(k, S)) / beta
#include "core/plan/builtin_algorithms.h"
#include "core/plan/chain.h"

namespace collie {
namespace {

constexpr AlgorithmIdentity kChainIdentity = {
    .id = Algorithm::kChain,
    .name = "chain",
    .kinds = kindsOf({CollectiveKind::kBroadcast, CollectiveKind::kReduce}),
};

class ChainSpec final : public AlgorithmSpec {
 public:
  ChainSpec() : AlgorithmSpec(kChainIdentity) {}
  bool robustDefaultFor(CollectiveKind kind) const override { return implements(kind); }

  double predict(const CostQuery& q, bool* hostTree) const override {
    (void)hostTree;
    const auto [n, s, c, k, alpha, beta] = FlatTerms(q);
    const double chunks = ceilDivD(s, c * k);
    const double piece = std::min(k, s);
    return (n - 1 + 2 * (chunks * c - 1)) * alpha + (s + (n - 2) * piece) / beta;
  }

  Status plan(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
              Schedule* schedule) const override {
    (args.kind == CollectiveKind::kBroadcast ? planChainBroadcast : planChainReduce)(
        args, params, chunkElems, schedule);
    return Status();
  }
};

}  // namespace

std::unique_ptr<const AlgorithmSpec> makeChainSpec() { return std::make_unique<ChainSpec>(); }

}  // namespace collie
