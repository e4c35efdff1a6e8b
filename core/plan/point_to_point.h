// Point-to-point schedules (point_to_point.cc): a send or a receive as one message per
// channel, and the dissemination barrier (also the root agreement of broadcast and
// reduce). Each appends rank params.rank's steps to schedule->channels. Arguments are
// already validated.
//
// Thread safety: pure functions.
#pragma once

#include "core/plan/schedule.h"

namespace collie {

void planPointToPoint(const CollectiveArgs& args, const PlanParams& params, Schedule* schedule);
// Dissemination barrier on channel 0: ceil(log2 n) zero-byte SendRecv steps.
void planBarrier(const PlanParams& params, Schedule* schedule);

}  // namespace collie
