#include "core/plan/simulator.h"

#include <cstring>
#include <deque>
#include <map>
#include <tuple>

#include "core/kernel/reduce_backend.h"

namespace collie {
namespace {

struct RankState {
  std::vector<size_t> next;  // per channel: index of the next step
  std::vector<bool> sent;    // per channel: the current kSendRecv step already sent
  std::vector<std::vector<uint8_t>> scratch;
  std::vector<uint8_t> staging;
};

using Link = std::tuple<int, int, int>;  // sender, receiver, channel

// In place, one buffer holds both: all-gather's input is its block of the output,
// reduce-scatter's output is its block of the input, the others share one buffer.
size_t blockOffset(const CollectiveArgs& args, int rank) {
  return rank * args.count * dataTypeSize(args.dtype);
}

}  // namespace

Status simulateSchedules(const std::vector<Schedule>& schedules, std::vector<SimulatedRank>* ranks,
                         bool inPlace, SimulationStats* stats) {
  const int n = static_cast<int>(schedules.size());
  if (static_cast<int>(ranks->size()) != n) return invalidArgument("one buffer set per rank");
  const ReduceBackend& kernels = hostReduceBackend();
  std::vector<RankState> state(n);
  std::map<Link, std::deque<std::vector<uint8_t>>> links;
  std::map<std::pair<int, int>, uint64_t> linkBytes;
  SimulationStats local;

  for (int r = 0; r < n; ++r) {
    const Schedule& s = schedules[r];
    state[r].next.assign(s.channels.size(), 0);
    state[r].sent.assign(s.channels.size(), false);
    state[r].scratch.assign(s.channels.size(), std::vector<uint8_t>(s.scratchBytesPerChannel));
  }

  auto pointer = [&](int r, int channel, const Slice& slice) -> uint8_t* {
    SimulatedRank& buffers = (*ranks)[r];
    const CollectiveKind kind = schedules[r].args.kind;
    switch (slice.buffer) {
      case BufferId::kInput:
        if (!inPlace || kind == CollectiveKind::kReduceScatter) {
          return buffers.input.data() + slice.offset;
        }
        if (kind == CollectiveKind::kAllGather) {
          return buffers.output.data() + blockOffset(schedules[r].args, r) + slice.offset;
        }
        return buffers.output.data() + slice.offset;
      case BufferId::kOutput:
        if (inPlace && kind == CollectiveKind::kReduceScatter) {
          return buffers.input.data() + blockOffset(schedules[r].args, r) + slice.offset;
        }
        return buffers.output.data() + slice.offset;
      case BufferId::kScratch: return state[r].scratch[channel].data() + slice.offset;
    }
    return nullptr;
  };

  bool remaining = true;
  while (remaining) {
    remaining = false;
    bool progressed = false;
    for (int r = 0; r < n; ++r) {
      const Schedule& schedule = schedules[r];
      for (size_t c = 0; c < schedule.channels.size(); ++c) {
        const auto& steps = schedule.channels[c];
        size_t& index = state[r].next[c];
        while (index < steps.size()) {
          const Step& step = steps[index];
          const size_t count = step.bytes / dataTypeSize(schedule.args.dtype);
          auto sendFrom = [&](const uint8_t* data) {
            links[Link{r, step.sendPeer, static_cast<int>(c)}].emplace_back(data,
                                                                           data + step.bytes);
            local.messages++;
            local.bytesMoved += step.bytes;
            linkBytes[{r, step.sendPeer}] += step.bytes;
          };
          // A kSendRecv sends before it waits, like the engine posts both at once.
          if (step.kind == StepKind::kSendRecv && !state[r].sent[c]) {
            sendFrom(pointer(r, c, step.src));
            state[r].sent[c] = true;
            progressed = true;
          }
          std::vector<uint8_t> incoming;
          bool receives = step.kind != StepKind::kSend && step.kind != StepKind::kCopy;
          if (receives) {
            auto& queue = links[Link{step.recvPeer, r, static_cast<int>(c)}];
            if (queue.empty()) break;  // wait for the peer
            incoming = std::move(queue.front());
            queue.pop_front();
            if (incoming.size() != step.bytes) {
              return mismatchError("rank " + std::to_string(r) + " channel " + std::to_string(c) +
                                       " step " + std::to_string(index) + " expected " +
                                       std::to_string(step.bytes) + " bytes from rank " +
                                       std::to_string(step.recvPeer) + ", got " +
                                       std::to_string(incoming.size()),
                                   step.recvPeer);
            }
          }
          switch (step.kind) {
            case StepKind::kSend: sendFrom(pointer(r, c, step.src)); break;
            case StepKind::kSendRecv:
              state[r].sent[c] = false;
              if (step.bytes) std::memcpy(pointer(r, c, step.dst), incoming.data(), step.bytes);
              break;
            case StepKind::kRecv:
              if (step.bytes) std::memcpy(pointer(r, c, step.dst), incoming.data(), step.bytes);
              break;
            case StepKind::kRecvCopySend:
              if (step.bytes) std::memcpy(pointer(r, c, step.dst), incoming.data(), step.bytes);
              sendFrom(pointer(r, c, step.dst));
              break;
            case StepKind::kRecvReduceSend:
            case StepKind::kRecvReduceCopy:
              kernels.reduce(pointer(r, c, step.dst), pointer(r, c, step.src), incoming.data(),
                             count, schedule.args.dtype, schedule.args.op, step.divisor);
              if (step.kind == StepKind::kRecvReduceSend) sendFrom(pointer(r, c, step.dst));
              break;
            case StepKind::kCopy: {
              uint8_t* src = pointer(r, c, step.src);
              uint8_t* dst = pointer(r, c, step.dst);
              if (step.divisor > 1) {
                kernels.divide(dst, src, count, schedule.args.dtype, step.divisor);
              } else if (src != dst && step.bytes) {
                std::memmove(dst, src, step.bytes);
              }
              break;
            }
          }
          ++index;
          progressed = true;
        }
        if (index < steps.size()) remaining = true;
      }
    }
    if (remaining && !progressed) {
      for (int r = 0; r < n; ++r) {
        for (size_t c = 0; c < schedules[r].channels.size(); ++c) {
          size_t index = state[r].next[c];
          if (index < schedules[r].channels[c].size()) {
            return internalError("schedule deadlock: rank " + std::to_string(r) + " channel " +
                                 std::to_string(c) + " waits at step " + std::to_string(index) +
                                 " for rank " +
                                 std::to_string(schedules[r].channels[c][index].recvPeer));
          }
        }
      }
    }
  }
  for (auto& [link, queue] : links) {
    if (!queue.empty()) {
      return internalError("rank " + std::to_string(std::get<0>(link)) + " sent " +
                           std::to_string(queue.size()) + " message(s) to rank " +
                           std::to_string(std::get<1>(link)) + " that were never received");
    }
  }
  for (auto& [pair, bytes] : linkBytes) local.maxBytesOnOneLink = std::max(local.maxBytesOnOneLink, bytes);
  if (stats) *stats = local;
  return Status();
}

}  // namespace collie
