// Hierarchical (two-level) schedules (hier.cc) over a HostLayout with several hosts and
// as many ranks, more than one, on each (HostLayout::twoLevel()).
//
// All-reduce, per round of the channel's elements cut into L local segments (L ranks
// per host, M hosts):
//   1. within each host, a ring reduce-scatter: local rank l ends with its host's sum of
//      segment (l + 1) mod L, in the output buffer;
//   2. between hosts, the ranks of equal local rank run a ring all-reduce of that
//      segment in place (reduce-scatter then all-gather of M pieces), all L of a host at
//      once, so each host's link carries 2 (M - 1) / M of the data, not 2 (N - 1) / N;
//   3. within each host, a ring all-gather of the L segments.
// Reduction order: each element is summed first within each host, along the host's
// ring (starting at the local rank after the segment's owner), then across hosts along
// the ring of hosts; the final value of each piece is computed by exactly one rank and
// copied to every other, so every rank ends with identical bytes (avg divides once,
// there). Peers are ring positions (core/plan/layout.h); buildSchedule() maps them.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>

#include "core/plan/generator.h"
#include "core/plan/schedule.h"

namespace collie {

// Rank params.rank's steps of one channel; params.rank is its position, params.hosts
// must be twoLevel().
Generator<Step> hierAllReduceSteps(CollectiveArgs args, PlanParams params, size_t chunkElems,
                                   int channel);
void planHierAllReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule);

}  // namespace collie
