// DeviceComm's user windows and its direct path (device_comm.h): device memory that
// every rank registered, mapped in every rank, and the collectives on it that run as
// one direct kernel (DeviceDirectStep, core/device/device_steps.h).
#include <algorithm>
#include <sstream>

#include "core/common/hex.h"
#include "core/device/device_comm.h"
#include "core/device/device_comm_parts.h"
#include "core/plan/fingerprint.h"

namespace collie {
namespace {

constexpr char kWindowEntryMagic[] = "collie-user-window-v1";
// Bytes of a rank's share per block of the direct kernel, before rounding to 16
// elements: a 1 MiB share takes 16 blocks, 4 MiB and more take kDeviceMaxDirectBlocks
// (as many loads in flight as the grid allows from the sizes where bandwidth counts;
// not yet tuned on a GPU).
constexpr uint64_t kDirectBytesPerBlock = 64 * 1024;
// The root field of the fingerprint (bits 20..31: unused by the kinds the direct kernel
// runs) holds this bit and a hash of the windows and offsets.
constexpr uint64_t kDirectMarkBit = 0x800;
constexpr uint32_t kRootFieldShift = 20;

std::string windowRankName(int rank) { return "rank " + std::to_string(rank); }

}  // namespace

Result<std::string> DeviceComm::exportWindow(void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (ptr == nullptr || bytes == 0) {
    return invalidArgument("a device window needs a buffer and a size above 0");
  }
  if (!runtime_->isDevicePointer(ptr)) {
    return invalidArgument("the buffer is not device memory of the " + runtime_->name() +
                           " runtime");
  }
  Result<DeviceRuntime::Allocation> allocation = runtime_->allocationOf(ptr);
  if (!allocation.isOk()) return allocation.status();
  const auto* base = static_cast<const uint8_t*>(allocation->base);
  const auto* start = static_cast<const uint8_t*>(ptr);
  const size_t offset = static_cast<size_t>(start - base);
  if (offset > allocation->bytes || bytes > allocation->bytes - offset) {
    return invalidArgument("the " + std::to_string(bytes) +
                           " bytes run past the end of their allocation (" +
                           std::to_string(allocation->bytes - std::min(offset, allocation->bytes)) +
                           " bytes left from the buffer)");
  }
  for (const UserWindow& window : userWindows_) {
    if (start < window.base + window.bytes && window.base < start + bytes) {
      return invalidArgument("the range overlaps a device window already registered");
    }
  }
  Result<std::string> handle = runtime_->exportHandle(allocation->base);
  if (!handle.isOk()) return handle.status();
  return std::string(kWindowEntryMagic) + " " + std::to_string(bytes) + " " +
         std::to_string(offset) + " " + toHex(*handle);
}

Status DeviceComm::addWindow(void* ptr, size_t bytes, const std::vector<std::string>& entries) {
  const int n = config_.nranks;
  if (static_cast<int>(entries.size()) != n) {
    return internalError("device window: " + std::to_string(entries.size()) + " entries for " +
                         std::to_string(n) + " ranks");
  }
  // Every rank parses every entry, so every rank names the same culprit.
  struct Parsed {
    size_t bytes = 0;
    size_t offset = 0;
    std::string handle;
  };
  std::vector<Parsed> parsed(n);
  for (int r = 0; r < n; ++r) {
    std::istringstream in(entries[r]);
    std::string magic, hex, extra;
    if (!(in >> magic >> parsed[r].bytes >> parsed[r].offset >> hex) || (in >> extra) ||
        magic != kWindowEntryMagic || !fromHex(hex, &parsed[r].handle)) {
      return Status(StatusCode::kInvalidArgument,
                    "device window: " + windowRankName(r) +
                        " sent a malformed entry (another collie version?)",
                    r);
    }
    if (parsed[r].bytes != parsed[0].bytes) {
      return Status(StatusCode::kInvalidArgument,
                    "device window: " + windowRankName(r) + " registers " +
                        std::to_string(parsed[r].bytes) + " bytes, " + windowRankName(0) + " " +
                        std::to_string(parsed[0].bytes) + "; every rank registers the same size",
                    r);
    }
  }
  if (parsed[config_.rank].bytes != bytes) {
    return internalError("device window: this rank's entry does not describe its buffer");
  }
  UserWindow window;
  window.base = static_cast<uint8_t*>(ptr);
  window.bytes = bytes;
  window.ranks.assign(n, nullptr);
  window.opened.assign(n, nullptr);
  window.ranks[config_.rank] = window.base;
  Status mapped;
  for (int r = 0; r < n && mapped.isOk(); ++r) {
    if (r == config_.rank) continue;
    Result<void*> opened = runtime_->openHandle(parsed[r].handle);
    if (!opened.isOk()) {
      mapped =
          unsupported("device window: " + windowRankName(r) + "'s window cannot be mapped on " +
                      windowRankName(config_.rank) + " (" + opened.status().message() + ")");
      break;
    }
    window.opened[r] = *opened;
    window.ranks[r] = static_cast<uint8_t*>(*opened) + parsed[r].offset;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!mapped.isOk()) {
    closeWindow(window);
    return mapped;
  }
  window.serial = windowSerial_++;
  userWindows_.push_back(std::move(window));
  return Status();
}

Status DeviceComm::removeWindow(const void* ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = std::find_if(userWindows_.begin(), userWindows_.end(),
                            [ptr](const UserWindow& w) { return w.base == ptr; });
  if (found == userWindows_.end()) {
    return notFound("no device window starts at this address on " + windowRankName(config_.rank));
  }
  // The kernels that used it ended before their streams moved on (the direct kernel's
  // exit waits for every peer); the caller orders the deregistration after them.
  closeWindow(*found);
  userWindows_.erase(found);
  return Status();
}

void DeviceComm::closeWindow(const UserWindow& window) {
  for (void* opened : window.opened) {
    if (opened != nullptr) runtime_->closeHandle(opened);
  }
}

const DeviceComm::UserWindow* DeviceComm::userWindowOf(const void* ptr, size_t bytes) const {
  const auto* start = static_cast<const uint8_t*>(ptr);
  for (const UserWindow& window : userWindows_) {
    if (start >= window.base && start <= window.base + window.bytes &&
        bytes <= static_cast<size_t>(window.base + window.bytes - start)) {
      return &window;
    }
  }
  return nullptr;
}

bool DeviceComm::directStepOf(const CollectiveArgs& args, const void* input, void* output,
                              DeviceDirectStep* step, uint64_t* directMark) const {
  const int n = config_.nranks;
  DeviceBoardKind kind;
  if (args.kind == CollectiveKind::kAllToAll) {
    kind = DeviceBoardKind::kAllToAll;
  } else if (!wholeKindOf(args.kind, &kind)) {
    return false;
  }
  // An all-to-all in place (which the API refuses) would overwrite blocks that peers
  // may still read.
  if (userWindows_.empty() || n < 2 || n > kDeviceMaxDirectRanks || args.count == 0 ||
      args.op == ReduceOp::kPreMulSum || (kind == DeviceBoardKind::kAllToAll && input == output)) {
    return false;
  }
  if (config_.algorithm != Algorithm::kAuto && config_.algorithm != Algorithm::kDirect) {
    return false;
  }
  const size_t es = dataTypeSize(args.dtype);
  const size_t part = args.count * es;
  const bool allToAll = kind == DeviceBoardKind::kAllToAll;
  const size_t inputBytes = kind == DeviceBoardKind::kReduceScatter || allToAll ? n * part : part;
  const size_t outputBytes = kind == DeviceBoardKind::kAllGather || allToAll ? n * part : part;
  // Peers read the inputs of an all-reduce, a reduce-scatter and an all-to-all and write
  // the outputs of an all-reduce and an all-gather: those lie in windows; the rest is
  // this rank's alone (in place, a reduce-scatter's output and an all-gather's input sit
  // at another offset on every rank).
  const bool sharedInput = directPeersReadInputs(kind);
  const bool sharedOutput = directPeersWriteOutputs(kind);
  const UserWindow* in = sharedInput ? userWindowOf(input, inputBytes) : nullptr;
  const UserWindow* out = sharedOutput ? userWindowOf(output, outputBytes) : nullptr;
  if ((sharedInput && in == nullptr) || (sharedOutput && out == nullptr)) return false;
  const size_t inOffset = in != nullptr ? static_cast<const uint8_t*>(input) - in->base : 0;
  const size_t outOffset = out != nullptr ? static_cast<uint8_t*>(output) - out->base : 0;

  step->kind = kind;
  for (int r = 0; r < n; ++r) {
    step->inputs[r] = in != nullptr ? in->ranks[r] + inOffset : nullptr;
    step->outputs[r] = out != nullptr ? out->ranks[r] + outOffset : nullptr;
  }
  step->inputs[config_.rank] = input;
  step->outputs[config_.rank] = output;
  if (kind == DeviceBoardKind::kAllGather || allToAll) {
    step->count = part;  // bytes (per block of an all-to-all)
    step->dtype = DataType::kUint8;
    step->op = ReduceOp::kSum;
  } else {
    step->count = args.count;
    step->dtype = args.dtype;
    step->op = args.op;
    if (args.op == ReduceOp::kAvg) step->divisor = n;
  }
  step->rank = config_.rank;
  step->nranks = n;
  // Shares, blocks and their parts: functions of the collective alone, so every rank
  // agrees.
  uint64_t covered = step->count;
  if (kind == DeviceBoardKind::kAllReduce) {
    step->shareCount = ceilDiv(ceilDiv(step->count, n), 16) * 16;
    covered = std::min<uint64_t>(step->shareCount, step->count);
  }
  const uint64_t elementBytes = dataTypeSize(step->dtype);
  const uint64_t wanted = std::clamp<uint64_t>(
      ceilDiv(covered * elementBytes, kDirectBytesPerBlock), 1, kDeviceMaxDirectBlocks);
  step->perBlock = std::max<uint64_t>(16, ceilDiv(ceilDiv(covered, wanted), 16) * 16);
  step->blocks = static_cast<uint32_t>(std::max<uint64_t>(1, ceilDiv(covered, step->perBlock)));
  // Which windows, where in them: equal on every rank that registered alike and passed
  // its buffers at the same offsets.
  uint64_t h = 1469598103934665603ull;
  for (uint64_t v : {in != nullptr ? in->serial + 1 : 0, static_cast<uint64_t>(inOffset),
                     out != nullptr ? out->serial + 1 : 0, static_cast<uint64_t>(outOffset)}) {
    h = (h ^ v) * 1099511628211ull;
  }
  *directMark = (kDirectMarkBit | (h & (kDirectMarkBit - 1))) << kRootFieldShift;
  return true;
}

Status DeviceComm::launchDirect(DeviceDirectStep step, uint64_t fingerprint, DeviceStream stream) {
  const int n = config_.nranks;
  const size_t flagsAt =
      Region::directFlags(n, config_.slotBytes, config_.boardBytes, config_.ringSliceBytes);
  step.ownBlockFlags = reinterpret_cast<uint64_t*>(region_ + flagsAt);
  step.blockCounter = reinterpret_cast<uint32_t*>(region_ + Region::counter(n));
  step.check = checkWithEveryPeer(fingerprint, flagsAt, step.peerBlockFlags);
  step.profile = reinterpret_cast<unsigned long long*>(profile_);
  return runtime_->launchDirect(step, stream);
}

}  // namespace collie
