// Host emulation of the CUDA built-ins the kernels in kernels/cuda use, so the same
// kernel source compiles with the host compiler and runs on the CPU (tests/emulation).
//
// Contract:
//   - Only active without __CUDACC__; under nvcc this header must not be included
//     (kernels/cuda/cuda_compat.h picks the real toolkit headers instead).
//   - threadIdx/blockIdx/blockDim/gridDim are thread_local and set by the launcher
//     (emulated_launch.h) for each emulated thread before it runs the kernel.
//   - __syncthreads() waits on the barrier of the current block. Blocks of a grid run
//     one after another; the threads of a block run concurrently as real threads. So
//     `__shared__` (a function-local static here) is shared by the threads of the
//     running block only, and kernels must not wait for another block of the same
//     grid (they may wait for another grid launched from another host thread).
//   - Atomics and fences map onto std::atomic_ref and std::atomic_thread_fence with
//     sequentially consistent ordering (at least as strong as the device's).
//   - Vector types: uint4/int4/float4/uint2/ulonglong2 with make_* helpers, aligned
//     like CUDA's (16 bytes for the 4 x 32-bit ones).
// Thread safety: the thread_local state is per emulated thread.
#pragma once

#if defined(__CUDACC__)
#error "cuda_emulation.h is for host compilers; nvcc uses the CUDA toolkit headers"
#endif

#include <atomic>
#include <barrier>
#include <cstdint>

#define __global__
#define __device__
#define __host__
#define __shared__ static
// A hint only: nvcc's forced inlining keeps the kernels' small arrays in registers, which
// the emulation does not need, and forcing it on the host compiler doubled the compile
// time of every unit that instantiates the kernels (emulated_runtime.cc: 55 s against
// 28 s at -O2; 154 s under ASan).
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) ulonglong2 {
  unsigned long long x, y;
};

inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline ulonglong2 make_ulonglong2(unsigned long long x, unsigned long long y) { return {x, y}; }

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

namespace collie::emulation {
// The barrier of the block the calling emulated thread belongs to.
inline thread_local std::barrier<>* currentBlockBarrier = nullptr;
}  // namespace collie::emulation

inline void __syncthreads() { collie::emulation::currentBlockBarrier->arrive_and_wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }

template <typename T>
inline T atomicAdd(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value);
}
template <typename T>
inline T atomicExch(T* address, T value) {
  return std::atomic_ref<T>(*address).exchange(value);
}
template <typename T>
inline T atomicCAS(T* address, T compare, T value) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, value);
  return compare;
}
template <typename T>
inline T atomicMax(T* address, T value) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (old < value && !ref.compare_exchange_weak(old, value)) {
  }
  return old;
}
