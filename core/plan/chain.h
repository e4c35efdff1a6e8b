// Pipelined chain schedules (chain.cc) for broadcast and reduce: ranks form a chain
// from the root (broadcast) or to it (reduce); each chunk moves on as soon as it
// arrives. Each function appends rank params.rank's steps to schedule->channels
// (already sized to params.nchannels) and sets its scratch size. Arguments are already
// validated.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>

#include "core/plan/schedule.h"

namespace collie {

void planChainBroadcast(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                        Schedule* schedule);
void planChainReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                     Schedule* schedule);

}  // namespace collie
