// One-shot all-reduce for 2 ranks: each rank sends its whole input to the other and
// reduces locally, one network latency instead of the ring's two (reduce-scatter, then
// all-gather). Meant for small buffers, where latency dominates; the tuner picks it.
//
// Steps of rank r (peer p = 1 - r), on channel 0:
//   Copy            input -> scratch   (the send must not read the output buffer that
//                                       the reduction writes: in place they alias)
//   Send            scratch -> p
//   RecvReduceCopy  output = op(in0, in1), the received operand placed in rank order
//                   (incomingFirst on rank 1), so both ranks compute the same bits.
#include "core/plan/oneshot.h"

#include "core/plan/partition.h"

namespace collie {

void planOneShotAllReduce(const CollectiveArgs& args, const PlanParams& params,
                          Schedule* schedule) {
  const uint64_t bytes = args.count * dataTypeSize(args.dtype);
  const int peer = 1 - params.rank;
  auto& steps = schedule->channels[0];
  const Slice input{BufferId::kInput, 0};
  const Slice scratch{BufferId::kScratch, 0};
  const Slice output{BufferId::kOutput, 0};
  schedule->scratchBytesPerChannel = bytes;
  if (bytes > 0) steps.push_back(makeStep(StepKind::kCopy, -1, -1, input, scratch, bytes));
  steps.push_back(makeStep(StepKind::kSend, peer, -1, scratch, Slice{}, bytes));
  Step reduce = makeStep(StepKind::kRecvReduceCopy, -1, peer, scratch, output, bytes);
  reduce.incomingFirst = params.rank == 1;
  reduce.divisor = args.op == ReduceOp::kAvg ? 2 : 0;
  steps.push_back(reduce);
}

}  // namespace collie
