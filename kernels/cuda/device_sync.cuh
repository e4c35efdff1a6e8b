// Device-side step synchronisation through flags in device memory (DeviceStepSync of
// device_handles.h): acquire loads and release stores at system scope, a global
// nanosecond timer for deadlines, and the wait / post protocol.
//
// Contract: stepWait() and stepPost() must be called by every thread of the block
// (they contain block barriers). stepWait() returns false on every thread when the
// wait timed out (the error was recorded); the caller then skips the step and must
// not call stepPost().
// Thread safety: device code; flags are shared between GPUs (system scope).
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_compat.h"
#include "kernels/cuda/device_handles.h"

#if !defined(__CUDA_ARCH__)
#include <atomic>
#include <chrono>
#include <thread>
#endif

namespace collie::cuda {

__device__ __forceinline__ uint64_t loadAcquireSys(const uint64_t* flag) {
#if defined(__CUDA_ARCH__)
  uint64_t value;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(flag) : "memory");
  return value;
#else
  return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(flag)).load(std::memory_order_acquire);
#endif
}

__device__ __forceinline__ void storeReleaseSys(uint64_t* flag, uint64_t value) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(flag), "l"(value) : "memory");
#else
  std::atomic_ref<uint64_t>(*flag).store(value, std::memory_order_release);
#endif
}

__device__ __forceinline__ uint64_t globalTimerNs() {
#if defined(__CUDA_ARCH__)
  uint64_t ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
#else
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
#endif
}

__device__ __forceinline__ bool isFirstThreadOfBlock() {
  return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
}

// Backs off between polls: frees the SM's issue slots (the host: the CPU).
__device__ __forceinline__ void spinPause() {
#if defined(__CUDA_ARCH__)
  __nanosleep(64);
#else
  std::this_thread::yield();
#endif
}

__device__ __forceinline__ int32_t loadErrorWord(const int32_t* error) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const volatile int32_t*>(error);
#else
  return std::atomic_ref<int32_t>(*const_cast<int32_t*>(error)).load(std::memory_order_acquire);
#endif
}

// The error word may live in mapped host memory, where PCIe offers no atomics: a
// plain store (any failing block's code wins) and a system fence.
__device__ __forceinline__ void storeErrorWord(int32_t* error, int32_t code) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<volatile int32_t*>(error) = code;
  __threadfence_system();
#else
  std::atomic_ref<int32_t>(*error).store(code, std::memory_order_release);
#endif
}

// How many flag polls pass between two reads of the error word while a wait spins
// (mapped host memory: a read crosses PCIe, so not on every poll). A code stored
// there while a kernel waits (the host's abort, another step's timeout) ends the wait
// within about this many polls.
inline constexpr uint32_t kErrorPollInterval = 256;

// True when the error word holds a code; read every kErrorPollInterval-th `poll`.
__device__ __forceinline__ bool failedMeanwhile(const int32_t* error, uint32_t poll) {
  return error != nullptr && poll % kErrorPollInterval == kErrorPollInterval - 1 &&
         loadErrorWord(error) != 0;
}

// Thread 0 checks the error word and polls the flags; the block learns the outcome
// from the barrier.
__device__ __forceinline__ bool stepWait(const DeviceStepSync& sync) {
  int ok = 1;
  if (isFirstThreadOfBlock()) {
    const uint64_t start = globalTimerNs();
    if (sync.error != nullptr && loadErrorWord(sync.error) != 0) ok = 0;
    const uint64_t timeout = sync.timeoutNs != 0 ? sync.timeoutNs : kDefaultStepTimeoutNs;
    for (int i = 0; i < kDeviceMaxWaits && ok; ++i) {
      if (sync.waitFlags[i] == nullptr) continue;
      uint64_t target = sync.waitValues[i];
      if (sync.waitBase[i] != nullptr) {
        const int64_t relative =
            static_cast<int64_t>(*sync.waitBase[i]) + static_cast<int64_t>(sync.waitValues[i]);
        if (relative <= 0) continue;  // nothing to wait for yet (the first slots are free)
        target = static_cast<uint64_t>(relative);
      }
      for (uint32_t poll = 0; loadAcquireSys(sync.waitFlags[i]) < target; ++poll) {
        if (failedMeanwhile(sync.error, poll)) {
          ok = 0;
          break;
        }
        if (globalTimerNs() - start > timeout) {
          storeErrorWord(sync.error,
                         sync.waitErrors[i] != 0 ? sync.waitErrors[i] : kStepErrorTimeout);
          ok = 0;
          break;
        }
        spinPause();
      }
    }
    if (sync.profile != nullptr && blockIdx.x == 0) {
      atomicAdd(&sync.profile[0], static_cast<unsigned long long>(globalTimerNs() - start));
      atomicAdd(&sync.profile[1], 1ull);
    }
  }
  return __syncthreads_and(ok) != 0;
}

// The address of the slot that `count` messages select: slot 0's address `at` plus
// (*count % slots) * slotBytes; `at` itself without a count.
__device__ __forceinline__ uint64_t slotOffset(const uint64_t* count, const DeviceStepSync& sync) {
  return count != nullptr && sync.slots != 0 ? (*count % sync.slots) * sync.slotBytes : 0;
}
__device__ __forceinline__ const void* slotAt(const void* at, const uint64_t* count,
                                              const DeviceStepSync& sync) {
  return at == nullptr ? at : static_cast<const uint8_t*>(at) + slotOffset(count, sync);
}
__device__ __forceinline__ void* slotAt(void* at, const uint64_t* count,
                                        const DeviceStepSync& sync) {
  return at == nullptr ? at : static_cast<uint8_t*>(at) + slotOffset(count, sync);
}

// Thread 0 of a block that finished its work: counts the block in `counter` (zero at
// launch) and tells whether it was the grid's last, which then rearms the counter for
// the next launch on the stream.
__device__ __forceinline__ bool lastBlockToFinish(uint32_t* counter) {
  if (atomicAdd(counter, 1u) + 1u != gridDim.x) return false;
  atomicExch(counter, 0u);
  return true;
}

// Every thread fences its own stores, the block meets, and the last block to finish
// publishes the flags, then advances the device-held counts (and rearms the block
// counter for the next launch). Every block read the counts before it finished, so the
// last block's advance comes after every read of this launch.
__device__ __forceinline__ void stepPost(const DeviceStepSync& sync) {
  if (sync.postFlags[0] == nullptr && sync.postFlags[1] == nullptr && sync.advance[0] == nullptr &&
      sync.advance[1] == nullptr) {
    return;
  }
  __threadfence_system();
  __syncthreads();
  if (isFirstThreadOfBlock()) {
    if (lastBlockToFinish(sync.blockCounter)) {
      __threadfence_system();
      for (int j = 0; j < kDeviceMaxPosts; ++j) {
        if (sync.postFlags[j] == nullptr) continue;
        const uint64_t base = sync.postBase[j] != nullptr ? *sync.postBase[j] : 0;
        storeReleaseSys(sync.postFlags[j], base + sync.postValues[j]);
      }
      for (int k = 0; k < kDeviceMaxPosts; ++k) {
        if (sync.advance[k] != nullptr) *sync.advance[k] += 1;
      }
      __threadfence();
    }
  }
}

}  // namespace collie::cuda
