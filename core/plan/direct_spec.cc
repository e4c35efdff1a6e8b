// Direct (a team algorithm, core/plan/team_step.h): a single-copy all-reduce through
// buffers every rank registered (allocShared memory), each rank reading a share of every
// input and writing it to every output.
//
// Cost (S bytes per rank, n ranks, the team's constants): F_direct(n) + 2 S /
// directBytesPerUs, F calibrated to the board's cost at directCrossoverBytes
// (singleCopyFixedMicros(), team_step.h).
#include "core/plan/builtin_algorithms.h"
#include "core/plan/team_step.h"

namespace collie {
namespace {

constexpr AlgorithmIdentity kDirectIdentity = {
    .id = Algorithm::kDirect,
    .name = "direct",
    .kinds = kindsOf({CollectiveKind::kAllReduce}),
    .team = true,
};

class DirectSpec final : public AlgorithmSpec {
 public:
  DirectSpec() : AlgorithmSpec(kDirectIdentity) {}
  double predict(const CostQuery& q, bool* hostTree) const override {
    (void)hostTree;
    const TeamOffer& offer = *q.team;
    const double n = std::max(q.nranks, 2);
    const double perByte = 2 / offer.costs.directBytesPerUs;
    return singleCopyFixedMicros(offer.directCrossoverBytes, perByte, n, offer) +
           perByte * static_cast<double>(q.bytes);
  }
  Status plan(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
              Schedule* schedule) const override {
    (void)args, (void)params, (void)chunkElems, (void)schedule;
    return teamStepOnly(id());
  }
};

}  // namespace

std::unique_ptr<const AlgorithmSpec> makeDirectSpec() { return std::make_unique<DirectSpec>(); }

}  // namespace collie
