// Linear (core/plan/exchange.h): every send of an exchange posted at once, then the
// receives in rank order; all-to-all (weighed against pairwise; not for alltoallv,
// whose sizes ranks do not share), and gather and scatter, whose robust default it is.
//
// Cost (S bytes of one block, n ranks, c channels, d = ceil(log2 n)):
//   all-to-all        c alpha + (n - 1) S / beta   (posted at once: one latency)
//   gather, scatter   (d + c) alpha + (n - 1) S / beta
#include "core/plan/builtin_algorithms.h"
#include "core/plan/exchange.h"

namespace collie {
namespace {

constexpr AlgorithmIdentity kLinearIdentity = {
    .id = Algorithm::kLinear,
    .name = "linear",
    .kinds = kindsWhere(isExchange),
};

class LinearSpec final : public AlgorithmSpec {
 public:
  LinearSpec() : AlgorithmSpec(kLinearIdentity) {}
  bool offeredFor(CollectiveKind kind, size_t bytes, const CommShape& shape) const override {
    (void)bytes, (void)shape;
    return kind != CollectiveKind::kAllToAllV;
  }
  bool robustDefaultFor(CollectiveKind kind) const override {
    return kind == CollectiveKind::kGather || kind == CollectiveKind::kScatter;
  }

  double predict(const CostQuery& q, bool* hostTree) const override {
    (void)hostTree;
    [[maybe_unused]] const auto [n, s, c, k, alpha, beta] = FlatTerms(q);
    if (q.kind == CollectiveKind::kGather || q.kind == CollectiveKind::kScatter) {
      return (depthOf(q.nranks) + c) * alpha + (n - 1) * s / beta;
    }
    return c * alpha + (n - 1) * s / beta;
  }

  Status plan(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
              Schedule* schedule) const override {
    (void)chunkElems;
    return planExchangeAs(id(), args, params, schedule);
  }
};

}  // namespace

std::unique_ptr<const AlgorithmSpec> makeLinearSpec() { return std::make_unique<LinearSpec>(); }

}  // namespace collie
