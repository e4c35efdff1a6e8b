// Schedules: collectives as plain data.
//
// A Schedule lists, for one rank, the steps of one collective on each channel. It is
// a pure function of (collective, count, dtype, op, root or peer, rank, nranks,
// algorithm, channels, chunk size): it needs no transport, can be cached, checked by
// a simulator that runs every rank's schedule, and dumped as JSON. The engine runs
// the steps of a channel in order; channels run concurrently.
//
// Step semantics (byte ranges are [offset, offset + bytes) of the named buffer):
//   kSend           send `src` to sendPeer.
//   kRecv           receive from recvPeer into `dst`.
//   kSendRecv       send `src` to sendPeer and receive into `dst` from recvPeer, both
//                   posted at once (dissemination barrier, pairwise exchange).
//   kRecvReduceSend receive from recvPeer into a scratch slot, dst = op(src, incoming),
//                   then send `dst` to sendPeer.
//   kRecvReduceCopy receive from recvPeer into a scratch slot, dst = op(src, incoming).
//   kRecvCopySend   receive from recvPeer into `dst`, then send `dst` to sendPeer.
//   kCopy           dst = src locally (no-op when they are the same bytes).
//   kTeam           the transport's team runs the whole collective with the first of
//                   `team`'s algorithms whose condition holds on every rank; then the
//                   steps after it, on every channel, are skipped; when none does
//                   (every rank alike) they run instead. First on channel 0 only; see
//                   core/plan/team_step.h.
// `incomingFirst` on a kRecvReduce* step swaps the operands: dst = op(incoming, src).
// Schedules where several ranks compute the same reduction themselves (one-shot) use
// it so that every rank combines the inputs in rank order, bit for bit alike.
// `divisor` > 0 on a step that produces final values of an average: the result is
// divided by it (see core/kernel/reduce_backend.h). kBuffer kScratch slices name a
// per-channel scratch area of Schedule::scratchBytesPerChannel bytes.
//
// Thread safety: Schedules are immutable values once built.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collie/status.h"
#include "collie/types.h"
#include "core/plan/fold_order.h"
#include "core/plan/generator.h"
#include "core/plan/layout.h"

namespace collie {

enum class StepKind : uint8_t {
  kSend,
  kRecv,
  kSendRecv,
  kRecvReduceSend,
  kRecvReduceCopy,
  kRecvCopySend,
  kCopy,
  kTeam,
};

// A set of team algorithms (core/plan/team_step.h): bit 1 << Algorithm.
using TeamAlgorithms = uint16_t;

enum class BufferId : uint8_t { kInput, kOutput, kScratch };

struct Slice {
  BufferId buffer = BufferId::kInput;
  uint64_t offset = 0;  // bytes
};

struct Step {
  StepKind kind = StepKind::kCopy;
  int32_t sendPeer = -1;
  int32_t recvPeer = -1;
  Slice src;
  Slice dst;
  uint64_t bytes = 0;
  int32_t divisor = 0;
  bool incomingFirst = false;
  TeamAlgorithms team = 0;  // kTeam: the algorithms it tries
};

// Where an all-to-all with a count per peer (kAllToAllV) reads and writes, in elements
// of the collective's dtype: sendCounts[p] elements at sendOffsets[p] of the input go to
// rank p; recvCounts[p] elements from rank p land at recvOffsets[p] of the output. Every
// vector has nranks entries (checked by Communicator::allToAllV); the counts are this
// rank's, so they differ between ranks, and sendCounts[p] here must equal recvCounts[r]
// on rank p (a message of another length fails with Mismatch naming both).
struct ExchangeLayout {
  std::vector<size_t> sendCounts, sendOffsets, recvCounts, recvOffsets;
};

// The blocks of an all-gather or reduce-scatter with a count per rank (kAllGatherV,
// kReduceScatterV): rank p's block has counts[p] elements and starts at offsets[p] (the
// prefix sum: blocks packed in rank order) of the gathered (all-gather's output,
// reduce-scatter's input) buffer. The same on every rank; its hash is part of the
// fingerprint, so ranks that pass other counts fail with Mismatch.
struct BlockCounts {
  std::vector<size_t> counts, offsets;
  size_t total = 0;
  size_t largest = 0;
  static std::shared_ptr<const BlockCounts> packed(const std::vector<size_t>& counts);
};

// What to run: the collective as the caller described it.
struct CollectiveArgs {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  size_t count = 0;  // elements: per rank for allreduce/broadcast/reduce/send/recv;
                     // the receive count for reducescatter, the send count for allgather
                     // and gather, the receive count for scatter, the block per peer for
                     // alltoall; the sum of the counts (blocks->total) for the v kinds
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;   // broadcast/reduce/gather/scatter: the root rank; unused by the others
  int peer = -1;  // send/recv: the rank at the other end; unused by the other kinds
  // kAllToAllV: this rank's counts and offsets (count is then 0: nothing about the
  // layout is the same on every rank). Null for every other kind. A schedule with a
  // layout is planned for its call and not cached.
  std::shared_ptr<const ExchangeLayout> layout = nullptr;
  // kAllGatherV, kReduceScatterV: the count of every rank's block. Null for every other
  // kind. Such a schedule is planned for its call and not cached.
  std::shared_ptr<const BlockCounts> blocks = nullptr;
  // kPreMulSum: this rank's factor, for this call only. It is not part of the plan (the
  // planner clears it in the schedules it builds and caches, and the fingerprint leaves
  // it out: each rank has its own); the engine keeps it with the call (Pending::scalar).
  ReduceScalar scalar = ReduceScalar();
};

// Which rank field of CollectiveArgs a kind reads: `root` (broadcast, reduce, gather,
// scatter) or `peer` (send, recv); the other kinds read neither.
inline bool isRooted(CollectiveKind kind) {
  return kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce ||
         kind == CollectiveKind::kGather || kind == CollectiveKind::kScatter;
}
inline bool isPointToPoint(CollectiveKind kind) {
  return kind == CollectiveKind::kSend || kind == CollectiveKind::kRecv;
}

// How to run it on this rank.
struct PlanParams {
  int rank = 0;
  int nranks = 1;
  int nchannels = 1;
  size_t chunkBytes = 512 * 1024;
  Algorithm algorithm = Algorithm::kAuto;
  // Broadcast and reduce include a root agreement on channel 0 (after a broadcast's
  // data, before a reduce's): the steps of a dissemination barrier, whose peers do not
  // depend on the root. Every message carries
  // the collective's fingerprint (root included), and a rank finishes the barrier only
  // when every rank's fingerprint equals its own, so ranks that name different roots
  // all fail with Mismatch (or with the failure that rank spreads) instead of one side
  // finishing its sends. Off where the caller checks the fingerprints itself (the
  // device path's launch check).
  bool agreeOnRoot = true;
  // A team step first (core/plan/team_step.h), trying `team`; `algorithm`'s steps follow as
  // its fallback unless `teamFallback` is false (a forced team algorithm, or a board
  // that takes every collective of this size: nothing to fall back to).
  bool teamStep = false;
  TeamAlgorithms team = 0;
  bool teamFallback = true;
  // The hosts of the ranks (core/plan/layout.h), null on one host: schedules are planned
  // in ring positions, host after host, and their peers mapped back to ranks; the
  // hierarchical algorithm needs it.
  HostLayoutPtr hosts;
  // Hierarchical schedules (core/plan/hier.h): the inter-host stage of all-reduce runs as
  // a double binary tree instead of a ring, that of broadcast and reduce as a binary
  // tree instead of a chain (the tuner's choice: predictHostsMicros()).
  bool hostTree = false;
};

struct Schedule {
  CollectiveArgs args;
  // The plan's first choice: the first algorithm of a team step's set, else the steps'.
  Algorithm algorithm = Algorithm::kRing;
  // After a team step with algorithms: the algorithm of the steps that follow it (its
  // fallback), kAuto when none follow. kAuto without a team step.
  Algorithm fallback = Algorithm::kAuto;
  int rank = 0;
  int nranks = 1;
  size_t scratchBytesPerChannel = 0;
  // The order in which the steps combine each element's values (core/plan/fold_order.h):
  // a team step's single-copy all-reduce follows it, so that the bits do not depend on
  // which of them or these steps ran.
  FoldOrder fold;
  std::vector<std::vector<Step>> channels;

  size_t stepCount() const;
};

// Bytes of the input and output buffers a collective reads and writes on one rank (for
// the v kinds: on the rank with the largest block).
size_t inputBytes(const CollectiveArgs& args, int nranks);
size_t outputBytes(const CollectiveArgs& args, int nranks);

// Builds the schedule, or InvalidArgument / Unsupported (e.g. an algorithm this build
// does not implement for that collective).
Result<Schedule> buildSchedule(const CollectiveArgs& args, const PlanParams& params);

// The same steps as buildSchedule(), one generator per channel, produced lazily where
// the generator supports it (ring), so that thousands of virtual ranks with thousands
// of steps each fit in memory. *scratchBytesPerChannel receives the scratch size.
Result<std::vector<Generator<Step>>> streamSchedule(const CollectiveArgs& args,
                                                    const PlanParams& params,
                                                    size_t* scratchBytesPerChannel);

std::string stepKindName(StepKind kind);
std::string scheduleToJson(const Schedule& schedule);

}  // namespace collie
