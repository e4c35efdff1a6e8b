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

#include "core/plan/partition.h"

namespace collie {
namespace {

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
  const size_t block = args.count;  // elements each rank ends with
  Range channel = splitEven(0, block, params.nchannels, c);
  int slot = 0;
  for (size_t done = 0; done < channel.count; done += chunkElems) {
    const size_t chunk = std::min(chunkElems, channel.count - done);
    const size_t inBlock = channel.begin + done;  // offset within each rank's block
    auto inputOf = [&](int owner) {
      return sliceAt(BufferId::kInput,
                     static_cast<size_t>(rankAt(params, mod(owner, n))) * block + inBlock, es);
    };
    // At step s rank r handles block r - 1 - s; the last step (s = n - 1) is block r.
    co_yield (makeStep(StepKind::kSend, next, -1, inputOf(r - 1), Slice{}, chunk * es));
    for (int s = 1; s < n - 1; ++s) {
      Slice scratch{BufferId::kScratch, static_cast<uint64_t>(slot) * chunkElems * es};
      slot ^= 1;
      co_yield (
          makeStep(StepKind::kRecvReduceSend, next, prev, inputOf(r - 1 - s), scratch, chunk * es));
    }
    Step last = makeStep(StepKind::kRecvReduceCopy, -1, prev, inputOf(r),
                         sliceAt(BufferId::kOutput, inBlock, es), chunk * es);
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
  const size_t block = args.count;
  Range channel = splitEven(0, block, params.nchannels, c);
  if (channel.count == 0) co_return;
  // Own block into place (a no-op when in place), then around the ring.
  co_yield (makeStep(StepKind::kCopy, -1, -1, sliceAt(BufferId::kInput, channel.begin, es),
                     sliceAt(BufferId::kOutput,
                             static_cast<size_t>(rankAt(params, r)) * block + channel.begin, es),
                     channel.count * es));
  for (size_t done = 0; done < channel.count; done += chunkElems) {
    const size_t chunk = std::min(chunkElems, channel.count - done);
    const size_t inBlock = channel.begin + done;
    auto outputOf = [&](int owner) {
      return sliceAt(BufferId::kOutput,
                     static_cast<size_t>(rankAt(params, mod(owner, n))) * block + inBlock, es);
    };
    co_yield (makeStep(StepKind::kSend, next, -1, sliceAt(BufferId::kInput, inBlock, es), Slice{},
                       chunk * es));
    for (int s = 1; s < n; ++s) {
      StepKind kind = s == n - 1 ? StepKind::kRecv : StepKind::kRecvCopySend;
      co_yield (makeStep(kind, kind == StepKind::kRecv ? -1 : next, prev, Slice{}, outputOf(r - s),
                         chunk * es));
    }
  }
}

void planRingAllReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule) {
  collectSteps(args, params, chunkElems, ringAllReduceSteps, schedule);
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
