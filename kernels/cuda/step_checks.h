// Host-side checks and conversions shared by the CUDA launch API (cuda_kernels.cu)
// and the device runtimes (cuda_device_runtime.cc, emulation/emulated_runtime.cc):
// validation of step handles before a launch, and the mapping of core's
// DeviceReduceStep / DeviceCopyStep (core/device/device_runtime.h) onto the kernels'
// RingReduceStep / RingCopyStep.
//
// Contract: check*() return InvalidArgument naming the problem, OK otherwise;
// to*() copy fields one to one (no validation).
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

inline Status checkSync(const StepSync& sync, const char* what) {
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

inline Status checkRingReduceStep(const RingReduceStep& step) {
  if (nonEmptyHasNull(step.count, {step.local, step.incoming}) ||
      (step.count > 0 && step.out == nullptr && step.peerOut == nullptr)) {
    return invalidArgument("cuda: ring reduce-scatter step needs local, incoming and an output");
  }
  return checkSync(step.sync, "ring reduce-scatter step");
}

inline Status checkRingCopyStep(const RingCopyStep& step) {
  if (nonEmptyHasNull(step.bytes, {step.src}) ||
      (step.bytes > 0 && step.out == nullptr && step.peerOut == nullptr)) {
    return invalidArgument("cuda: ring all-gather step needs a source and an output");
  }
  return checkSync(step.sync, "ring all-gather step");
}

inline StepSync toStepSync(const DeviceStepSync& in) {
  static_assert(kDeviceMaxWaits == kMaxStepWaits && kDeviceMaxPosts == kMaxStepPosts);
  StepSync out;
  for (int i = 0; i < kMaxStepWaits; ++i) {
    out.waitFlags[i] = in.waits[i].flag;
    out.waitValues[i] = in.waits[i].value;
    out.waitErrors[i] = in.waits[i].errorCode;
    out.waitBase[i] = in.waits[i].base;
  }
  for (int j = 0; j < kMaxStepPosts; ++j) {
    out.postFlags[j] = in.posts[j].flag;
    out.postValues[j] = in.posts[j].value;
    out.postBase[j] = in.posts[j].base;
    out.advance[j] = in.advance[j];
  }
  out.recvCount = in.recvCount;
  out.sendCount = in.sendCount;
  out.slotBytes = in.slotBytes;
  out.slots = in.slots;
  out.blockCounter = in.blockCounter;
  out.error = in.error;
  out.timeoutNs = in.timeoutNs;
  out.profile = reinterpret_cast<unsigned long long*>(in.profile);
  return out;
}

inline RingReduceStep toRingReduceStep(const DeviceReduceStep& in) {
  RingReduceStep out;
  out.local = in.local;
  out.incoming = in.incoming;
  out.out = in.out;
  out.peerOut = in.peerOut;
  out.count = in.count;
  out.divisor = in.divisor;
  out.sync = toStepSync(in.sync);
  return out;
}

inline ScaleArgs toScaleArgs(const DeviceScaleStep& in) {
  ScaleArgs out;
  out.src = in.src;
  out.dst = in.dst;
  out.count = in.count;
  out.factor = in.factor;
  out.factorAt = in.factorAt;
  return out;
}

inline RingCopyStep toRingCopyStep(const DeviceCopyStep& in) {
  RingCopyStep out;
  out.src = in.src;
  out.out = in.out;
  out.peerOut = in.peerOut;
  out.bytes = in.bytes;
  out.sync = toStepSync(in.sync);
  return out;
}

inline Status checkFingerprintCheck(const FingerprintCheck& check) {
  if (check.npeers < 0 || check.npeers > kMaxCheckPeers || check.error == nullptr ||
      check.peerFingerprint == nullptr ||
      (check.ownSlot != nullptr && check.ownPosted == nullptr)) {
    return invalidArgument("cuda: fingerprint check needs 0.." + std::to_string(kMaxCheckPeers) +
                           " peers, an error slot and a fingerprint slot");
  }
  for (int i = 0; i < check.npeers; ++i) {
    if (check.peerSlot[i] == nullptr || check.peerPosted[i] == nullptr) {
      return invalidArgument("cuda: fingerprint check has a null peer flag");
    }
  }
  return Status();
}

inline FingerprintCheck toFingerprintCheck(const DeviceFingerprintCheck& in) {
  static_assert(kDeviceMaxCheckPeers == kMaxCheckPeers);
  FingerprintCheck out;
  out.ownSlot = in.ownSlot;
  out.ownPosted = in.ownPosted;
  for (int i = 0; i < kMaxCheckPeers; ++i) {
    out.peerSlot[i] = in.peerSlot[i];
    out.peerPosted[i] = in.peerPosted[i];
    out.peerRank[i] = in.peerRank[i];
  }
  out.npeers = in.npeers;
  out.fingerprint = in.fingerprint;
  out.posted = in.posted;
  out.error = in.error;
  out.peerFingerprint = in.peerFingerprint;
  out.ownFingerprint = in.ownFingerprint;
  out.timeoutNs = in.timeoutNs;
  out.timeoutBase = in.timeoutBase;
  out.mismatchBase = in.mismatchBase;
  out.sequence = in.sequence;
  out.advanceSequence = in.advanceSequence;
  out.sequenceShift = in.sequenceShift;
  return out;
}

}  // namespace collie::cuda
