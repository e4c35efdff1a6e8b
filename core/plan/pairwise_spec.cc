// Pairwise (core/plan/exchange.h): all-to-all in n - 1 rounds, round k sending to rank + k
// and receiving from rank - k; the robust default of all-to-all, and alltoallv's only
// choice (its counts differ between ranks, so no rank could weigh sizes alike).
//
// Cost (S bytes of one block, n ranks, c channels): (n - 1)(c alpha + S / beta)
#include "core/plan/builtin_algorithms.h"
#include "core/plan/exchange.h"

namespace collie {
namespace {

constexpr AlgorithmIdentity kPairwiseIdentity = {
    .id = Algorithm::kPairwise,
    .name = "pairwise",
    .kinds = kindsOf({CollectiveKind::kAllToAll, CollectiveKind::kAllToAllV}),
};

class PairwiseSpec final : public AlgorithmSpec {
 public:
  PairwiseSpec() : AlgorithmSpec(kPairwiseIdentity) {}
  bool robustDefaultFor(CollectiveKind kind) const override { return implements(kind); }

  double predict(const CostQuery& q, bool* hostTree) const override {
    (void)hostTree;
    const double s = static_cast<double>(q.bytes);
    return (q.nranks - 1) * (q.nchannels * q.pacing().alphaUs + s / bytesPerUs(q.pacing()));
  }

  Status plan(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
              Schedule* schedule) const override {
    (void)chunkElems;
    return planExchangeAs(id(), args, params, schedule);
  }
};

}  // namespace

std::unique_ptr<const AlgorithmSpec> makePairwiseSpec() { return std::make_unique<PairwiseSpec>(); }

}  // namespace collie
