// Ring schedules: all-reduce (reduce-scatter then all-gather), reduce-scatter and
// all-gather, chunked into rounds and split over channels.
//
// In one round of all-reduce the round's elements are cut into nranks segments. At
// reduce-scatter step s (0 <= s < nranks) rank r receives segment r - s from its
// predecessor, adds its own input, and forwards the partial sum; at step nranks - 1
// it holds the final value of segment r + 1, which then travels around the ring once
// more (all-gather). Every final value is computed by exactly one rank and copied
// everywhere else, so all ranks end with identical bytes.
//
// `r` and the peers are ring positions (core/plan/layout.h); reduce-scatter's and
// all-gather's blocks are where the rank at that position has them (rankAt()).
#include "core/plan/ring.h"

#include <algorithm>

#include "core/plan/partition.h"

namespace collie {
namespace {

// The blocks of ring reduce-scatter and all-gather on one channel: equal blocks of
// args.count elements, or one per rank from args.blocks (the v kinds). Each block is
// split over the channels, and its channel part into chunk-sized pieces, one per round;
// a block with fewer pieces than the largest has empty ones, which every rank skips
// alike. The v kinds keep round 0's empty pieces on channel 0 as 0-byte messages, so
// that every rank exchanges messages (and fingerprints) with both ring neighbours even
// when counts are zero: ranks that disagree on the counts fail with Mismatch.
class RingBlocks {
 public:
  RingBlocks(const CollectiveArgs& args, const PlanParams& params, int channel)
      : args_(args), params_(params), channel_(channel) {}

  // Where the block at ring position `position` starts (elements of the gathered buffer).
  size_t offset(int position) const {
    const int rank = rankAt(params_, position);
    return args_.blocks ? args_.blocks->offsets[rank] : static_cast<size_t>(rank) * args_.count;
  }
  // This channel's part of that block (elements within the block).
  Range part(int position) const {
    const size_t count =
        args_.blocks ? args_.blocks->counts[rankAt(params_, position)] : args_.count;
    return splitEven(0, count, params_.nchannels, channel_);
  }
  size_t rounds(size_t chunkElems) const {
    const size_t largest = args_.blocks ? args_.blocks->largest : args_.count;
    const size_t rounds =
        ceilDiv(splitEven(0, largest, params_.nchannels, channel_).count, chunkElems);
    return args_.blocks && channel_ == 0 ? std::max<size_t>(rounds, 1) : rounds;
  }
  Range piece(int position, size_t round, size_t chunkElems) const {
    const Range whole = part(position);
    const size_t at = std::min(whole.count, round * chunkElems);
    return Range{whole.begin + at, std::min(chunkElems, whole.count - at)};
  }
  bool emits(Range piece, size_t round) const {
    return piece.count > 0 || (args_.blocks && channel_ == 0 && round == 0);
  }

 private:
  const CollectiveArgs& args_;
  const PlanParams& params_;
  const int channel_;
};

template <typename Steps>
void collectSteps(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                  Steps steps, Schedule* schedule) {
  for (int c = 0; c < params.nchannels; ++c) {
    Generator<Step> generator = steps(args, params, chunkElems, c);
    Step step;
    while (generator.next(&step)) schedule->channels[c].push_back(step);
  }
}

}  // namespace

Generator<Step> ringAllReduceSteps(CollectiveArgs args, PlanParams params, size_t chunkElems,
                                   int c) {
  const int n = params.nranks;
  const int r = params.rank;
  const size_t es = dataTypeSize(args.dtype);
  const int next = mod(r + 1, n);
  const int prev = mod(r - 1, n);
  const int divisor = args.op == ReduceOp::kAvg ? n : 0;
  Range channel = splitEven(0, args.count, params.nchannels, c);
  const size_t roundElems = chunkElems * n;
  for (size_t done = 0; done < channel.count; done += roundElems) {
    const size_t roundCount = std::min(roundElems, channel.count - done);
    auto segment = [&](int index) {
      return splitEven(channel.begin + done, roundCount, n, mod(index, n));
    };
    // Reduce-scatter.
    Range first = segment(r);
    if (first.count > 0) {
      co_yield (makeStep(StepKind::kSend, next, -1, sliceAt(BufferId::kInput, first.begin, es),
                         Slice{}, first.count * es));
    }
    for (int s = 1; s < n; ++s) {
      Range seg = segment(r - s);
      if (seg.count == 0) continue;
      Step step =
          makeStep(StepKind::kRecvReduceSend, next, prev, sliceAt(BufferId::kInput, seg.begin, es),
                   sliceAt(BufferId::kOutput, seg.begin, es), seg.count * es);
      if (s == n - 1) step.divisor = divisor;  // final value of segment r + 1
      co_yield (step);
    }
    // All-gather of the final segments.
    for (int s = 1; s < n; ++s) {
      Range seg = segment(r + 1 - s);
      if (seg.count == 0) continue;
      StepKind kind = s == n - 1 ? StepKind::kRecv : StepKind::kRecvCopySend;
      co_yield (makeStep(kind, kind == StepKind::kRecv ? -1 : next, prev, Slice{},
                         sliceAt(BufferId::kOutput, seg.begin, es), seg.count * es));
    }
  }
}

Generator<Step> ringReduceScatterSteps(CollectiveArgs args, PlanParams params, size_t chunkElems,
                                       int c) {
  const int n = params.nranks;
  const int r = params.rank;
  const size_t es = dataTypeSize(args.dtype);
  const int next = mod(r + 1, n);
  const int prev = mod(r - 1, n);
  const int divisor = args.op == ReduceOp::kAvg ? n : 0;
  const RingBlocks blocks(args, params, c);
  int slot = 0;
  for (size_t round = 0; round < blocks.rounds(chunkElems); ++round) {
    // Round `round`'s piece of the block at ring position `owner` (elements within it).
    auto piece = [&](int owner) { return blocks.piece(mod(owner, n), round, chunkElems); };
    auto inputOf = [&](int owner, Range at) {
      return sliceAt(BufferId::kInput, blocks.offset(mod(owner, n)) + at.begin, es);
    };
    // At step s rank r handles block r - 1 - s; the last step (s = n - 1) is block r.
    const Range first = piece(r - 1);
    if (blocks.emits(first, round)) {
      co_yield (
          makeStep(StepKind::kSend, next, -1, inputOf(r - 1, first), Slice{}, first.count * es));
    }
    for (int s = 1; s < n - 1; ++s) {
      const Range part = piece(r - 1 - s);
      if (!blocks.emits(part, round)) continue;
      Slice scratch{BufferId::kScratch, static_cast<uint64_t>(slot) * chunkElems * es};
      slot ^= 1;
      co_yield (makeStep(StepKind::kRecvReduceSend, next, prev, inputOf(r - 1 - s, part), scratch,
                         part.count * es));
    }
    const Range mine = piece(r);
    if (!blocks.emits(mine, round)) continue;
    Step last = makeStep(StepKind::kRecvReduceCopy, -1, prev, inputOf(r, mine),
                         sliceAt(BufferId::kOutput, mine.begin, es), mine.count * es);
    last.divisor = divisor;
    co_yield (last);
  }
}

Generator<Step> ringAllGatherSteps(CollectiveArgs args, PlanParams params, size_t chunkElems,
                                   int c) {
  const int n = params.nranks;
  const int r = params.rank;
  const size_t es = dataTypeSize(args.dtype);
  const int next = mod(r + 1, n);
  const int prev = mod(r - 1, n);
  const RingBlocks blocks(args, params, c);
  // Own block into place (a no-op when in place), then around the ring.
  const Range own = blocks.part(r);
  if (own.count > 0) {
    co_yield (makeStep(StepKind::kCopy, -1, -1, sliceAt(BufferId::kInput, own.begin, es),
                       sliceAt(BufferId::kOutput, blocks.offset(r) + own.begin, es),
                       own.count * es));
  }
  for (size_t round = 0; round < blocks.rounds(chunkElems); ++round) {
    const Range mine = blocks.piece(r, round, chunkElems);
    if (blocks.emits(mine, round)) {
      co_yield (makeStep(StepKind::kSend, next, -1, sliceAt(BufferId::kInput, mine.begin, es),
                         Slice{}, mine.count * es));
    }
    for (int s = 1; s < n; ++s) {
      const int owner = mod(r - s, n);
      const Range part = blocks.piece(owner, round, chunkElems);
      if (!blocks.emits(part, round)) continue;
      StepKind kind = s == n - 1 ? StepKind::kRecv : StepKind::kRecvCopySend;
      co_yield (makeStep(kind, kind == StepKind::kRecv ? -1 : next, prev, Slice{},
                         sliceAt(BufferId::kOutput, blocks.offset(owner) + part.begin, es),
                         part.count * es));
    }
  }
}

void planRingAllReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule) {
  collectSteps(args, params, chunkElems, ringAllReduceSteps, schedule);
  // Positions are ranks only without a host layout (a team is on one host anyway).
  if (!params.hosts) schedule->fold = FoldOrder::ring(chunkElems, params.nchannels);
}

FoldRun ringFoldRun(const FoldOrder& fold, size_t count, int nranks, size_t elem) {
  const size_t n = static_cast<size_t>(nranks);
  // The channel (ringAllReduceSteps splits the elements evenly among them).
  Range channel;
  for (int c = 0; c < fold.ringChannels; ++c) {
    channel = splitEven(0, count, fold.ringChannels, c);
    if (elem < channel.begin + channel.count) break;
  }
  // The round, then the segment within it (splitEven's inverse: the first `extra`
  // segments have base + 1 elements).
  const size_t roundElems = fold.ringChunkElems * n;
  const size_t roundBegin = channel.begin + (elem - channel.begin) / roundElems * roundElems;
  const size_t roundCount = std::min(roundElems, channel.begin + channel.count - roundBegin);
  const size_t base = roundCount / n;
  const size_t extra = roundCount % n;
  const size_t offset = elem - roundBegin;
  const size_t index = offset < extra * (base + 1) ? offset / (base + 1)
                                                   : extra + (offset - extra * (base + 1)) / base;
  const Range segment = splitEven(roundBegin, roundCount, n, index);
  return FoldRun{segment.begin + segment.count, static_cast<int>(index)};
}

void planRingReduceScatter(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                           Schedule* schedule) {
  collectSteps(args, params, chunkElems, ringReduceScatterSteps, schedule);
  schedule->scratchBytesPerChannel = ringReduceScatterScratch(args, chunkElems);
}

void planRingAllGather(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule) {
  collectSteps(args, params, chunkElems, ringAllGatherSteps, schedule);
}

size_t ringReduceScatterScratch(const CollectiveArgs& args, size_t chunkElems) {
  return 2 * chunkElems * dataTypeSize(args.dtype);
}

}  // namespace collie
