#include "core/plan/hier.h"

#include <algorithm>

#include "core/plan/partition.h"

namespace collie {

Generator<Step> hierAllReduceSteps(CollectiveArgs args, PlanParams params, size_t chunkElems,
                                   int c) {
  const HostLayout& hosts = *params.hosts;
  const int n = params.nranks;
  const int localSize = hosts.localSize;
  const int nhosts = hosts.nhosts;
  const int host = params.rank / localSize;
  const int local = params.rank % localSize;
  const size_t es = dataTypeSize(args.dtype);
  const int localNext = host * localSize + mod(local + 1, localSize);
  const int localPrev = host * localSize + mod(local - 1, localSize);
  const int hostNext = mod(host + 1, nhosts) * localSize + local;
  const int hostPrev = mod(host - 1, nhosts) * localSize + local;
  const int divisor = args.op == ReduceOp::kAvg ? n : 0;
  const Range channel = splitEven(0, args.count, params.nchannels, c);
  const size_t roundElems = chunkElems * static_cast<size_t>(n);
  for (size_t done = 0; done < channel.count; done += roundElems) {
    const size_t roundCount = std::min(roundElems, channel.count - done);
    auto segment = [&](int index) {
      return splitEven(channel.begin + done, roundCount, localSize, mod(index, localSize));
    };
    auto output = [&](const Range& range) { return sliceAt(BufferId::kOutput, range.begin, es); };
    // 1. Reduce-scatter within the host: segment local + 1 ends here.
    if (Range first = segment(local); first.count > 0) {
      co_yield (makeStep(StepKind::kSend, localNext, -1, sliceAt(BufferId::kInput, first.begin, es),
                         Slice{}, first.count * es));
    }
    for (int s = 1; s < localSize; ++s) {
      const Range seg = segment(local - s);
      if (seg.count == 0) continue;
      const bool last = s == localSize - 1;
      co_yield (makeStep(last ? StepKind::kRecvReduceCopy : StepKind::kRecvReduceSend,
                         last ? -1 : localNext, localPrev, sliceAt(BufferId::kInput, seg.begin, es),
                         output(seg), seg.count * es));
    }
    // 2. All-reduce of that segment between hosts, in place (a ring of M pieces).
    const Range own = segment(local + 1);
    auto piece = [&](int index) {
      return splitEven(own.begin, own.count, nhosts, mod(index, nhosts));
    };
    if (Range first = piece(host); first.count > 0) {
      co_yield (makeStep(StepKind::kSend, hostNext, -1, output(first), Slice{}, first.count * es));
    }
    for (int s = 1; s < nhosts; ++s) {
      const Range p = piece(host - s);
      if (p.count == 0) continue;
      Step step = makeStep(StepKind::kRecvReduceSend, hostNext, hostPrev, output(p), output(p),
                           p.count * es);
      if (s == nhosts - 1) step.divisor = divisor;  // final value of piece host + 1
      co_yield (step);
    }
    for (int s = 1; s < nhosts; ++s) {
      const Range p = piece(host + 1 - s);
      if (p.count == 0) continue;
      const bool last = s == nhosts - 1;
      co_yield (makeStep(last ? StepKind::kRecv : StepKind::kRecvCopySend, last ? -1 : hostNext,
                         hostPrev, Slice{}, output(p), p.count * es));
    }
    // 3. All-gather within the host.
    if (own.count > 0) {
      co_yield (makeStep(StepKind::kSend, localNext, -1, output(own), Slice{}, own.count * es));
    }
    for (int s = 1; s < localSize; ++s) {
      const Range seg = segment(local + 1 - s);
      if (seg.count == 0) continue;
      const bool last = s == localSize - 1;
      co_yield (makeStep(last ? StepKind::kRecv : StepKind::kRecvCopySend, last ? -1 : localNext,
                         localPrev, Slice{}, output(seg), seg.count * es));
    }
  }
}

void planHierAllReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule) {
  for (int c = 0; c < params.nchannels; ++c) {
    Generator<Step> generator = hierAllReduceSteps(args, params, chunkElems, c);
    Step step;
    while (generator.next(&step)) schedule->channels[c].push_back(step);
  }
}

}  // namespace collie
