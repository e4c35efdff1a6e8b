// Pending: one submitted operation on its way from the queue to its execution.
//
// Planned (its schedule), tagged (its fingerprint, core/plan/fingerprint.h) and
// recorded in the flight recorder; `work` is completed with its final status by
// whoever ends it. A group (Engine::submitGroup) is one Pending whose further
// operations are in `group`, run alongside the first. A plain value: owned by one
// thread at a time (the submitter, the queue under its lock, then the runner).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/engine/work_state.h"
#include "core/plan/fingerprint.h"
#include "core/plan/schedule.h"

namespace collie {

struct Pending {
  std::shared_ptr<const Schedule> schedule;
  const void* input = nullptr;
  void* output = nullptr;
  uint64_t tag = 0;
  // A point-to-point operation's user tag (tagged: matched by peer and tag,
  // core/engine/tag_matcher.h) and its sequence number among that tag's; set by the
  // submitter (tagged, value) and the queue (sequence).
  PointToPointTag p2p;
  std::shared_ptr<WorkState> work;  // null for a collective run inline by its caller
  // Its team step already ran and every rank declined it: the fallback steps are left.
  bool teamDeclined = false;
  uint64_t flightId = 0;  // entry in the flight recorder
  // kPreMulSum: this call's factor (the schedule's args leave it out). The executor
  // multiplies the input by it once, before the first step (Executor::preMultiply).
  ReduceScalar scalar;
  // Further operations of a group (submitGroup), run alongside the first.
  struct Part {
    std::shared_ptr<const Schedule> schedule;
    const void* input;
    void* output;
    uint64_t tag;
    PointToPointTag p2p;
  };
  std::vector<Part> group;
};

inline Pending makePending(std::shared_ptr<const Schedule> schedule, const void* input,
                           void* output, uint64_t tag, std::shared_ptr<WorkState> work) {
  Pending pending;
  pending.schedule = std::move(schedule);
  pending.input = input;
  pending.output = output;
  pending.tag = tag;
  pending.work = std::move(work);
  return pending;
}

// Whether every operation of `pending` is a send or a receive run by its schedule:
// such operations run side by side with those queued behind them.
inline bool isPointToPoint(const Pending& pending) {
  auto p2p = [](const Schedule& schedule) {
    return schedule.args.kind == CollectiveKind::kSend ||
           schedule.args.kind == CollectiveKind::kRecv;
  };
  if (!p2p(*pending.schedule)) return false;
  for (const Pending::Part& part : pending.group) {
    if (!p2p(*part.schedule)) return false;
  }
  return true;
}

// Where a running point-to-point batch takes the point-to-point operations queued
// behind it (the engine's queue).
class PointToPointSource {
 public:
  virtual ~PointToPointSource() = default;
  // Moves the operation at the front of the queue into *out when it is point-to-point
  // and nothing failed; false (taking nothing) otherwise.
  virtual bool takePointToPoint(Pending* out) = 0;
};

}  // namespace collie
