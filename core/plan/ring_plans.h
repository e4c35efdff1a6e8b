// Internal: the schedule generators, one per algorithm family. Each appends the steps
// of rank params.rank to schedule->channels (already sized to params.nchannels) and
// sets scratchBytesPerChannel when it uses scratch. Arguments are already validated.
#pragma once

#include <algorithm>

#include "core/plan/generator.h"
#include "core/plan/schedule.h"

namespace collie {

void planRingAllReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule);
void planRingReduceScatter(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                           Schedule* schedule);
void planRingAllGather(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule);
// The ring steps of one channel, produced lazily (same steps as the plan* functions).
Generator<Step> ringAllReduceSteps(CollectiveArgs args, PlanParams params, size_t chunkElems,
                                   int channel);
Generator<Step> ringReduceScatterSteps(CollectiveArgs args, PlanParams params, size_t chunkElems,
                                       int channel);
Generator<Step> ringAllGatherSteps(CollectiveArgs args, PlanParams params, size_t chunkElems,
                                   int channel);
size_t ringReduceScatterScratch(const CollectiveArgs& args, size_t chunkElems);
void planChainBroadcast(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                        Schedule* schedule);
void planChainReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                     Schedule* schedule);
void planTreeAllReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule);
void planTreeBroadcast(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule);
void planTreeReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                    Schedule* schedule);
// Whole-buffer exchange, 2 ranks only (oneshot.cc).
void planOneShotAllReduce(const CollectiveArgs& args, const PlanParams& params, Schedule* schedule);
void planPointToPoint(const CollectiveArgs& args, const PlanParams& params, Schedule* schedule);
void planBarrier(const PlanParams& params, Schedule* schedule);

}  // namespace collie
