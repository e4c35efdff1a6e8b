// DeviceComm's board path (device_comm.h): all-reduce, reduce-scatter and all-gather
// of up to a board slot per rank as one kernel (DeviceBoardStep, core/device/
// device_steps.h), which also runs the fingerprint check.
#include <algorithm>

#include "core/device/device_comm.h"
#include "core/device/device_comm_parts.h"
#include "core/plan/fingerprint.h"

namespace collie {
namespace {

// Output bytes per block of the board kernel, before rounding to 16 elements: enough
// to keep a block's threads busy for a few rounds of 16-byte packs, so small
// collectives take a single block (one flag hand-off) and larger ones spread over up
// to kDeviceMaxBoardBlocks SMs.
constexpr uint64_t kBoardBytesPerBlock = 16 * 1024;

}  // namespace

size_t DeviceComm::boardBytesOf(const CollectiveArgs& args, int nranks) {
  DeviceBoardKind kind;
  if (!wholeKindOf(args.kind, &kind)) return 0;
  const size_t parts = kind == DeviceBoardKind::kReduceScatter ? static_cast<size_t>(nranks) : 1;
  return parts * args.count * dataTypeSize(args.dtype);
}

bool DeviceComm::runsOnBoard(const CollectiveArgs& args) const {
  DeviceBoardKind kind;
  const int n = config_.nranks;
  if (config_.boardBytes == 0 || n < 2 || n > kDeviceMaxBoardRanks ||
      !wholeKindOf(args.kind, &kind)) {
    return false;
  }
  if (config_.algorithm != Algorithm::kAuto && config_.algorithm != Algorithm::kBoard) {
    return false;
  }
  return boardBytesOf(args, n) <= config_.boardBytes;
}

Status DeviceComm::launchBoard(const CollectiveArgs& args, const void* input, void* output,
                               DeviceStream stream) {
  const int n = config_.nranks;
  DeviceBoardStep step;
  if (!wholeKindOf(args.kind, &step.kind)) {
    return internalError("device path: the board kernel does not run " +
                         std::string(collectiveName(args.kind)));
  }
  step.input = input;
  step.output = output;
  if (step.kind == DeviceBoardKind::kAllGather) {
    step.count = args.count * dataTypeSize(args.dtype);  // bytes
    step.dtype = DataType::kUint8;
    step.op = ReduceOp::kSum;
  } else {
    step.count = args.count;
    step.dtype = args.dtype;
    step.op = args.op;
    if (args.op == ReduceOp::kAvg) step.divisor = n;
  }
  step.rank = config_.rank;
  step.nranks = n;
  for (int r = 0; r < n; ++r) {
    step.boards[r] = peerRegions_[r] + Region::board(n, config_.slotBytes, config_.boardBytes, 0);
  }
  step.slotBytes = config_.boardBytes;
  // Blocks and their share: a function of the collective alone, so every rank agrees.
  const uint64_t bytes = step.count * dataTypeSize(step.dtype);
  const uint64_t wanted =
      std::clamp<uint64_t>(ceilDiv(bytes, kBoardBytesPerBlock), 1, kDeviceMaxBoardBlocks);
  step.perBlock = std::max<uint64_t>(16, ceilDiv(ceilDiv(step.count, wanted), 16) * 16);
  step.blocks = static_cast<uint32_t>(std::max<uint64_t>(1, ceilDiv(step.count, step.perBlock)));
  step.ownBlockFlags = reinterpret_cast<uint64_t*>(region_ + Region::blockFlags(n));
  step.blockCounter = reinterpret_cast<uint32_t*>(region_ + Region::counter(n));
  step.check =
      checkWithEveryPeer(makeFingerprint(0, args), Region::blockFlags(n), step.peerBlockFlags);
  step.profile = reinterpret_cast<unsigned long long*>(profile_);
  return runtime_->launchBoard(step, stream);
}

}  // namespace collie
