// DeviceComm's ring program path (device_comm.h): a schedule whose messages all go to
// the next rank and come from the previous one, planned in one round, runs as one
// kernel per rank (DeviceRingProgram, core/device/device_steps.h) instead of one kernel
// per step.
#include <algorithm>

#include "core/device/device_comm.h"
#include "core/device/device_comm_parts.h"

namespace collie {
namespace {

// Bytes of a collective per block of the ring program, before the cap of
// kDeviceMaxRingBlocks: a 2-rank all-reduce of 2 MiB and up takes every block.
constexpr uint64_t kRingBytesPerBlock = 64 * 1024;

bool ringOpOf(StepKind kind, DeviceRingOp* op) {
  switch (kind) {
    case StepKind::kSend:
      *op = DeviceRingOp::kSend;
      return true;
    case StepKind::kRecv:
      *op = DeviceRingOp::kRecv;
      return true;
    case StepKind::kRecvReduceSend:
      *op = DeviceRingOp::kRecvReduceSend;
      return true;
    case StepKind::kRecvReduceCopy:
      *op = DeviceRingOp::kRecvReduceCopy;
      return true;
    case StepKind::kRecvCopySend:
      *op = DeviceRingOp::kRecvCopySend;
      return true;
    case StepKind::kCopy:
      *op = DeviceRingOp::kCopy;
      return true;
    case StepKind::kSendRecv:
    case StepKind::kTeam:
      return false;
  }
  return false;
}

// The bytes a step reads from its source and writes to its destination.
struct Access {
  uintptr_t begin = 0;
  uintptr_t end = 0;  // empty when begin == end
  bool overlaps(const Access& other) const {
    return begin < end && other.begin < other.end && begin < other.end && other.begin < end;
  }
  bool same(const Access& other) const { return begin == other.begin && end == other.end; }
};
Access readOf(const DeviceRingStep& step) {
  if (!ringStepReadsSrc(step.op)) return {};
  const uintptr_t at = reinterpret_cast<uintptr_t>(step.src);
  return {at, at + step.bytes};
}
Access writeOf(const DeviceRingStep& step) {
  if (step.dst == nullptr) return {};
  const uintptr_t at = reinterpret_cast<uintptr_t>(step.dst);
  return {at, at + step.bytes};
}

// The pipelining rule of DeviceRingProgram: bytes that two steps touch, one writing,
// are exactly the same bytes in both.
bool piecesIndependent(const DeviceRingProgram& program) {
  for (int k = 0; k < program.nsteps; ++k) {
    const Access readK = readOf(program.steps[k]);
    const Access writeK = writeOf(program.steps[k]);
    for (int j = k; j < program.nsteps; ++j) {
      const Access readJ = readOf(program.steps[j]);
      const Access writeJ = writeOf(program.steps[j]);
      const Access pairs[][2] = {{writeK, readJ}, {writeK, writeJ}, {readK, writeJ}};
      for (const auto& pair : pairs) {
        if (pair[0].overlaps(pair[1]) && !pair[0].same(pair[1])) return false;
      }
    }
  }
  return true;
}

// Drops a forwarding step's local write that a later step overwrites before any step
// reads it (a ring all-reduce's partial sums, which its all-gather replaces): the value
// still travels on, and the device moves fewer bytes.
void dropDeadWrites(DeviceRingProgram* program) {
  for (int k = 0; k < program->nsteps; ++k) {
    DeviceRingStep& step = program->steps[k];
    if (!ringStepSends(step.op) || step.dst == nullptr) continue;
    const Access written = writeOf(step);
    for (int j = k + 1; j < program->nsteps; ++j) {
      if (readOf(program->steps[j]).overlaps(written)) break;  // read first: the write stays
      if (writeOf(program->steps[j]).same(written)) {
        step.dst = nullptr;
        break;
      }
    }
  }
}

}  // namespace

bool DeviceComm::mayRunRingProgram(const CollectiveArgs& args) const {
  if (config_.ringSliceBytes == 0 || config_.nranks < 2 ||
      2 * config_.nranks > kDeviceMaxRingSteps) {
    return false;
  }
  switch (args.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce:
      return args.count > 0;
    default:
      return false;
  }
}

// The largest buffer of the collective: no ring or chain piece is larger, so a chunk
// of this size plans a single round.
size_t DeviceComm::ringPlanBytes(const CollectiveArgs& args, int nranks) {
  const size_t parts =
      args.kind == CollectiveKind::kReduceScatter || args.kind == CollectiveKind::kAllGather
          ? static_cast<size_t>(nranks)
          : 1;
  return std::max<size_t>(1, parts * args.count) * dataTypeSize(args.dtype);
}

bool DeviceComm::ringProgramOf(const Schedule& schedule, const void* input, void* output,
                               DeviceRingProgram* program) const {
  const int n = config_.nranks;
  const int next = (config_.rank + 1) % n;
  const int prev = (config_.rank + n - 1) % n;
  if (schedule.channels.size() != 1) return false;
  const size_t es = dataTypeSize(schedule.args.dtype);
  DeviceRingProgram p;
  auto at = [&](const Slice& slice) -> uint8_t* {
    uint8_t* base = slice.buffer == BufferId::kInput
                        ? const_cast<uint8_t*>(static_cast<const uint8_t*>(input))
                        : static_cast<uint8_t*>(output);
    return base + slice.offset;
  };
  for (const Step& step : schedule.channels[0]) {
    DeviceRingOp op;
    if (!ringOpOf(step.kind, &op) || step.bytes % es != 0) return false;
    if ((ringStepSends(op) && step.sendPeer != next) ||
        (ringStepReceives(op) && step.recvPeer != prev)) {
      return false;
    }
    if (step.bytes == 0) continue;  // no piece, on this rank and on its neighbour alike
    DeviceRingStep ring;
    ring.op = op;
    ring.bytes = step.bytes;
    ring.divisor = step.divisor;
    ring.incomingFirst = step.incomingFirst ? 1 : 0;
    if (ringStepReadsSrc(op)) {
      if (step.src.buffer == BufferId::kScratch) return false;
      ring.src = at(step.src);
    }
    if (op != DeviceRingOp::kSend) {
      // A scratch destination is the host engine's staging of a value that travels on;
      // the kernel writes that value straight into the next rank's FIFO.
      if (step.dst.buffer == BufferId::kScratch) {
        if (!ringStepSends(op)) return false;
      } else {
        ring.dst = at(step.dst);
      }
    }
    if (op == DeviceRingOp::kCopy && ring.src == ring.dst) continue;
    if (p.nsteps == kDeviceMaxRingSteps) return false;
    p.steps[p.nsteps++] = ring;
  }
  if (!piecesIndependent(p)) return false;
  dropDeadWrites(&p);
  p.dtype = schedule.args.dtype;
  p.op = schedule.args.op;
  // Blocks: a function of the collective alone, so every rank launches the same grid.
  p.blocks = static_cast<uint32_t>(std::clamp<uint64_t>(
      ceilDiv(ringPlanBytes(schedule.args, n), n * kRingBytesPerBlock), 1, kDeviceMaxRingBlocks));
  p.sliceBytes = config_.ringSliceBytes;
  const size_t slot = config_.slotBytes;
  const size_t board = config_.boardBytes;
  auto words = [](uint8_t* region, size_t offset) {
    return reinterpret_cast<uint64_t*>(region + offset);
  };
  p.sendFifo = peerRegions_[next] + Region::ringFifo(n, slot, board);
  p.recvFifo = region_ + Region::ringFifo(n, slot, board);
  p.sent = words(region_, Region::ringSent(n, slot, board));
  p.consumed = words(region_, Region::ringConsumed(n, slot, board));
  p.nextConsumed = words(peerRegions_[next], Region::ringConsumed(n, slot, board));
  p.prevSent = words(peerRegions_[prev], Region::ringSent(n, slot, board));
  p.nextRank = next;
  p.prevRank = prev;
  p.error = outcome_->error;
  p.timeoutNs = static_cast<uint64_t>(config_.timeout.count()) * 1000;
  p.timeoutBase = kPeerTimeoutBase;
  p.profile = reinterpret_cast<unsigned long long*>(profile_);
  *program = p;
  return true;
}

}  // namespace collie
