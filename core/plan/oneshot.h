// The one-shot all-reduce schedule for 2 ranks (oneshot.cc): each rank sends its whole
// input to the other and reduces locally, in rank order. Appends rank params.rank's
// steps to schedule->channels[0]. Arguments are already validated (2 ranks).
//
// Not to be confused with the shm transport's board (transports/shm/shm_board.h), a
// team collective that any number of ranks of one host run through shared memory.
//
// Thread safety: pure function.
#pragma once

#include "core/plan/schedule.h"

namespace collie {

// Largest all-reduce the one-shot schedule (2 ranks) is weighed for: beyond it the
// unpipelined whole-buffer message and reduction cost more than the ring's extra
// latency saves.
inline constexpr size_t kOneShotMaxBytes = 64 * 1024;

void planOneShotAllReduce(const CollectiveArgs& args, const PlanParams& params, Schedule* schedule);

}  // namespace collie
