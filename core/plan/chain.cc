// Pipelined chain schedules for broadcast and reduce.
//
// Broadcast: ranks form a chain starting at the root (root, root+1, ...); each chunk
// is forwarded as soon as it arrives, so for many chunks the time approaches one
// transfer of the whole buffer. Reduce: the same chain ending at the root; partial
// results flow towards it, each rank adding its input on the way.
#include "core/plan/chain.h"

#include "core/plan/partition.h"

namespace collie {
void planChainBroadcast(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                        Schedule* schedule) {
  const int n = params.nranks;
  const int position = mod(params.rank - args.root, n);
  const int next = position == n - 1 ? -1 : mod(params.rank + 1, n);
  const int prev = position == 0 ? -1 : mod(params.rank - 1, n);
  const size_t es = dataTypeSize(args.dtype);
  for (int c = 0; c < params.nchannels; ++c) {
    std::vector<Step>& steps = schedule->channels[c];
    Range channel = splitEven(0, args.count, params.nchannels, c);
    if (channel.count == 0) continue;
    if (position == 0) {
      steps.push_back(makeStep(StepKind::kCopy, -1, -1, Slice{BufferId::kInput, channel.begin * es},
                               Slice{BufferId::kOutput, channel.begin * es}, channel.count * es));
    }
    for (size_t done = 0; done < channel.count; done += chunkElems) {
      const size_t chunk = std::min(chunkElems, channel.count - done);
      const uint64_t offset = (channel.begin + done) * es;
      if (position == 0) {
        if (next >= 0) {
          steps.push_back(makeStep(StepKind::kSend, next, -1, Slice{BufferId::kInput, offset},
                                   Slice{}, chunk * es));
        }
      } else if (next >= 0) {
        steps.push_back(makeStep(StepKind::kRecvCopySend, next, prev, Slice{},
                                 Slice{BufferId::kOutput, offset}, chunk * es));
      } else {
        steps.push_back(makeStep(StepKind::kRecv, -1, prev, Slice{},
                                 Slice{BufferId::kOutput, offset}, chunk * es));
      }
    }
  }
}

void planChainReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                     Schedule* schedule) {
  const int n = params.nranks;
  // Position 0 is root + 1; the root is last.
  const int position = mod(params.rank - args.root - 1, n);
  const bool isRoot = params.rank == args.root;
  const int next = isRoot ? -1 : mod(params.rank + 1, n);
  const int prev = position == 0 ? -1 : mod(params.rank - 1, n);
  const int divisor = args.op == ReduceOp::kAvg ? n : 0;
  const size_t es = dataTypeSize(args.dtype);
  for (int c = 0; c < params.nchannels; ++c) {
    std::vector<Step>& steps = schedule->channels[c];
    Range channel = splitEven(0, args.count, params.nchannels, c);
    int slot = 0;
    for (size_t done = 0; done < channel.count; done += chunkElems) {
      const size_t chunk = std::min(chunkElems, channel.count - done);
      const uint64_t offset = (channel.begin + done) * es;
      const Slice input{BufferId::kInput, offset};
      if (n == 1) {
        Step copy =
            makeStep(StepKind::kCopy, -1, -1, input, Slice{BufferId::kOutput, offset}, chunk * es);
        copy.divisor = divisor;
        steps.push_back(copy);
      } else if (position == 0) {
        steps.push_back(makeStep(StepKind::kSend, next, -1, input, Slice{}, chunk * es));
      } else if (!isRoot) {
        Slice scratch{BufferId::kScratch, static_cast<uint64_t>(slot) * chunkElems * es};
        slot ^= 1;
        steps.push_back(
            makeStep(StepKind::kRecvReduceSend, next, prev, input, scratch, chunk * es));
      } else {
        Step last = makeStep(StepKind::kRecvReduceCopy, -1, prev, input,
                             Slice{BufferId::kOutput, offset}, chunk * es);
        last.divisor = divisor;
        steps.push_back(last);
      }
    }
  }
  schedule->scratchBytesPerChannel = 2 * chunkElems * es;
}

}  // namespace collie
