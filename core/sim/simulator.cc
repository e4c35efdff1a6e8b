#include "core/sim/simulator.h"

#include <cstring>
#include <deque>
#include <unordered_map>
#include <utility>

#include "core/kernel/reduce_backend.h"
#include "core/plan/team_step.h"

namespace collie {
namespace {

struct Link {
  int sender = 0;
  int receiver = 0;
  std::vector<uint8_t> data;  // queued payloads, back to back
  size_t readPos = 0;
  std::deque<uint64_t> sizes;
  uint64_t totalBytes = 0;
  int waiter = -1;  // unit blocked on this link
};

// One rank's channel: its step generator and where it stands.
struct Unit {
  Generator<Step> steps;
  Step current;
  bool hasCurrent = false;
  bool sent = false;  // the current kSendRecv already sent
  bool done = false;
  bool queued = false;
  uint64_t index = 0;
};

class Runner {
 public:
  Runner(int nranks, int nchannels, const CollectiveArgs& args, std::vector<SimulatedRank>* ranks,
         bool inPlace)
      : n_(nranks),
        channels_(nchannels),
        args_(args),
        ranks_(ranks),
        inPlace_(inPlace),
        kernels_(hostReduceBackend()),
        units_(static_cast<size_t>(nranks) * nchannels),
        scratch_(units_.size()),
        stepsPerRank_(nranks, 0) {}

  void setRank(int rank, std::vector<Generator<Step>> steps, size_t scratchBytes) {
    for (int c = 0; c < channels_; ++c) {
      Unit& unit = units_[rank * channels_ + c];
      if (c < static_cast<int>(steps.size())) unit.steps = std::move(steps[c]);
      if (ranks_ && scratchBytes) scratch_[rank * channels_ + c].resize(scratchBytes);
    }
  }

  Status run(SimulationStats* stats);
  // Count the bytes that leave each host (SimulationStats::maxBytesOutOfOneHost).
  void setHosts(HostLayoutPtr hosts) { hosts_ = std::move(hosts); }

 private:
  uint8_t* pointer(int rank, int channel, const Slice& slice);
  Link& link(int sender, int receiver, int channel);
  void send(int rank, int channel, int peer, const uint8_t* data, uint64_t bytes);
  Status execute(int id);
  void wake(int id) {
    if (!units_[id].queued && !units_[id].done) {
      units_[id].queued = true;
      work_.push_back(id);
    }
  }

  const int n_;
  const int channels_;
  const CollectiveArgs args_;
  std::vector<SimulatedRank>* ranks_;
  const bool inPlace_;
  const ReduceBackend& kernels_;
  std::vector<Unit> units_;
  std::vector<std::vector<uint8_t>> scratch_;
  std::vector<uint64_t> stepsPerRank_;
  std::unordered_map<uint64_t, size_t> linkIndex_;
  std::deque<Link> links_;
  std::deque<int> work_;
  SimulationStats local_;
  HostLayoutPtr hosts_;
};

uint8_t* Runner::pointer(int rank, int channel, const Slice& slice) {
  SimulatedRank& buffers = (*ranks_)[rank];
  const size_t block = rank * args_.count * dataTypeSize(args_.dtype);
  switch (slice.buffer) {
    case BufferId::kInput:
      if (!inPlace_ || args_.kind == CollectiveKind::kReduceScatter) {
        return buffers.input.data() + slice.offset;
      }
      if (args_.kind == CollectiveKind::kAllGather) {
        return buffers.output.data() + block + slice.offset;
      }
      return buffers.output.data() + slice.offset;
    case BufferId::kOutput:
      if (inPlace_ && args_.kind == CollectiveKind::kReduceScatter) {
        return buffers.input.data() + block + slice.offset;
      }
      return buffers.output.data() + slice.offset;
    case BufferId::kScratch:
      return scratch_[rank * channels_ + channel].data() + slice.offset;
  }
  return nullptr;
}

Link& Runner::link(int sender, int receiver, int channel) {
  const uint64_t key =
      (static_cast<uint64_t>(sender) * n_ + static_cast<uint64_t>(receiver)) * channels_ + channel;
  auto [it, inserted] = linkIndex_.try_emplace(key, links_.size());
  if (inserted) {
    links_.emplace_back();
    links_.back().sender = sender;
    links_.back().receiver = receiver;
  }
  return links_[it->second];
}

void Runner::send(int rank, int channel, int peer, const uint8_t* data, uint64_t bytes) {
  Link& out = link(rank, peer, channel);
  if (ranks_ && bytes) out.data.insert(out.data.end(), data, data + bytes);
  out.sizes.push_back(bytes);
  out.totalBytes += bytes;
  local_.messages++;
  local_.bytesMoved += bytes;
  if (out.waiter >= 0) {
    wake(out.waiter);
    out.waiter = -1;
  }
}

Status Runner::execute(int id) {
  Unit& unit = units_[id];
  const int r = id / channels_;
  const int c = id % channels_;
  const bool data = ranks_ != nullptr;
  const size_t es = dataTypeSize(args_.dtype);
  while (true) {
    if (!unit.hasCurrent) {
      if (!unit.steps.next(&unit.current)) {
        unit.done = true;
        return Status();
      }
      unit.hasCurrent = true;
      unit.sent = false;
    }
    const Step& step = unit.current;
    if (step.kind == StepKind::kSendRecv && !unit.sent) {
      send(r, c, step.sendPeer, data ? pointer(r, c, step.src) : nullptr, step.bytes);
      unit.sent = true;
    }
    const uint8_t* incoming = nullptr;
    if (step.kind != StepKind::kSend && step.kind != StepKind::kCopy) {
      if (step.recvPeer < 0 || step.recvPeer >= n_) {
        return internalError("rank " + std::to_string(r) + " receives from invalid rank " +
                             std::to_string(step.recvPeer));
      }
      Link& in = link(step.recvPeer, r, c);
      if (in.sizes.empty()) {
        in.waiter = id;
        return Status();
      }
      const uint64_t size = in.sizes.front();
      if (size != step.bytes) {
        return mismatchError("rank " + std::to_string(r) + " channel " + std::to_string(c) +
                                 " step " + std::to_string(unit.index) + " expected " +
                                 std::to_string(step.bytes) + " bytes from rank " +
                                 std::to_string(step.recvPeer) + ", got " + std::to_string(size),
                             step.recvPeer);
      }
      in.sizes.pop_front();
      if (data) {
        incoming = in.data.data() + in.readPos;
        in.readPos += size;
      }
      // `incoming` stays valid while the step runs: its sends go out on links whose
      // sender is this rank, never on this one. The buffer is reset once drained.
    }
    if (step.kind == StepKind::kSend && (step.sendPeer < 0 || step.sendPeer >= n_)) {
      return internalError("rank " + std::to_string(r) + " sends to invalid rank " +
                           std::to_string(step.sendPeer));
    }
    const size_t count = step.bytes / es;
    switch (step.kind) {
      case StepKind::kSend:
        send(r, c, step.sendPeer, data ? pointer(r, c, step.src) : nullptr, step.bytes);
        break;
      case StepKind::kSendRecv:
      case StepKind::kRecv:
        if (data && step.bytes) std::memcpy(pointer(r, c, step.dst), incoming, step.bytes);
        break;
      case StepKind::kRecvCopySend:
        if (data && step.bytes) std::memcpy(pointer(r, c, step.dst), incoming, step.bytes);
        send(r, c, step.sendPeer, data ? pointer(r, c, step.dst) : nullptr, step.bytes);
        break;
      case StepKind::kRecvReduceSend:
      case StepKind::kRecvReduceCopy:
        if (data) {
          uint8_t* dst = pointer(r, c, step.dst);
          if (step.dst.buffer == BufferId::kScratch) {
            // Like the engine: the message lands in the scratch slot itself.
            if (step.bytes) std::memcpy(dst, incoming, step.bytes);
            incoming = dst;
          }
          const uint8_t* own = pointer(r, c, step.src);
          if (step.incomingFirst) std::swap(own, incoming);
          kernels_.reduce(dst, own, incoming, count, args_.dtype, args_.op, step.divisor);
        }
        if (step.kind == StepKind::kRecvReduceSend) {
          send(r, c, step.sendPeer, data ? pointer(r, c, step.dst) : nullptr, step.bytes);
        }
        break;
      case StepKind::kTeam:  // simulateSchedules() resolved every team step
        return internalError("rank " + std::to_string(r) + " channel " + std::to_string(c) +
                             " step " + std::to_string(unit.index) +
                             ": a team step that is not first on channel 0");
      case StepKind::kCopy:
        if (data) {
          uint8_t* src = pointer(r, c, step.src);
          uint8_t* dst = pointer(r, c, step.dst);
          if (step.divisor > 1) {
            kernels_.divide(dst, src, count, args_.dtype, step.divisor);
          } else if (src != dst && step.bytes) {
            std::memmove(dst, src, step.bytes);
          }
        }
        break;
    }
    if (data && step.kind != StepKind::kSend && step.kind != StepKind::kCopy) {
      Link& in = link(step.recvPeer, r, c);
      if (in.sizes.empty()) {
        in.data.clear();
        in.readPos = 0;
      }
    }
    unit.hasCurrent = false;
    unit.index++;
    stepsPerRank_[r]++;
    local_.steps++;
  }
}

Status Runner::run(SimulationStats* stats) {
  for (size_t id = 0; id < units_.size(); ++id) wake(static_cast<int>(id));
  while (!work_.empty()) {
    int id = work_.front();
    work_.pop_front();
    units_[id].queued = false;
    COLLIE_RETURN_IF_ERROR(execute(id));
  }
  for (size_t id = 0; id < units_.size(); ++id) {
    const Unit& unit = units_[id];
    if (!unit.done) {
      return internalError("schedule deadlock: rank " + std::to_string(id / channels_) +
                           " channel " + std::to_string(id % channels_) + " waits at step " +
                           std::to_string(unit.index) + " for rank " +
                           std::to_string(unit.current.recvPeer));
    }
  }
  std::unordered_map<uint64_t, uint64_t> pairBytes;
  for (const Link& l : links_) {
    if (!l.sizes.empty()) {
      return internalError("rank " + std::to_string(l.sender) + " sent " +
                           std::to_string(l.sizes.size()) + " message(s) to rank " +
                           std::to_string(l.receiver) + " that were never received");
    }
    pairBytes[static_cast<uint64_t>(l.sender) * n_ + l.receiver] += l.totalBytes;
  }
  for (const auto& [pair, bytes] : pairBytes) {
    if (bytes > 0) local_.links++;
    if (bytes > local_.maxBytesOnOneLink || local_.busiestSender < 0) {
      local_.maxBytesOnOneLink = bytes;
      local_.busiestSender = static_cast<int>(pair / n_);
      local_.busiestReceiver = static_cast<int>(pair % n_);
    }
  }
  if (hosts_) {
    std::vector<uint64_t> outOf(hosts_->nhosts, 0);
    for (const auto& [pair, bytes] : pairBytes) {
      const int from = hosts_->hostOf[pair / n_];
      if (from != hosts_->hostOf[pair % n_]) outOf[from] += bytes;
    }
    for (int h = 0; h < hosts_->nhosts; ++h) {
      local_.bytesBetweenHosts += outOf[h];
      if (outOf[h] > local_.maxBytesOutOfOneHost || local_.busiestHost < 0) {
        local_.maxBytesOutOfOneHost = outOf[h];
        local_.busiestHost = h;
      }
    }
  }
  for (uint64_t steps : stepsPerRank_) {
    local_.maxStepsOnOneRank = std::max(local_.maxStepsOnOneRank, steps);
  }
  if (stats) *stats = local_;
  return Status();
}

Generator<Step> stepsOf(const Schedule* schedule, size_t channel) {
  for (const Step& step : schedule->channels[channel]) co_yield step;
}

// Where rank r's input and output are, with `inPlace` laid out as Runner::pointer().
struct RankBuffers {
  const uint8_t* input;
  uint8_t* output;
};
RankBuffers buffersOf(const CollectiveArgs& args, SimulatedRank& rank, int r, bool inPlace) {
  const size_t block = r * args.count * dataTypeSize(args.dtype);
  if (!inPlace) return {rank.input.data(), rank.output.data()};
  switch (args.kind) {
    case CollectiveKind::kReduceScatter:
      return {rank.input.data(), rank.input.data() + block};
    case CollectiveKind::kAllGather:
      return {rank.output.data() + block, rank.output.data()};
    default:
      return {rank.output.data(), rank.output.data()};
  }
}

// The team algorithms' result for every rank: reductions combine the ranks' inputs in
// rank order, from left to right, or an all-reduce in `order` (its schedule's fold,
// core/plan/fold_order.h), the average divided at the last step; every input is read
// before any output is written (in place they alias).
void runTeamReference(const CollectiveArgs& args, const FoldOrder& order,
                      std::vector<SimulatedRank>* ranks, bool inPlace) {
  const int n = static_cast<int>(ranks->size());
  const ReduceBackend& kernels = hostReduceBackend();
  const size_t bytes = args.count * dataTypeSize(args.dtype);
  std::vector<RankBuffers> at(n);
  std::vector<std::vector<uint8_t>> inputs(n);
  for (int r = 0; r < n; ++r) {
    at[r] = buffersOf(args, (*ranks)[r], r, inPlace);
    const size_t in = inputBytes(args, n);
    inputs[r].assign(at[r].input, at[r].input + in);
  }
  // fold(offset) = in[0] op in[1] op ... over `bytes` bytes at `offset` of each input.
  auto fold = [&](size_t offset) {
    std::vector<uint8_t> acc(inputs[0].begin() + offset, inputs[0].begin() + offset + bytes);
    const int divisor = args.op == ReduceOp::kAvg ? n : 0;
    for (int r = 1; r < n; ++r) {
      kernels.reduce(acc.data(), acc.data(), inputs[r].data() + offset, args.count, args.dtype,
                     args.op, r == n - 1 ? divisor : 0);
    }
    return acc;
  };
  // The all-reduce in the ring's order: each segment from the position that starts it,
  // each next value the first operand (as the ring's reduce steps).
  auto ringFold = [&]() {
    const size_t es = dataTypeSize(args.dtype);
    const int divisor = args.op == ReduceOp::kAvg ? n : 0;
    std::vector<uint8_t> acc(bytes);
    for (size_t e = 0; e < args.count;) {
      const FoldRun run = ringFoldRun(order, args.count, n, e);
      uint8_t* out = acc.data() + e * es;
      std::memcpy(out, inputs[run.first].data() + e * es, (run.end - e) * es);
      for (int k = 1; k < n; ++k) {
        kernels.reduce(out, inputs[(run.first + k) % n].data() + e * es, out, run.end - e,
                       args.dtype, args.op, k == n - 1 ? divisor : 0);
      }
      e = run.end;
    }
    return acc;
  };
  switch (args.kind) {
    case CollectiveKind::kAllReduce: {
      if (bytes == 0) break;
      const std::vector<uint8_t> value = order.isRing() && n > 1 ? ringFold() : fold(0);
      for (int r = 0; r < n; ++r) std::memcpy(at[r].output, value.data(), bytes);
      break;
    }
    case CollectiveKind::kReduce:
      if (bytes == 0) break;
      std::memcpy(at[args.root].output, fold(0).data(), bytes);
      break;
    case CollectiveKind::kReduceScatter:
      for (int r = 0; r < n && bytes; ++r) std::memcpy(at[r].output, fold(r * bytes).data(), bytes);
      break;
    case CollectiveKind::kAllGather:
      for (int r = 0; r < n && bytes; ++r) {
        for (int from = 0; from < n; ++from) {
          std::memcpy(at[r].output + from * bytes, inputs[from].data(), bytes);
        }
      }
      break;
    case CollectiveKind::kBroadcast:
      for (int r = 0; r < n && bytes; ++r) {
        std::memcpy(at[r].output, inputs[args.root].data(), bytes);
      }
      break;
    case CollectiveKind::kAllToAll:  // block r of rank `from`'s input to block `from` of r's
      for (int r = 0; r < n && bytes; ++r) {
        for (int from = 0; from < n; ++from) {
          std::memcpy(at[r].output + from * bytes, inputs[from].data() + r * bytes, bytes);
        }
      }
      break;
    case CollectiveKind::kGather:
      for (int from = 0; from < n && bytes; ++from) {
        std::memcpy(at[args.root].output + from * bytes, inputs[from].data(), bytes);
      }
      break;
    case CollectiveKind::kScatter:
      for (int r = 0; r < n && bytes; ++r) {
        std::memcpy(at[r].output, inputs[args.root].data() + r * bytes, bytes);
      }
      break;
    default:
      break;
  }
}

// Checks that every rank's schedule starts with the same team step or none has one;
// *team receives the set, *present whether there is one.
Status findTeamSteps(const std::vector<Schedule>& schedules, bool* present, TeamAlgorithms* team) {
  *present = hasTeamStep(schedules[0], team);
  for (size_t r = 0; r < schedules.size(); ++r) {
    TeamAlgorithms mine = 0;
    const bool has = hasTeamStep(schedules[r], &mine);
    if (has != *present || mine != *team) {
      return mismatchError("rank " + std::to_string(r) + "'s team step (" +
                               (has ? teamAlgorithmsText(mine) : std::string("none")) +
                               ") differs from rank 0's (" +
                               (*present ? teamAlgorithmsText(*team) : std::string("none")) + ")",
                           static_cast<int>(r));
    }
  }
  return Status();
}

}  // namespace

Status simulateSchedules(const std::vector<Schedule>& schedules, std::vector<SimulatedRank>* ranks,
                         bool inPlace, SimulationStats* stats, TeamSimulation team) {
  const int n = static_cast<int>(schedules.size());
  if (ranks != nullptr && static_cast<int>(ranks->size()) != n) {
    return invalidArgument("one buffer set per rank");
  }
  if (n == 0) return Status();
  bool teamStep = false;
  TeamAlgorithms algorithms = 0;
  COLLIE_RETURN_IF_ERROR(findTeamSteps(schedules, &teamStep, &algorithms));
  if (teamStep && team == TeamSimulation::kRun && algorithms != 0) {
    if (ranks != nullptr) {
      runTeamReference(schedules[0].args, schedules[0].fold, ranks, inPlace);
    }
    if (stats != nullptr) {
      *stats = SimulationStats();
      stats->steps = static_cast<uint64_t>(n);
      stats->maxStepsOnOneRank = 1;
    }
    return Status();
  }
  if (teamStep) {
    // Declined on every rank: the fallback steps run.
    std::vector<Schedule> fallback = schedules;
    size_t left = 0;
    for (Schedule& schedule : fallback) {
      schedule.channels[0].erase(schedule.channels[0].begin());
      left += schedule.stepCount();
    }
    if (left == 0 && algorithms != 0) {
      return unsupported("the team step (" + teamAlgorithmsText(algorithms) +
                         ") declined and no fallback steps follow it");
    }
    return simulateSchedules(fallback, ranks, inPlace, stats, team);
  }
  int nchannels = 1;
  for (const Schedule& s : schedules) {
    nchannels = std::max(nchannels, static_cast<int>(s.channels.size()));
  }
  Runner runner(n, nchannels, schedules[0].args, ranks, inPlace);
  for (int r = 0; r < n; ++r) {
    std::vector<Generator<Step>> steps;
    for (size_t c = 0; c < schedules[r].channels.size(); ++c) {
      steps.push_back(stepsOf(&schedules[r], c));
    }
    runner.setRank(r, std::move(steps), schedules[r].scratchBytesPerChannel);
  }
  return runner.run(stats);
}

Status simulateCollective(const CollectiveArgs& args, const PlanParams& params,
                          std::vector<SimulatedRank>* ranks, bool inPlace, SimulationStats* stats,
                          TeamSimulation team) {
  if (ranks && static_cast<int>(ranks->size()) != params.nranks) {
    return invalidArgument("one buffer set per rank");
  }
  if (params.teamStep) {
    std::vector<Schedule> schedules;
    for (int r = 0; r < params.nranks; ++r) {
      PlanParams mine = params;
      mine.rank = r;
      Result<Schedule> schedule = buildSchedule(args, mine);
      if (!schedule.isOk()) return schedule.status();
      schedules.push_back(std::move(schedule).value());
    }
    return simulateSchedules(schedules, ranks, inPlace, stats, team);
  }
  Runner runner(params.nranks, params.nchannels, args, ranks, inPlace);
  if (params.hosts && static_cast<int>(params.hosts->hostOf.size()) == params.nranks) {
    runner.setHosts(params.hosts);
  }
  for (int r = 0; r < params.nranks; ++r) {
    PlanParams mine = params;
    mine.rank = r;
    size_t scratch = 0;
    Result<std::vector<Generator<Step>>> steps = streamSchedule(args, mine, &scratch);
    if (!steps.isOk()) return steps.status();
    runner.setRank(r, std::move(steps).value(), scratch);
  }
  return runner.run(stats);
}

}  // namespace collie
