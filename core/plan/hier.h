// Hierarchical (two-level) schedules (hier.cc) over a HostLayout with several hosts and
// as many ranks, more than one, on each (HostLayout::twoLevel()). Position p is local
// rank p % L of host p / L (L ranks per host, M hosts); "host peers" are the ranks of
// equal local rank on every host, "local peers" the ranks of one host.
//
// Every stage is a flat schedule (ring, tree, chain: ring.h, tree.h, chain.h) run by one
// group of ranks, its peers and byte ranges rewritten for the communicator (embed() in
// hier.cc), so the two levels inherit the flat schedules' order and proofs.
//
// All-reduce, per round of the channel's elements cut into L local segments:
//   1. within each host, a ring reduce-scatter: local rank l ends with its host's sum of
//      segment (l + 1) mod L, in the output buffer;
//   2. between hosts, the host peers all-reduce that segment in place, all L of a host
//      at once: a ring (each host's link carries 2 (M - 1) / M of the data, 2 (M - 1)
//      messages per round) or, where PlanParams::hostTree, NCCL's double binary tree
//      (2 of the data, about 2 log2 M messages: latency-bound sizes on many hosts);
//   3. within each host, a ring all-gather of the L segments.
// All-gather, per chunk of each block: host peers ring-all-gather their blocks (each
// host's link carries (M - 1) / M of the output, the least any algorithm can: every
// host must receive the other hosts' blocks once); then within each host, for each host
// h in turn, a ring all-gather of the L blocks of host h's ranks.
// Reduce-scatter (the mirror): within each host, for each host h in turn, a ring
// reduce-scatter of the blocks owned by host h's ranks, local rank l keeping its host's
// sum of the block of host h's local rank l (in scratch); then host peers ring-reduce-
// scatter those sums, each ending with its own block. Link: (M - 1) / M of the input.
// Broadcast: the root's host peers broadcast each chunk between hosts (a chain, or a
// binary tree where hostTree), then each host's chain from its peer of the root's local
// rank. Each host's link receives the buffer once (a tree's inner hosts send it twice).
// Reduce (the mirror): each host's chain reduces to its rank of the root's local rank
// (in scratch), then those ranks reduce between hosts (chain or binary tree) to the
// root.
// Reduction order: each element is summed first within each host, in the order of the
// flat schedule of that stage (ring: starting after the owner; chain: from the rank
// after the root's local rank), then across hosts in the order of the inter-host stage;
// the final value of each piece is computed by exactly one rank and copied to every
// other, so every rank ends with identical bytes (avg divides once, there). Peers are
// ring positions (core/plan/layout.h); buildSchedule() maps them to ranks.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>

#include "core/plan/generator.h"
#include "core/plan/schedule.h"

namespace collie {

// Rank params.rank's steps of one channel of all-reduce; params.rank is its position,
// params.hosts must be twoLevel().
Generator<Step> hierAllReduceSteps(CollectiveArgs args, PlanParams params, size_t chunkElems,
                                   int channel);
// Append rank params.rank's steps (all channels) and set the scratch size; the same
// preconditions, args.root a position.
void planHierAllReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule);
void planHierAllGather(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule);
void planHierReduceScatter(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                           Schedule* schedule);
void planHierBroadcast(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule);
void planHierReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                    Schedule* schedule);

}  // namespace collie
