// Tree (core/plan/tree.h): all-reduce over a double binary tree, broadcast and reduce
// over a binary tree.
//
// Cost (S bytes, n ranks, c channels, k chunk bytes, d = ceil(log2 n)):
//   all-reduce         K = ceil(S / (2 c k)); (2d + 1 + 8 (K c - 1)) alpha + 2 S / beta
//   broadcast, reduce  K = ceil(S / (c k));   (d + 3 (K c - 1)) alpha + (2 S + d min(k, S)) / beta
// A channel of an all-reduce carries two chunks (one per tree).
#include "core/plan/builtin_algorithms.h"
#include "core/plan/tree.h"

namespace collie {
namespace {

constexpr AlgorithmIdentity kTreeIdentity = {
    .id = Algorithm::kTree,
    .name = "tree",
    .kinds =
        kindsOf({CollectiveKind::kAllReduce, CollectiveKind::kBroadcast, CollectiveKind::kReduce}),
};

class TreeSpec final : public AlgorithmSpec {
 public:
  TreeSpec() : AlgorithmSpec(kTreeIdentity) {}
  size_t bytesPerChannel(CollectiveKind kind, size_t chunkBytes) const override {
    return kind == CollectiveKind::kAllReduce ? 2 * chunkBytes : chunkBytes;
  }

  double predict(const CostQuery& q, bool* hostTree) const override {
    (void)hostTree;
    [[maybe_unused]] const auto [n, s, c, k, alpha, beta] = FlatTerms(q);
    const double d = depthOf(q.nranks);
    if (q.kind == CollectiveKind::kAllReduce) {
      const double chunks = ceilDivD(s, 2 * c * k);
      return (2 * d + 1 + 8 * (chunks * c - 1)) * alpha + 2 * s / beta;
    }
    const double chunks = ceilDivD(s, c * k);
    const double piece = std::min(k, s);
    return (d + 3 * (chunks * c - 1)) * alpha + (2 * s + d * piece) / beta;
  }

  Status plan(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
              Schedule* schedule) const override {
    (args.kind == CollectiveKind::kAllReduce ? planTreeAllReduce
     : args.kind == CollectiveKind::kBroadcast
         ? planTreeBroadcast
         : planTreeReduce)(args, params, chunkElems, schedule);
    return Status();
  }
};

}  // namespace

std::unique_ptr<const AlgorithmSpec> makeTreeSpec() { return std::make_unique<TreeSpec>(); }

}  // namespace collie
