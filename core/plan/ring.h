// Ring schedules (ring.cc): all-reduce (reduce-scatter then all-gather), reduce-scatter
// and all-gather (also with a count per rank: kReduceScatterV, kAllGatherV, whose
// blocks come from CollectiveArgs::blocks), chunked into rounds and split over
// channels. Each plan* function appends rank params.rank's steps to schedule->channels
// (already sized to params.nchannels); the *Steps generators produce one channel's
// same steps lazily, so that the simulator can run thousands of virtual ranks.
// Arguments are already validated.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>

#include "core/plan/fold_order.h"
#include "core/plan/generator.h"
#include "core/plan/schedule.h"

namespace collie {

// Also sets schedule->fold to the ring's order (core/plan/fold_order.h).
void planRingAllReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule);
void planRingReduceScatter(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                           Schedule* schedule);
void planRingAllGather(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule);
Generator<Step> ringAllReduceSteps(CollectiveArgs args, PlanParams params, size_t chunkElems,
                                   int channel);
Generator<Step> ringReduceScatterSteps(CollectiveArgs args, PlanParams params, size_t chunkElems,
                                       int channel);
Generator<Step> ringAllGatherSteps(CollectiveArgs args, PlanParams params, size_t chunkElems,
                                   int channel);
// Scratch bytes per channel of ring reduce-scatter (its double-buffered slots).
size_t ringReduceScatterScratch(const CollectiveArgs& args, size_t chunkElems);

}  // namespace collie
