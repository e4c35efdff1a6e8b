// Exchange schedules (exchange.cc): all-to-all (equal blocks, or a count and offset per
// peer), gather and scatter. Blocks move between ranks and nothing is reduced, so every
// message is a plain Send or Recv of one block (split over the channels).
//
// All-to-all algorithms (Algorithm):
//   pairwise  n-1 rounds; in round k rank r sends its block for r+k and receives the
//             block of r-k, and starts round k+1 once that block landed. At most one
//             block per rank in flight: bounded memory, no incast. The robust default.
//   linear    every send posted at once, then the receives (from r-1, r-2, ...): one
//             latency instead of n-1, at the price of n-1 blocks in flight at once.
// Gather and scatter are linear: the root receives from (sends to) every rank in turn,
// starting after itself. Like reduce (gather) and broadcast (scatter) they include the
// root agreement (PlanParams::agreeOnRoot), before a gather's data and after a
// scatter's, so ranks that name different roots fail with Mismatch instead of waiting.
//
// Every pair of ranks exchanges at least one message on channel 0, also of 0 bytes, so
// that ranks that disagree on a count (a zero and a non-zero) fail with Mismatch.
//
// Thread safety: pure functions.
#pragma once

#include "collie/status.h"
#include "core/plan/schedule.h"

namespace collie {

// Appends rank params.rank's steps of `args` (an exchange kind) to `schedule`, and sets
// schedule->algorithm. Unsupported for an algorithm the collective has not (ring for an
// all-to-all, pairwise for a gather); InvalidArgument for a kAllToAllV without a layout
// of params.nranks entries or a root out of range.
Status planExchange(const CollectiveArgs& args, const PlanParams& params, Schedule* schedule);
// planExchange() with `algorithm` in place of params.algorithm (the specs of pairwise and
// linear, core/plan/pairwise_spec.cc, linear_spec.cc).
Status planExchangeAs(Algorithm algorithm, const CollectiveArgs& args, const PlanParams& params,
                      Schedule* schedule);

// The algorithm `requested` (kAuto: the default) resolves to for exchange `kind`, or
// kAuto when the collective does not implement it.
Algorithm exchangeAlgorithm(CollectiveKind kind, Algorithm requested);

// The bytes of this rank's input that an all-to-all (either kind) in place, its input
// the same buffer as its output, reads: what the engine copies aside before the
// collective writes any block (Executor). 0 for the other kinds and for nothing to send.
size_t inPlaceExchangeBytes(const CollectiveArgs& args, int nranks);

}  // namespace collie
