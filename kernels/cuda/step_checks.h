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

}  // namespace collie::cuda
