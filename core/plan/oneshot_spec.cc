// One-shot (core/plan/oneshot.h): a 2-rank all-reduce as one whole-buffer exchange,
// each rank reducing both buffers; weighed up to kOneShotMaxBytes.
//
// Cost (S bytes, n ranks): alpha + (n - 1) S / beta, one channel.
#include "core/plan/builtin_algorithms.h"
#include "core/plan/oneshot.h"

namespace collie {
namespace {

constexpr AlgorithmIdentity kOneShotIdentity = {
    .id = Algorithm::kOneShot,
    .name = "oneshot",
    .kinds = kindsOf({CollectiveKind::kAllReduce}),
};

class OneShotSpec final : public AlgorithmSpec {
 public:
  OneShotSpec() : AlgorithmSpec(kOneShotIdentity) {}
  bool runsOn(CollectiveKind kind, const CommShape& shape) const override {
    (void)kind;
    return shape.nranks == 2;
  }
  bool offeredFor(CollectiveKind kind, size_t bytes, const CommShape& shape) const override {
    return runsOn(kind, shape) && bytes <= kOneShotMaxBytes;
  }
  size_t bytesPerChannel(CollectiveKind kind, size_t chunkBytes) const override {
    (void)kind, (void)chunkBytes;
    return 0;  // one message each way
  }

  double predict(const CostQuery& q, bool* hostTree) const override {
    (void)hostTree;
    return q.pacing().alphaUs +
           (q.nranks - 1) * static_cast<double>(q.bytes) / bytesPerUs(q.pacing());
  }

  Status plan(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
              Schedule* schedule) const override {
    (void)chunkElems;
    if (params.nranks > 2) {
      return unsupported("oneshot " + std::string(collectiveName(args.kind)) + " on " +
                         std::to_string(params.nranks) +
                         " ranks is not implemented (all-reduce on 2 ranks only); use ring, "
                         "tree or auto");
    }
    planOneShotAllReduce(args, params, schedule);
    return Status();
  }
};

}  // namespace

std::unique_ptr<const AlgorithmSpec> makeOneShotSpec() { return std::make_unique<OneShotSpec>(); }

}  // namespace collie
