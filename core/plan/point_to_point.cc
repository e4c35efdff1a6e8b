#include "core/plan/point_to_point.h"

#include "core/plan/partition.h"

namespace collie {

void planPointToPoint(const CollectiveArgs& args, const PlanParams& params, Schedule* schedule) {
  const size_t es = dataTypeSize(args.dtype);
  // One message per channel so large transfers use every channel's connection.
  for (int c = 0; c < params.nchannels; ++c) {
    Range part = splitEven(0, args.count, params.nchannels, c);
    if (part.count == 0 && c > 0) continue;  // a zero-byte message still travels once
    Slice slice{args.kind == CollectiveKind::kSend ? BufferId::kInput : BufferId::kOutput,
                part.begin * es};
    if (args.kind == CollectiveKind::kSend) {
      schedule->channels[c].push_back(
          makeStep(StepKind::kSend, args.peer, -1, slice, Slice{}, part.count * es));
    } else {
      schedule->channels[c].push_back(
          makeStep(StepKind::kRecv, -1, args.peer, Slice{}, slice, part.count * es));
    }
  }
}

void planBarrier(const PlanParams& params, Schedule* schedule) {
  // Dissemination barrier: after round k every rank has heard, directly or not, from
  // the 2^(k+1) - 1 ranks before it.
  const int n = params.nranks;
  for (int distance = 1; distance < n; distance *= 2) {
    schedule->channels[0].push_back(makeStep(StepKind::kSendRecv, mod(params.rank + distance, n),
                                             mod(params.rank - distance, n), Slice{}, Slice{}, 0));
  }
}

}  // namespace collie
