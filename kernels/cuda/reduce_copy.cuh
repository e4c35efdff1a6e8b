// The reduce-copy primitive every kernel of kernels/cuda is built on: read N sources,
// fold them with an op of kernels/common/ops.h, write the result to M destinations
// (ReduceCopyArgs in device_handles.h gives the exact contract).
//
// Layout of one call over `count` elements:
//   - all pointers congruent modulo 16 and element-aligned: a scalar head up to the
//     first 16-byte boundary, a body of 16-byte packs (uint4 loads and stores, which
//     nvcc emits as ld/st .v4.u32; tests/cuda/check_ptx_vectors.sh checks it), four
//     packs per thread per round (reduceCopyBody), a scalar tail;
//   - element-aligned but not congruent: element by element;
//   - some pointer not element-aligned: element by element through byte loads.
// Every part is a grid-stride loop over (thread, nthreads), so any grid covers any
// count, and the caller chooses the grid for bandwidth only.
// Thread safety: device code; threads touch disjoint elements.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/common/ops.h"
#include "kernels/cuda/cuda_compat.h"
#include "kernels/cuda/device_handles.h"

namespace collie::cuda {

inline constexpr size_t kPackBytes = 16;

// A copy "op": used by the copy kernels, whose single source is never combined.
template <typename T>
struct CopyOp {
  __host__ __device__ __forceinline__ T operator()(T a, T) const { return a; }
};

template <typename T>
union Pack {
  uint4 vector;
  T elements[kPackBytes / sizeof(T)];
};

// 16-byte accesses with the streaming cache hint (evict first; ld/st.global.cs) on the
// device; plain accesses in the host emulation, where the hint has no meaning.
__device__ __forceinline__ uint4 loadStreaming(const uint4* p) {
#if defined(__CUDA_ARCH__)
  return __ldcs(p);
#else
  return *p;
#endif
}

__device__ __forceinline__ void storeStreaming(uint4* p, uint4 value) {
#if defined(__CUDA_ARCH__)
  __stcs(p, value);
#else
  *p = value;
#endif
}

template <typename T>
__device__ __forceinline__ T loadBytes(const void* p) {
  union {
    T value;
    unsigned char bytes[sizeof(T)];
  } u;
  const unsigned char* src = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < sizeof(T); ++i) u.bytes[i] = src[i];
  return u.value;
}

template <typename T>
__device__ __forceinline__ void storeBytes(void* p, T value) {
  union {
    T value;
    unsigned char bytes[sizeof(T)];
  } u;
  u.value = value;
  unsigned char* dst = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < sizeof(T); ++i) dst[i] = u.bytes[i];
}

// `count` elements whose first one sits `phase` bytes past a 16-byte boundary: `head`
// elements up to the boundary, `packs` 16-byte packs, then the tail from `tailBegin`.
// The head and tail together are `loose` elements; loose element j is element index(j).
struct PackSplit {
  uint64_t head = 0;
  uint64_t packs = 0;
  uint64_t tailBegin = 0;
  uint64_t loose = 0;
  __device__ __forceinline__ uint64_t index(uint64_t j) const {
    return j < head ? j : tailBegin + (j - head);
  }
};

template <typename T>
__device__ __forceinline__ PackSplit splitIntoPacks(uint64_t count, uintptr_t phase) {
  constexpr uint64_t kPerPack = kPackBytes / sizeof(T);
  PackSplit split;
  split.head = ((kPackBytes - phase) % kPackBytes) / sizeof(T);
  if (split.head > count) split.head = count;
  split.packs = (count - split.head) / kPerPack;
  split.tailBegin = split.head + split.packs * kPerPack;
  split.loose = split.head + (count - split.tailBegin);
  return split;
}

// Element i of every source folded, divided, and stored to every destination. The
// loops run over every slot of the argument arrays with a guard on the count, so that
// each index is a constant once unrolled: a loop bounded by the count alone indexes
// the arrays at run time, which puts them in local memory.
template <typename T, typename Op, bool kByteWise>
__device__ __forceinline__ void reduceCopyElement(const ReduceCopyArgs& args, uint64_t i) {
  const size_t offset = static_cast<size_t>(i) * sizeof(T);
  auto load = [offset](const void* base) {
    const void* p = static_cast<const unsigned char*>(base) + offset;
    if constexpr (kByteWise) {
      return loadBytes<T>(p);
    } else {
      return *static_cast<const T*>(p);
    }
  };
  T acc = load(args.srcs[0]);
  COLLIE_UNROLL
  for (int s = 1; s < kMaxSources; ++s) {
    if (s >= args.nsrcs) break;
    acc = Op()(acc, load(args.srcs[s]));
  }
  if (args.divisor > 0) acc = divideBy(acc, args.divisor);
  COLLIE_UNROLL
  for (int d = 0; d < kMaxDestinations; ++d) {
    if (d >= args.ndsts) break;
    void* p = static_cast<unsigned char*>(args.dsts[d]) + offset;
    if constexpr (kByteWise) {
      storeBytes<T>(p, acc);
    } else {
      *static_cast<T*>(p) = acc;
    }
  }
}

// Packs [0, packs) of the body, kUnroll of them per thread per round: every load of a
// round is issued before the first use, so each thread keeps up to kUnroll x nsrcs
// 16-byte loads in flight (one pack at a time left HBM idle: 15% of a device copy on
// an H200). The packs of one round are nthreads apart, so a warp's accesses stay
// coalesced; the last round is predicated pack by pack rather than run one pack at a
// time, which would leave most threads waiting out several memory latencies in a row.
// The source and destination pointers are held in registers, every array index a
// constant after unrolling (see reduceCopyElement): with the arrays in local memory
// the H200 ran a 2-source reduce-copy of 16 MiB at 0.66-0.69x of this loop's speed.
template <typename T, typename Op, int kUnroll>
__device__ __forceinline__ void reduceCopyBody(const ReduceCopyArgs& args, size_t bodyOffset,
                                               uint64_t packs, uint64_t thread, uint64_t nthreads) {
  constexpr int kPerPack = static_cast<int>(kPackBytes / sizeof(T));
  const uint4* srcs[kMaxSources];
  uint4* dsts[kMaxDestinations];
  COLLIE_UNROLL
  for (int s = 0; s < kMaxSources; ++s) {
    // Unused slots may be null: no arithmetic on them.
    srcs[s] = s < args.nsrcs ? reinterpret_cast<const uint4*>(
                                   static_cast<const unsigned char*>(args.srcs[s]) + bodyOffset)
                             : nullptr;
  }
  COLLIE_UNROLL
  for (int d = 0; d < kMaxDestinations; ++d) {
    dsts[d] = d < args.ndsts
                  ? reinterpret_cast<uint4*>(static_cast<unsigned char*>(args.dsts[d]) + bodyOffset)
                  : nullptr;
  }
  const int nsrcs = args.nsrcs;
  const int ndsts = args.ndsts;
  for (uint64_t p = thread; p < packs; p += kUnroll * nthreads) {
    bool live[kUnroll];
    COLLIE_UNROLL
    for (int u = 0; u < kUnroll; ++u) live[u] = p + u * nthreads < packs;
    Pack<T> acc[kUnroll] = {};
    COLLIE_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      if (live[u]) acc[u].vector = srcs[0][p + u * nthreads];
    }
    COLLIE_UNROLL
    for (int s = 1; s < kMaxSources; ++s) {
      if (s >= nsrcs) break;
      Pack<T> in[kUnroll] = {};
      COLLIE_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        if (live[u]) in[u].vector = srcs[s][p + u * nthreads];
      }
      COLLIE_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        if (!live[u]) continue;
        COLLIE_UNROLL
        for (int e = 0; e < kPerPack; ++e) {
          acc[u].elements[e] = Op()(acc[u].elements[e], in[u].elements[e]);
        }
      }
    }
    if (args.divisor > 0) {
      COLLIE_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        if (!live[u]) continue;
        COLLIE_UNROLL
        for (int e = 0; e < kPerPack; ++e) {
          acc[u].elements[e] = divideBy(acc[u].elements[e], args.divisor);
        }
      }
    }
    COLLIE_UNROLL
    for (int d = 0; d < kMaxDestinations; ++d) {
      if (d >= ndsts) break;
      COLLIE_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        if (live[u]) dsts[d][p + u * nthreads] = acc[u].vector;
      }
    }
  }
}

// The primitive. `thread` in [0, nthreads) is this thread's index in the grid-stride
// loops; nthreads is the number of threads sharing the work.
template <typename T, typename Op>
__device__ __forceinline__ void reduceCopy(const ReduceCopyArgs& args, uint64_t thread,
                                           uint64_t nthreads) {
  static_assert(kPackBytes % sizeof(T) == 0, "element size must divide 16");
  const uint64_t count = args.count;
  if (count == 0 || args.nsrcs < 1 || args.ndsts < 1) return;

  const uintptr_t phase = reinterpret_cast<uintptr_t>(args.srcs[0]) % kPackBytes;
  bool congruent = true;
  bool elementAligned = true;
  COLLIE_UNROLL
  for (int s = 0; s < kMaxSources; ++s) {
    if (s >= args.nsrcs) break;
    const uintptr_t a = reinterpret_cast<uintptr_t>(args.srcs[s]);
    congruent = congruent && a % kPackBytes == phase;
    elementAligned = elementAligned && a % sizeof(T) == 0;
  }
  COLLIE_UNROLL
  for (int d = 0; d < kMaxDestinations; ++d) {
    if (d >= args.ndsts) break;
    const uintptr_t a = reinterpret_cast<uintptr_t>(args.dsts[d]);
    congruent = congruent && a % kPackBytes == phase;
    elementAligned = elementAligned && a % sizeof(T) == 0;
  }
  if (!elementAligned) {
    for (uint64_t i = thread; i < count; i += nthreads) reduceCopyElement<T, Op, true>(args, i);
    return;
  }
  if (!congruent) {
    for (uint64_t i = thread; i < count; i += nthreads) reduceCopyElement<T, Op, false>(args, i);
    return;
  }
  const PackSplit split = splitIntoPacks<T>(count, phase);
  // Head and tail elements: a handful, spread over the first threads.
  for (uint64_t j = thread; j < split.loose; j += nthreads) {
    reduceCopyElement<T, Op, false>(args, split.index(j));
  }
  reduceCopyBody<T, Op, 4>(args, static_cast<size_t>(split.head) * sizeof(T), split.packs, thread,
                           nthreads);
}

// One pack of a reduce-copy of two sources into one destination whose pointers are
// element-aligned and congruent modulo 16 (the launch checks both; streamsTwoToOne in
// kernel_table.h): thread t folds pack t of the body, and the first threads also take
// the head and tail elements. The grid covers every pack, one per thread, with no loop:
// the shape of a large elementwise kernel, which kept HBM busiest on an H200 for
// buffers beyond the L2 cache (streamingReduceCopyKernel). Its loads and its store
// carry the streaming hint (ld/st.global.cs: evict first), since at these sizes no
// byte is read again from the cache. On an H200 the hint on both sides took 0.2-2.4%
// off the float32 and bfloat16 sum at 32-256 MiB (most at 32 MiB); on the loads alone
// it cost 4-5% from 64 MiB (docs/decisions/cuda-reduce-copy-grid.md).
template <typename T, typename Op>
__device__ __forceinline__ void reduceCopyTwoToOnePack(const ReduceCopyArgs& args,
                                                       uint64_t thread) {
  constexpr int kPerPack = static_cast<int>(kPackBytes / sizeof(T));
  const uintptr_t phase = reinterpret_cast<uintptr_t>(args.srcs[0]) % kPackBytes;
  const PackSplit split = splitIntoPacks<T>(args.count, phase);
  if (thread < split.loose) reduceCopyElement<T, Op, false>(args, split.index(thread));
  if (thread >= split.packs) return;
  const size_t offset =
      static_cast<size_t>(split.head) * sizeof(T) + static_cast<size_t>(thread) * kPackBytes;
  Pack<T> acc, in;
  acc.vector = loadStreaming(
      reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(args.srcs[0]) + offset));
  in.vector = loadStreaming(
      reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(args.srcs[1]) + offset));
  COLLIE_UNROLL
  for (int e = 0; e < kPerPack; ++e) acc.elements[e] = Op()(acc.elements[e], in.elements[e]);
  if (args.divisor > 0) {
    COLLIE_UNROLL
    for (int e = 0; e < kPerPack; ++e) acc.elements[e] = divideBy(acc.elements[e], args.divisor);
  }
  storeStreaming(reinterpret_cast<uint4*>(static_cast<unsigned char*>(args.dsts[0]) + offset),
                 acc.vector);
}

__device__ __forceinline__ uint64_t gridThreadIndex() {
  return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ uint64_t gridThreadCount() {
  return static_cast<uint64_t>(gridDim.x) * blockDim.x;
}

}  // namespace collie::cuda
