// Host-side checks shared by the CUDA launch API (cuda_kernels.cu) and the device
// runtimes (cuda_device_runtime.cc, emulation/emulated_runtime.cc): validation of the
// step handles (core/device/device_steps.h) before a launch.
//
// Contract: check*() return InvalidArgument naming the problem, OK otherwise.
// Thread safety: pure functions.
#pragma once

#include <initializer_list>
#include <string>

#include "collie/status.h"
#include "core/device/device_runtime.h"
#include "kernels/cuda/device_handles.h"

namespace collie::cuda {

inline bool nonEmptyHasNull(uint64_t count, std::initializer_list<const void*> pointers) {
  if (count == 0) return false;
  for (const void* p : pointers) {
    if (p == nullptr) return true;
  }
  return false;
}

inline Status checkSync(const DeviceStepSync& sync, const char* what) {
  const bool waits = sync.waitFlags[0] != nullptr || sync.waitFlags[1] != nullptr;
  if (waits && sync.error == nullptr) {
    return invalidArgument(std::string("cuda: ") + what + " waits on a flag but has no error slot");
  }
  const bool posts = sync.postFlags[0] != nullptr || sync.postFlags[1] != nullptr ||
                     sync.advance[0] != nullptr || sync.advance[1] != nullptr;
  if (posts && sync.blockCounter == nullptr) {
    return invalidArgument(std::string("cuda: ") + what +
                           " posts a flag or advances a count but has no block counter");
  }
  if ((sync.recvCount != nullptr || sync.sendCount != nullptr) &&
      (sync.slots == 0 || sync.slotBytes == 0)) {
    return invalidArgument(std::string("cuda: ") + what + " selects slots but has none");
  }
  return Status();
}

inline Status checkRingReduceStep(const DeviceReduceStep& step) {
  if (nonEmptyHasNull(step.count, {step.local, step.incoming}) ||
      (step.count > 0 && step.out == nullptr && step.peerOut == nullptr)) {
    return invalidArgument("cuda: ring reduce-scatter step needs local, incoming and an output");
  }
  return checkSync(step.sync, "ring reduce-scatter step");
}

inline Status checkRingCopyStep(const DeviceCopyStep& step) {
  if (nonEmptyHasNull(step.bytes, {step.src}) ||
      (step.bytes > 0 && step.out == nullptr && step.peerOut == nullptr)) {
    return invalidArgument("cuda: ring all-gather step needs a source and an output");
  }
  return checkSync(step.sync, "ring all-gather step");
}

inline Status checkFingerprintCheck(const DeviceFingerprintCheck& check) {
  if (check.npeers < 0 || check.npeers > kDeviceMaxCheckPeers || check.error == nullptr ||
      check.peerFingerprint == nullptr ||
      (check.ownSlot != nullptr && check.ownPosted == nullptr)) {
    return invalidArgument("cuda: fingerprint check needs 0.." +
                           std::to_string(kDeviceMaxCheckPeers) +
                           " peers, an error slot and a fingerprint slot");
  }
  for (int i = 0; i < check.npeers; ++i) {
    if (check.peerSlot[i] == nullptr || check.peerPosted[i] == nullptr) {
      return invalidArgument("cuda: fingerprint check has a null peer flag");
    }
  }
  return Status();
}

// A board step (DeviceBoardStep): its kind, ranks, boards, blocks and flags, and that
// the board's slot holds what this rank publishes.
inline Status checkBoardStep(const DeviceBoardStep& step) {
  const std::string what = "cuda: board step ";
  const int n = step.nranks;
  if (n < 2 || n > kDeviceMaxBoardRanks || step.rank < 0 || step.rank >= n) {
    return invalidArgument(what + "needs 2.." + std::to_string(kDeviceMaxBoardRanks) +
                           " ranks and a rank among them");
  }
  if (step.kind != DeviceBoardKind::kAllReduce && step.kind != DeviceBoardKind::kReduceScatter &&
      step.kind != DeviceBoardKind::kAllGather) {
    return invalidArgument(what + "has an unknown kind");
  }
  if (step.blocks < 1 || step.blocks > static_cast<uint32_t>(kDeviceMaxBoardBlocks) ||
      step.perBlock == 0 || step.perBlock % 16 != 0 || step.perBlock * step.blocks < step.count) {
    return invalidArgument(what + "needs 1.." + std::to_string(kDeviceMaxBoardBlocks) +
                           " blocks of a multiple of 16 elements covering the count");
  }
  const uint64_t parts = step.kind == DeviceBoardKind::kReduceScatter ? n : 1;
  const uint64_t published = parts * step.count * dataTypeSize(step.dtype);
  if (published > step.slotBytes) {
    return invalidArgument(what + "publishes " + std::to_string(published) +
                           " bytes on a board slot of " + std::to_string(step.slotBytes));
  }
  for (int r = 0; r < n; ++r) {
    if (step.boards[r] == nullptr) return invalidArgument(what + "has a null board");
  }
  if (nonEmptyHasNull(step.count, {step.input, step.output})) {
    return invalidArgument(what + "has a null buffer");
  }
  const DeviceFingerprintCheck& check = step.check;
  if (check.sequence == nullptr || check.ownSlot == nullptr || step.blockCounter == nullptr ||
      check.npeers != n - 1) {
    return invalidArgument(what +
                           "needs the sequence number, this rank's check flags, a block "
                           "counter and every peer in one check");
  }
  if (step.blocks > 1) {
    if (step.ownBlockFlags == nullptr) return invalidArgument(what + "has no block flags");
    for (int i = 0; i < check.npeers; ++i) {
      if (step.peerBlockFlags[i] == nullptr) return invalidArgument(what + "has a null peer flag");
    }
  }
  return checkFingerprintCheck(check);
}

// A direct step (DeviceDirectStep): its kind, ranks, every rank's buffers, shares,
// blocks and flags.
inline Status checkDirectStep(const DeviceDirectStep& step) {
  const std::string what = "cuda: direct step ";
  const int n = step.nranks;
  if (n < 2 || n > kDeviceMaxDirectRanks || step.rank < 0 || step.rank >= n) {
    return invalidArgument(what + "needs 2.." + std::to_string(kDeviceMaxDirectRanks) +
                           " ranks and a rank among them");
  }
  if (step.kind != DeviceBoardKind::kAllReduce && step.kind != DeviceBoardKind::kReduceScatter &&
      step.kind != DeviceBoardKind::kAllGather && step.kind != DeviceBoardKind::kAllToAll) {
    return invalidArgument(what + "has an unknown kind");
  }
  // The elements one rank's blocks cover: its share (all-reduce) or its part.
  const uint64_t covered = step.kind == DeviceBoardKind::kAllReduce
                               ? (step.shareCount < step.count ? step.shareCount : step.count)
                               : step.count;
  if (step.kind == DeviceBoardKind::kAllReduce &&
      (step.shareCount % 16 != 0 || step.shareCount * static_cast<uint64_t>(n) < step.count)) {
    return invalidArgument(what + "needs shares of a multiple of 16 elements covering the count");
  }
  if (step.blocks < 1 || step.blocks > static_cast<uint32_t>(kDeviceMaxDirectBlocks) ||
      step.perBlock == 0 || step.perBlock % 16 != 0 || step.perBlock * step.blocks < covered) {
    return invalidArgument(what + "needs 1.." + std::to_string(kDeviceMaxDirectBlocks) +
                           " blocks of a multiple of 16 elements covering its share");
  }
  // Every rank's inputs (all-reduce, reduce-scatter, all-to-all) and outputs
  // (all-reduce, all-gather); this rank's own in any case.
  const bool sharedInput = directPeersReadInputs(step.kind);
  const bool sharedOutput = directPeersWriteOutputs(step.kind);
  for (int r = 0; r < n; ++r) {
    if ((sharedInput || r == step.rank) && nonEmptyHasNull(step.count, {step.inputs[r]})) {
      return invalidArgument(what + "has a null input of rank " + std::to_string(r));
    }
    if ((sharedOutput || r == step.rank) && nonEmptyHasNull(step.count, {step.outputs[r]})) {
      return invalidArgument(what + "has a null output of rank " + std::to_string(r));
    }
  }
  if (step.kind == DeviceBoardKind::kAllToAll && step.count > 0 &&
      step.inputs[step.rank] == step.outputs[step.rank]) {
    return invalidArgument(what + "runs an all-to-all out of place only");
  }
  const DeviceFingerprintCheck& check = step.check;
  if (check.sequence == nullptr || check.ownSlot == nullptr || step.blockCounter == nullptr ||
      step.ownBlockFlags == nullptr || check.npeers != n - 1) {
    return invalidArgument(what +
                           "needs the sequence number, this rank's check and block flags, a "
                           "block counter and every peer in one check");
  }
  for (int i = 0; i < check.npeers; ++i) {
    if (step.peerBlockFlags[i] == nullptr) return invalidArgument(what + "has a null peer flag");
  }
  return checkFingerprintCheck(check);
}

// A ring program (DeviceRingProgram): its steps, grid, slices, FIFOs and counts.
inline Status checkRingProgram(const DeviceRingProgram& p) {
  const std::string what = "cuda: ring program ";
  if (p.nsteps < 0 || p.nsteps > kDeviceMaxRingSteps) {
    return invalidArgument(what + "needs 0.." + std::to_string(kDeviceMaxRingSteps) + " steps");
  }
  if (p.blocks < 1 || p.blocks > static_cast<uint32_t>(kDeviceMaxRingBlocks) || p.sliceBytes == 0 ||
      p.sliceBytes % kDeviceRingSplitBytes != 0) {
    return invalidArgument(what + "needs 1.." + std::to_string(kDeviceMaxRingBlocks) +
                           " blocks and slices of a multiple of " +
                           std::to_string(kDeviceRingSplitBytes) + " bytes");
  }
  if (p.error == nullptr || p.sent == nullptr || p.consumed == nullptr) {
    return invalidArgument(what + "needs an error slot and this rank's counts");
  }
  const size_t es = dataTypeSize(p.dtype);
  for (int k = 0; k < p.nsteps; ++k) {
    const DeviceRingStep& step = p.steps[k];
    const std::string which = what + "step " + std::to_string(k) + " ";
    if (es == 0 || step.bytes % es != 0) {
      return invalidArgument(which + "moves a partial element");
    }
    const bool receives = ringStepReceives(step.op);
    const bool sends = ringStepSends(step.op);
    const bool reads = ringStepReadsSrc(step.op);
    if (static_cast<uint8_t>(step.op) > static_cast<uint8_t>(DeviceRingOp::kCopy)) {
      return invalidArgument(which + "has an unknown op");
    }
    if (step.bytes == 0) continue;
    if ((receives && (p.recvFifo == nullptr || p.prevSent == nullptr || p.prevRank < 0)) ||
        (sends && (p.sendFifo == nullptr || p.nextConsumed == nullptr || p.nextRank < 0))) {
      return invalidArgument(which + "moves a message without its neighbour's FIFO and counts");
    }
    if ((reads && step.src == nullptr) ||
        ((step.op == DeviceRingOp::kCopy || step.op == DeviceRingOp::kRecv ||
          step.op == DeviceRingOp::kRecvReduceCopy) &&
         step.dst == nullptr)) {
      return invalidArgument(which + "has a null buffer");
    }
  }
  return Status();
}

}  // namespace collie::cuda
