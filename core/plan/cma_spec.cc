// Cma (a team algorithm, core/plan/team_step.h): single copy through cross-memory attach
// (process_vm_readv/writev): an all-reduce each rank pulls and pushes, and the exchanges
// with one block size (all-to-all, gather, scatter), each rank pulling its blocks from
// the senders' buffers.
//
// Cost (S bytes per rank, n ranks, the team's constants), F_cma(n) calibrated to the
// board's cost at cmaCrossoverBytes (singleCopyFixedMicros(), team_step.h):
//   all-reduce   F_cma(n) + 2 (n-1)/n S / cmaBytesPerUs
//   exchange     F_cma(n) + P / cmaBytesPerUs, P the bytes a rank pulls ((n-1) S for
//                all-to-all and a gather's root, S for a scatter's leaves)
#include "core/plan/builtin_algorithms.h"
#include "core/plan/team_step.h"

namespace collie {
namespace {

constexpr AlgorithmIdentity kCmaIdentity = {
    .id = Algorithm::kCma,
    .name = "cma",
    .kinds = kindsWhere([](CollectiveKind kind) {
      return kind == CollectiveKind::kAllReduce || isEqualExchange(kind);
    }),
    .team = true,
};

class CmaSpec final : public AlgorithmSpec {
 public:
  CmaSpec() : AlgorithmSpec(kCmaIdentity) {}
  double predict(const CostQuery& q, bool* hostTree) const override {
    (void)hostTree;
    const TeamOffer& offer = *q.team;
    const double s = static_cast<double>(q.bytes);
    const double n = std::max(q.nranks, 2);
    const double perByte = 2 * (n - 1) / n / offer.costs.cmaBytesPerUs;
    const double fixed = singleCopyFixedMicros(offer.cmaCrossoverBytes, perByte, n, offer);
    if (isEqualExchange(q.kind)) {
      const double pulled = q.kind == CollectiveKind::kScatter ? s : (n - 1) * s;
      return fixed + pulled / offer.costs.cmaBytesPerUs;
    }
    return fixed + perByte * s;
  }
  Status plan(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
              Schedule* schedule) const override {
    (void)args, (void)params, (void)chunkElems, (void)schedule;
    return teamStepOnly(id());
  }
};

}  // namespace

std::unique_ptr<const AlgorithmSpec> makeCmaSpec() { return std::make_unique<CmaSpec>(); }

}  // namespace collie
