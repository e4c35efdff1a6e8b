// The ring program kernel: every step of one rank's ring-shaped schedule in one launch
// (DeviceRingProgram in core/device/device_steps.h gives the contract: how a step's
// bytes split over blocks and pieces, the per-block FIFOs and their counts). Block b
// pipelines its part of every step through its own FIFO to the next rank and waits
// only for block b of its two neighbours, so no block of a grid waits for another
// block of the same grid (the host emulation runs a grid's blocks one after the other).
// Thread safety: device code.
#pragma once

#include "kernels/cuda/collective_kernels.cuh"

namespace collie::cuda {

// Block b's part of a step of `bytes` bytes: [begin, begin + count) bytes of the step.
struct RingPart {
  uint64_t begin = 0;
  uint64_t count = 0;
};

__device__ __forceinline__ RingPart ringBlockPart(uint64_t bytes, uint32_t blocks, uint32_t b) {
  const uint64_t units = (bytes + kDeviceRingSplitBytes - 1) / kDeviceRingSplitBytes;
  const uint64_t per = (units + blocks - 1) / blocks * kDeviceRingSplitBytes;
  const uint64_t begin = static_cast<uint64_t>(b) * per < bytes ? b * per : bytes;
  return RingPart{begin, bytes - begin < per ? bytes - begin : per};
}

// Piece i of block b's part (empty once past its end).
__device__ __forceinline__ RingPart ringPiece(const RingPart& part, uint64_t sliceBytes,
                                              uint64_t i) {
  const uint64_t at = i * sliceBytes < part.count ? i * sliceBytes : part.count;
  const uint64_t left = part.count - at;
  return RingPart{part.begin + at, left < sliceBytes ? left : sliceBytes};
}

// Thread 0: waits until *flag >= target; false when it timed out (the code naming
// `peer` is stored) or the error word was set meanwhile.
__device__ __forceinline__ bool ringWait(const DeviceRingProgram& p, const uint64_t* flag,
                                         uint64_t target, int32_t peer, uint64_t start) {
  const uint64_t timeout = p.timeoutNs != 0 ? p.timeoutNs : kDefaultStepTimeoutNs;
  for (uint32_t poll = 0; loadAcquireSys(flag) < target; ++poll) {
    if (failedMeanwhile(p.error, poll)) return false;
    if (globalTimerNs() - start > timeout) {
      storeErrorWord(p.error, p.timeoutBase + peer);
      return false;
    }
    spinPause();
  }
  return true;
}

// A kernel's parameters take at most 4 KiB. __grid_constant__: the steps are read in
// place from the parameter space (indexed at run time, a by-value copy would go to every
// thread's local memory).
static_assert(sizeof(DeviceRingProgram) <= 4096, "the ring program is a kernel parameter");

template <typename T, typename Op>
__global__ void ringProgramKernel(const __grid_constant__ DeviceRingProgram p) {
  const uint32_t b = blockIdx.x;
  const size_t flagAt = static_cast<size_t>(b) * kDeviceRingFlagStride;
  const size_t fifoAt = static_cast<size_t>(b) * kDeviceRingSlots;
  // Every thread counts the block's messages; they start from this rank's own posts.
  uint64_t sent = loadAcquireSys(p.sent + flagAt);
  uint64_t consumed = loadAcquireSys(p.consumed + flagAt);
  int ok = isFirstThreadOfBlock() ? loadErrorWord(p.error) == 0 : 1;
  // (The barrier also orders every thread's reads of the counts before thread 0's posts.)
  if (!__syncthreads_and(ok)) return;

  uint64_t pieces = 0;
  for (int k = 0; k < p.nsteps && k < kDeviceMaxRingSteps; ++k) {
    const uint64_t count = ringBlockPart(p.steps[k].bytes, p.blocks, b).count;
    const uint64_t n = (count + p.sliceBytes - 1) / p.sliceBytes;
    pieces = n > pieces ? n : pieces;
  }
  uint64_t waitedNs = 0;
  for (uint64_t i = 0; i < pieces; ++i) {
    for (int k = 0; k < p.nsteps && k < kDeviceMaxRingSteps; ++k) {
      const DeviceRingStep& step = p.steps[k];
      const RingPart piece = ringPiece(ringBlockPart(step.bytes, p.blocks, b), p.sliceBytes, i);
      if (piece.count == 0) continue;
      const bool receives = ringStepReceives(step.op);
      const bool sends = ringStepSends(step.op);
      ok = 1;
      if (isFirstThreadOfBlock() && (receives || sends)) {
        const uint64_t start = globalTimerNs();
        if (receives) ok = ringWait(p, p.prevSent + flagAt, consumed + 1, p.prevRank, start);
        if (ok && sends && sent + 1 > static_cast<uint64_t>(kDeviceRingSlots)) {
          ok = ringWait(p, p.nextConsumed + flagAt, sent + 1 - kDeviceRingSlots, p.nextRank, start);
        }
        waitedNs += globalTimerNs() - start;
      }
      if (!__syncthreads_and(ok)) return;

      // Only the pointers the step uses (no arithmetic on null ones).
      const uint8_t* incoming = receives ? static_cast<const uint8_t*>(p.recvFifo) +
                                               (fifoAt + consumed % kDeviceRingSlots) * p.sliceBytes
                                         : nullptr;
      uint8_t* outgoing = sends ? static_cast<uint8_t*>(p.sendFifo) +
                                      (fifoAt + sent % kDeviceRingSlots) * p.sliceBytes
                                : nullptr;
      const uint8_t* src =
          step.src != nullptr ? static_cast<const uint8_t*>(step.src) + piece.begin : nullptr;
      uint8_t* dst = step.dst != nullptr ? static_cast<uint8_t*>(step.dst) + piece.begin : nullptr;
      ReduceCopyArgs args;
      args.count = piece.count / sizeof(T);
      args.divisor = step.divisor;
      switch (step.op) {
        case DeviceRingOp::kSend:
          args.srcs[0] = src;
          args.nsrcs = 1;
          setDestinations(args, outgoing, nullptr);
          break;
        case DeviceRingOp::kRecv:
          args.srcs[0] = incoming;
          args.nsrcs = 1;
          setDestinations(args, dst, nullptr);
          break;
        case DeviceRingOp::kRecvReduceSend:
        case DeviceRingOp::kRecvReduceCopy:
          args.srcs[0] = step.incomingFirst ? static_cast<const void*>(incoming) : src;
          args.srcs[1] = step.incomingFirst ? static_cast<const void*>(src) : incoming;
          args.nsrcs = 2;
          setDestinations(args, dst, step.op == DeviceRingOp::kRecvReduceSend ? outgoing : nullptr);
          break;
        case DeviceRingOp::kRecvCopySend:
          args.srcs[0] = incoming;
          args.nsrcs = 1;
          setDestinations(args, dst, outgoing);
          break;
        case DeviceRingOp::kCopy:
          args.srcs[0] = src;
          args.nsrcs = 1;
          setDestinations(args, dst, nullptr);
          break;
      }
      if (args.ndsts > 0) reduceCopy<T, Op>(args, threadIdx.x, blockDim.x);
      if (!receives && !sends) continue;
      // Publish: every thread's stores (and reads of the slot) are done before the posts.
      __threadfence_system();
      __syncthreads();
      if (receives) ++consumed;
      if (sends) ++sent;
      if (isFirstThreadOfBlock()) {
        if (receives) storeReleaseSys(p.consumed + flagAt, consumed);
        if (sends) storeReleaseSys(p.sent + flagAt, sent);
      }
    }
  }
  if (p.profile != nullptr && b == 0 && isFirstThreadOfBlock()) {
    atomicAdd(&p.profile[0], static_cast<unsigned long long>(waitedNs));
    atomicAdd(&p.profile[1], 1ull);
  }
}

}  // namespace collie::cuda
