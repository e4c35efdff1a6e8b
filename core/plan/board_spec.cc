// Board (a team algorithm, core/plan/team_step.h): every rank publishes its part on a
// board its transport shares between all ranks (shm, all on one host) and computes its
// output from every part, in rank order. It carries every collective but point-to-point,
// alltoallv and the kinds with a count per rank, up to the board's size per rank. On
// device buffers the same algorithm is the board kernel of the device path
// (core/device/device_board.cc: all-reduce, reduce-scatter and all-gather, one launch).
//
// Cost (S bytes per rank, n ranks, the team's constants): boardMicros(), team_step.h.
#include "core/plan/builtin_algorithms.h"
#include "core/plan/team_step.h"

namespace collie {
namespace {

constexpr AlgorithmIdentity kBoardIdentity = {
    .id = Algorithm::kBoard,
    .name = "board",
    .kinds = kindsWhere([](CollectiveKind kind) {
      return kind != CollectiveKind::kSend && kind != CollectiveKind::kRecv &&
             kind != CollectiveKind::kAllToAllV && !hasBlockCounts(kind);
    }),
    .team = true,
};

class BoardSpec final : public AlgorithmSpec {
 public:
  BoardSpec() : AlgorithmSpec(kBoardIdentity) {}
  double predict(const CostQuery& q, bool* hostTree) const override {
    (void)hostTree;
    return boardMicros(q.kind, static_cast<double>(q.bytes), std::max(q.nranks, 2), *q.team);
  }
  Status plan(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
              Schedule* schedule) const override {
    (void)args, (void)params, (void)chunkElems, (void)schedule;
    return teamStepOnly(id());
  }
};

}  // namespace

std::unique_ptr<const AlgorithmSpec> makeBoardSpec() { return std::make_unique<BoardSpec>(); }

}  // namespace collie
