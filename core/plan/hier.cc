#include "core/plan/hier.h"

#include <algorithm>
#include <vector>

#include "core/plan/chain.h"
#include "core/plan/partition.h"
#include "core/plan/ring.h"
#include "core/plan/tree.h"

namespace collie {
namespace {

using FlatPlan = void (*)(const CollectiveArgs&, const PlanParams&, size_t, Schedule*);

// Where a position sits: local rank `local` of host `host` (L ranks on each of M hosts).
struct Seat {
  explicit Seat(const PlanParams& params)
      : localSize(params.hosts->localSize),
        nhosts(params.hosts->nhosts),
        host(params.rank / localSize),
        local(params.rank % localSize) {}
  int hostPeer(int h) const { return h * localSize + local; }  // same local rank, host h
  int localPeer(int l) const { return host * localSize + l; }  // local rank l, same host
  auto hostPeers() const {
    return [this](int h) { return hostPeer(h); };
  }
  auto localPeers() const {
    return [this](int l) { return localPeer(l); };
  }
  int localSize, nhosts, host, local;
};

// Member `index`'s steps of a flat schedule over `size` members, on one channel.
std::vector<Step> memberSteps(FlatPlan plan, const CollectiveArgs& args, int size, int index,
                              size_t chunkElems) {
  PlanParams params;
  params.rank = index;
  params.nranks = size;
  Schedule schedule;
  schedule.channels.resize(1);
  plan(args, params, chunkElems, &schedule);
  return std::move(schedule.channels[0]);
}

// Appends a group's steps rewritten for the communicator: member m is position peer(m),
// each slice goes where place() puts it, and a divisor (avg's final values) becomes
// `divisor` (0 in a stage whose values are not final).
template <typename Peer, typename Place>
void embed(std::vector<Step> steps, Peer peer, Place place, int divisor, std::vector<Step>* out) {
  for (Step& step : steps) {
    if (step.sendPeer >= 0) step.sendPeer = peer(step.sendPeer);
    if (step.recvPeer >= 0) step.recvPeer = peer(step.recvPeer);
    step.src = place(step.src);
    step.dst = place(step.dst);
    if (step.divisor > 0) step.divisor = divisor;
    out->push_back(step);
  }
}

// A place() for embed(): the flat schedule's input and output offsets go where `input`
// and `output` put them; its scratch slots follow `slots` bytes into the scratch area.
template <typename Input, typename Output>
auto placing(Input input, Output output, uint64_t slots = 0) {
  return [=](Slice s) {
    if (s.buffer == BufferId::kInput) return input(s.offset);
    if (s.buffer == BufferId::kOutput) return output(s.offset);
    return Slice{BufferId::kScratch, slots + s.offset};
  };
}

Slice at(BufferId buffer, uint64_t offset) { return Slice{buffer, offset}; }

int avgDivisor(const CollectiveArgs& args, const PlanParams& params) {
  return args.op == ReduceOp::kAvg ? params.nranks : 0;
}

// Per-block chunk of all-gather and reduce-scatter: a round moves one chunk of every
// host's block, about chunkElems in all (and reduce-scatter's scratch stays near it).
size_t blockChunk(size_t chunkElems, int nhosts) {
  return std::max<size_t>(1, ceilDiv(chunkElems, static_cast<size_t>(nhosts)));
}

// Element offset of the block of the rank at `position` (all-gather's output,
// reduce-scatter's input).
size_t blockAt(const PlanParams& params, const CollectiveArgs& args, int position) {
  return static_cast<size_t>(rankAt(params, position)) * args.count;
}

// The elements of the largest channel (at least 1): a bound for chunks and scratch.
size_t perChannel(const CollectiveArgs& args, const PlanParams& params) {
  return std::max<size_t>(1, ceilDiv(args.count, static_cast<size_t>(params.nchannels)));
}

// Calls stage(steps, r, sub) for each round of `chunk` elements of each channel of
// [0, args.count): `steps` the channel's, `sub` the arguments with count r.count.
template <typename Stage>
void eachRound(const CollectiveArgs& args, const PlanParams& params, size_t chunk,
               Schedule* schedule, Stage stage) {
  for (int c = 0; c < params.nchannels; ++c) {
    const Range channel = splitEven(0, args.count, params.nchannels, c);
    for (size_t done = 0; done < channel.count; done += chunk) {
      const Range r{channel.begin + done, std::min(chunk, channel.count - done)};
      CollectiveArgs sub = args;
      sub.count = r.count;
      stage(&schedule->channels[c], r, sub);
    }
  }
}

}  // namespace

Generator<Step> hierAllReduceSteps(CollectiveArgs args, PlanParams params, size_t chunkElems,
                                   int c) {
  const Seat seat(params);
  const int n = params.nranks;
  const int localSize = seat.localSize;
  const int local = seat.local;
  const size_t es = dataTypeSize(args.dtype);
  const int localNext = seat.localPeer(mod(local + 1, localSize));
  const int localPrev = seat.localPeer(mod(local - 1, localSize));
  const int divisor = avgDivisor(args, params);
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
    // 2. All-reduce of that segment between hosts, in place: a ring of M pieces (one
    // round) or the double binary tree in chunks.
    const Range own = segment(local + 1);
    if (own.count > 0) {
      CollectiveArgs sub = args;
      sub.count = own.count;
      std::vector<Step> steps;
      embed(
          params.hostTree ? memberSteps(planTreeAllReduce, sub, seat.nhosts, seat.host, chunkElems)
                          : memberSteps(planRingAllReduce, sub, seat.nhosts, seat.host,
                                        ceilDiv(own.count, static_cast<size_t>(seat.nhosts))),
          seat.hostPeers(),
          [&](Slice s) {
            return Slice{BufferId::kOutput, own.begin * es + s.offset};
          },
          divisor, &steps);
      for (const Step& step : steps) co_yield step;
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

void planHierAllGather(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule) {
  const Seat seat(params);
  const size_t es = dataTypeSize(args.dtype);
  eachRound(args, params, blockChunk(chunkElems, seat.nhosts), schedule,
            [&](std::vector<Step>* steps, Range r, const CollectiveArgs& sub) {
              const uint64_t piece = r.count * es;  // one member's block in the flat schedules
              auto blockOf = [&](int position, uint64_t offset) {
                return at(BufferId::kOutput,
                          (blockAt(params, args, position) + r.begin) * es + offset);
              };
              // 1. Between hosts: host peers gather this chunk of their blocks.
              embed(memberSteps(planRingAllGather, sub, seat.nhosts, seat.host, r.count),
                    seat.hostPeers(),
                    placing([&](uint64_t o) { return at(BufferId::kInput, r.begin * es + o); },
                            [&](uint64_t o) {
                              return blockOf(seat.hostPeer(static_cast<int>(o / piece)), o % piece);
                            }),
                    0, steps);
              // 2. Within the host, host after host: local peers gather host h's chunks.
              for (int h = 0; h < seat.nhosts; ++h) {
                const int first = h * seat.localSize;
                embed(memberSteps(planRingAllGather, sub, seat.localSize, seat.local, r.count),
                      seat.localPeers(),
                      placing([&](uint64_t o) { return blockOf(first + seat.local, o); },
                              [&](uint64_t o) {
                                return blockOf(first + static_cast<int>(o / piece), o % piece);
                              }),
                      0, steps);
              }
            });
}

void planHierReduceScatter(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                           Schedule* schedule) {
  const Seat seat(params);
  const size_t es = dataTypeSize(args.dtype);
  const size_t chunk = std::min(blockChunk(chunkElems, seat.nhosts), perChannel(args, params));
  // Scratch: the host's sums of this round's chunk of host h's blocks at h * chunk, then
  // the flat reduce-scatters' slots.
  const uint64_t slots = static_cast<uint64_t>(seat.nhosts) * chunk * es;
  eachRound(
      args, params, chunk, schedule,
      [&](std::vector<Step>* steps, Range r, const CollectiveArgs& sub) {
        const uint64_t piece = r.count * es;
        // 1. Within the host, host after host: local rank l keeps its host's sum of
        // the chunk of host h's local rank l's block.
        for (int h = 0; h < seat.nhosts; ++h) {
          auto input = [&](uint64_t o) {
            const int owner = h * seat.localSize + static_cast<int>(o / piece);
            return at(BufferId::kInput, (blockAt(params, args, owner) + r.begin) * es + o % piece);
          };
          auto sum = [&](uint64_t o) { return at(BufferId::kScratch, h * chunk * es + o); };
          embed(memberSteps(planRingReduceScatter, sub, seat.localSize, seat.local, r.count),
                seat.localPeers(), placing(input, sum, slots), 0, steps);
        }
        // 2. Between hosts: host peers reduce-scatter those sums.
        auto sums = [&](uint64_t o) {
          return at(BufferId::kScratch, (o / piece) * chunk * es + o % piece);
        };
        auto output = [&](uint64_t o) { return at(BufferId::kOutput, r.begin * es + o); };
        embed(memberSteps(planRingReduceScatter, sub, seat.nhosts, seat.host, r.count),
              seat.hostPeers(), placing(sums, output, slots), avgDivisor(args, params), steps);
      });
  schedule->scratchBytesPerChannel = slots + ringReduceScatterScratch(args, chunk);
}

void planHierBroadcast(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule) {
  const Seat seat(params);
  const size_t es = dataTypeSize(args.dtype);
  const int rootHost = args.root / seat.localSize;
  const int rootLocal = args.root % seat.localSize;
  eachRound(args, params, chunkElems, schedule,
            [&](std::vector<Step>* steps, Range r, CollectiveArgs sub) {
              auto input = [&](uint64_t o) { return at(BufferId::kInput, r.begin * es + o); };
              auto output = [&](uint64_t o) { return at(BufferId::kOutput, r.begin * es + o); };
              // 1. Between hosts: the root's host peers (input read at the root only).
              if (seat.local == rootLocal) {
                sub.root = rootHost;
                embed(memberSteps(params.hostTree ? planTreeBroadcast : planChainBroadcast, sub,
                                  seat.nhosts, seat.host, r.count),
                      seat.hostPeers(), placing(input, output), 0, steps);
              }
              // 2. Within each host, from its peer of the root, whose output has it now.
              sub.root = rootLocal;
              embed(memberSteps(planChainBroadcast, sub, seat.localSize, seat.local, r.count),
                    seat.localPeers(), placing(output, output), 0, steps);
            });
}

void planHierReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                    Schedule* schedule) {
  const Seat seat(params);
  const size_t es = dataTypeSize(args.dtype);
  const int rootHost = args.root / seat.localSize;
  const int rootLocal = args.root % seat.localSize;
  // Scratch: the host's sum of the chunk, then the flat reduces' slots (at most 3).
  const uint64_t slots = std::min(chunkElems, perChannel(args, params)) * es;
  eachRound(args, params, chunkElems, schedule,
            [&](std::vector<Step>* steps, Range r, CollectiveArgs sub) {
              auto input = [&](uint64_t o) { return at(BufferId::kInput, r.begin * es + o); };
              auto output = [&](uint64_t o) { return at(BufferId::kOutput, r.begin * es + o); };
              auto sum = [&](uint64_t o) { return at(BufferId::kScratch, o); };
              // 1. Within each host, to its peer of the root (the host's sum in scratch).
              sub.root = rootLocal;
              embed(memberSteps(planChainReduce, sub, seat.localSize, seat.local, r.count),
                    seat.localPeers(), placing(input, sum, slots), 0, steps);
              // 2. Between hosts: the root's host peers reduce the hosts' sums to the root.
              if (seat.local != rootLocal) return;
              sub.root = rootHost;
              embed(memberSteps(params.hostTree ? planTreeReduce : planChainReduce, sub,
                                seat.nhosts, seat.host, r.count),
                    seat.hostPeers(), placing(sum, output, slots), avgDivisor(args, params), steps);
            });
  schedule->scratchBytesPerChannel = 4 * slots;
}

}  // namespace collie
