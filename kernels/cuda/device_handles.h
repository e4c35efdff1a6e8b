// The kernels' own handles (MSCCL++ style), beside the step handles that the engine
// fills in (core/device/device_steps.h): plain structs that host code passes by value to
// the kernels of kernels/cuda, whose __device__ code reads their fields.
//
// Contract: the step rules of core/device/device_steps.h (DeviceStepSync, the counts on the
// device), which declares the handles that the engine fills in too.
// Thread safety: values.
#pragma once

#include <cstdint>

#include "core/device/device_steps.h"

namespace collie::cuda {

inline constexpr int kMaxSources = 4;       // tree reduce: own data + 2 children
inline constexpr int kMaxDestinations = 4;  // tree broadcast: own output + 2 children
inline constexpr int kMaxTreeChildren = 2;

// The primitive: dsts[d][i] = op(srcs[0][i], srcs[1][i], ...) (left fold in source
// order), divided by divisor when divisor > 0, for i < count.
struct ReduceCopyArgs {
  const void* srcs[kMaxSources] = {};
  void* dsts[kMaxDestinations] = {};
  int32_t nsrcs = 0;  // 1..kMaxSources; 1: a copy (divided when divisor > 0)
  int32_t ndsts = 0;  // 1..kMaxDestinations
  uint64_t count = 0;
  int32_t divisor = 0;
};

// Tree reduce (up): out = op(local, children[0], children[1]) for the nchildren
// children (0..2); `out` is this rank's buffer or its parent's receive slot.
struct TreeReduceStep {
  const void* local = nullptr;
  const void* children[kMaxTreeChildren] = {};
  int32_t nchildren = 0;
  void* out = nullptr;
  uint64_t count = 0;
  int32_t divisor = 0;
  DeviceStepSync sync;
};

// Tree broadcast (down): copy `bytes` from src (this rank's data or the parent's)
// to `out` (may be null or equal src) and to each child's buffer.
struct TreeBroadcastStep {
  const void* src = nullptr;
  void* out = nullptr;
  void* childOut[kMaxTreeChildren] = {};
  int32_t nchildren = 0;
  uint64_t bytes = 0;
  DeviceStepSync sync;
};

}  // namespace collie::cuda
