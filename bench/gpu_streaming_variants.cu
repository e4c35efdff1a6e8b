// Shapes of the two-into-one sum beyond the L2 cache (collie's streamingReduceCopyKernel
// and variations of it), float32 and bfloat16, as a shared library that
// bench/gpu_streaming_variants.py loads into one process with PyTorch and times beside
// torch.add on the same buffers (docs/decisions/cuda-reduce-copy-grid.md).
//
// Every variant computes c = a + b over `count` elements, rounding as collie does; the
// kernel-shaped ones take any pointers that collie's launch would stream (element-
// aligned, congruent modulo 16) and do the same head/tail split per thread, the bare
// ones (bfloat16 only) need 16-byte-aligned buffers and a whole number of packs. The
// driver checks every variant's bits against collie's kernel and torch.add first.
//
//   kernel        collie's streamingReduceCopyKernel, 128 threads per block (the launch's)
//   kernel_b256   the same kernel, 256 threads per block
//   kernel_b512   the same kernel, 512 threads per block
//   plain         the kernel's pack with plain loads and store (the kernel before the hint)
//   cs            loads and store with the streaming hint (ld.global.cs / st.global.cs; the
//                 kernel's own accesses since this comparison)
//   cs_b256, cs_b512   the same, 256 and 512 threads per block
//   cs_load       streaming-hinted loads, plain store
//   cs_store      plain loads, streaming-hinted store
//   lu            last-use loads (ld.global.lu), streaming store; lu_b512 with 512 threads
//   nc            loads through the non-coherent path (ld.global.nc), plain store
//   host_split    the head/tail split computed once on the host, not per thread
//   bare16        bfloat16: 16 bytes per thread, no split (the earlier bare shape)
//   bare_cvt8     bfloat16: 8 bytes per thread, hardware conversion, no split
//
// C interface (all launches on the legacy default stream, as torch's default stream):
//   int variants_count(void);
//   const char* variants_name(int v);
//   int variants_dtype(int v);           0: float32, 1: bfloat16
//   int variants_bare(int v);            1: needs 16-byte-aligned whole packs
//   int variants_launch(int v, const void* a, const void* b, void* c, uint64_t count);
//                                        0, or the CUDA error code of the launch
// Thread safety: the launches are as thread-safe as the CUDA runtime's.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "core/common/half.h"
#include "kernels/common/ops.h"
#include "kernels/cuda/collective_kernels.cuh"
#include "kernels/cuda/launch_geometry.h"

namespace {

using collie::BFloat16;
using collie::SumOp;
using collie::cuda::gridThreadIndex;
using collie::cuda::kPackBytes;
using collie::cuda::Pack;
using collie::cuda::PackSplit;
using collie::cuda::ReduceCopyArgs;
using collie::cuda::reduceCopyElement;
using collie::cuda::splitIntoPacks;

enum class Hint { kPlain, kStreaming, kStreamingLoad, kStreamingStore, kLastUse, kNonCoherent };

template <Hint H>
__device__ __forceinline__ uint4 loadPack(const void* p) {
  const uint4* q = static_cast<const uint4*>(p);
  if constexpr (H == Hint::kStreaming || H == Hint::kStreamingLoad) return __ldcs(q);
  if constexpr (H == Hint::kLastUse) return __ldlu(q);
  if constexpr (H == Hint::kNonCoherent) return __ldg(q);
  return *q;
}

template <Hint H>
__device__ __forceinline__ void storePack(void* p, uint4 v) {
  uint4* q = static_cast<uint4*>(p);
  if constexpr (H == Hint::kStreaming || H == Hint::kStreamingStore || H == Hint::kLastUse) {
    __stcs(q, v);
  } else {
    *q = v;
  }
}

// collie's reduceCopyTwoToOnePack (kernels/cuda/reduce_copy.cuh) with hinted accesses.
template <typename T, Hint H>
__global__ void hintedKernel(const ReduceCopyArgs args) {
  using Op = SumOp<T>;
  constexpr int kPerPack = static_cast<int>(kPackBytes / sizeof(T));
  const uint64_t thread = gridThreadIndex();
  const uintptr_t phase = reinterpret_cast<uintptr_t>(args.srcs[0]) % kPackBytes;
  const PackSplit split = splitIntoPacks<T>(args.count, phase);
  if (thread < split.loose) reduceCopyElement<T, Op, false>(args, split.index(thread));
  if (thread >= split.packs) return;
  const size_t offset =
      static_cast<size_t>(split.head) * sizeof(T) + static_cast<size_t>(thread) * kPackBytes;
  Pack<T> acc, in;
  acc.vector = loadPack<H>(static_cast<const unsigned char*>(args.srcs[0]) + offset);
  in.vector = loadPack<H>(static_cast<const unsigned char*>(args.srcs[1]) + offset);
#pragma unroll
  for (int e = 0; e < kPerPack; ++e) acc.elements[e] = Op()(acc.elements[e], in.elements[e]);
  if (args.divisor > 0) {
#pragma unroll
    for (int e = 0; e < kPerPack; ++e) {
      acc.elements[e] = collie::divideBy(acc.elements[e], args.divisor);
    }
  }
  storePack<H>(static_cast<unsigned char*>(args.dsts[0]) + offset, acc.vector);
}

// The split done once on the host: each thread only compares its index with two counts.
struct SplitArgs {
  ReduceCopyArgs args;
  uint64_t head = 0;
  uint64_t tailBegin = 0;
  uint64_t loose = 0;
  uint64_t packs = 0;
};

template <typename T>
__global__ void hostSplitKernel(const SplitArgs s) {
  using Op = SumOp<T>;
  constexpr int kPerPack = static_cast<int>(kPackBytes / sizeof(T));
  const uint64_t thread = gridThreadIndex();
  if (thread < s.loose) {
    reduceCopyElement<T, Op, false>(s.args,
                                    thread < s.head ? thread : s.tailBegin + thread - s.head);
  }
  if (thread >= s.packs) return;
  const size_t bodyOffset = static_cast<size_t>(s.head) * sizeof(T);
  const uint4* a = reinterpret_cast<const uint4*>(
      static_cast<const unsigned char*>(s.args.srcs[0]) + bodyOffset);
  const uint4* b = reinterpret_cast<const uint4*>(
      static_cast<const unsigned char*>(s.args.srcs[1]) + bodyOffset);
  uint4* c = reinterpret_cast<uint4*>(static_cast<unsigned char*>(s.args.dsts[0]) + bodyOffset);
  Pack<T> acc, in;
  acc.vector = a[thread];
  in.vector = b[thread];
#pragma unroll
  for (int e = 0; e < kPerPack; ++e) acc.elements[e] = Op()(acc.elements[e], in.elements[e]);
  if (s.args.divisor > 0) {
#pragma unroll
    for (int e = 0; e < kPerPack; ++e) {
      acc.elements[e] = collie::divideBy(acc.elements[e], s.args.divisor);
    }
  }
  c[thread] = acc.vector;
}

// Bare bfloat16 shapes: 16-byte-aligned buffers, a whole number of packs, no split.
__device__ __forceinline__ uint32_t sumPairCollie(uint32_t a, uint32_t b) {
  const SumOp<BFloat16> op;
  const BFloat16 lo = op(BFloat16{static_cast<uint16_t>(a & 0xffffu)},
                         BFloat16{static_cast<uint16_t>(b & 0xffffu)});
  const BFloat16 hi =
      op(BFloat16{static_cast<uint16_t>(a >> 16)}, BFloat16{static_cast<uint16_t>(b >> 16)});
  return uint32_t{lo.bits} | (uint32_t{hi.bits} << 16);
}

__device__ __forceinline__ uint32_t sumPairCvt(uint32_t a, uint32_t b) {
  const float lo = __uint_as_float(a << 16) + __uint_as_float(b << 16);
  const float hi = __uint_as_float(a & 0xffff0000u) + __uint_as_float(b & 0xffff0000u);
  const __nv_bfloat162 r = __floats2bfloat162_rn(lo, hi);
  uint32_t bits;
  memcpy(&bits, &r, 4);
  return bits;
}

__global__ void bare16Kernel(const uint4* a, const uint4* b, uint4* c, uint64_t packs) {
  const uint64_t t = gridThreadIndex();
  if (t >= packs) return;
  const uint4 x = a[t], y = b[t];
  c[t] = make_uint4(sumPairCollie(x.x, y.x), sumPairCollie(x.y, y.y), sumPairCollie(x.z, y.z),
                    sumPairCollie(x.w, y.w));
}

__global__ void bareCvt8Kernel(const uint2* a, const uint2* b, uint2* c, uint64_t packs) {
  const uint64_t t = gridThreadIndex();
  if (t >= packs) return;
  const uint2 x = a[t], y = b[t];
  c[t] = make_uint2(sumPairCvt(x.x, y.x), sumPairCvt(x.y, y.y));
}

enum class Shape { kKernel, kHinted, kHostSplit, kBare16, kBareCvt8 };

struct Variant {
  const char* name;
  int dtype;  // 0 float32, 1 bfloat16
  Shape shape;
  unsigned block;
  Hint hint;
};

constexpr Variant kVariants[] = {
    {"kernel", 0, Shape::kKernel, 128, Hint::kPlain},
    {"kernel_b256", 0, Shape::kKernel, 256, Hint::kPlain},
    {"kernel_b512", 0, Shape::kKernel, 512, Hint::kPlain},
    {"plain", 0, Shape::kHinted, 128, Hint::kPlain},
    {"cs", 0, Shape::kHinted, 128, Hint::kStreaming},
    {"cs_load", 0, Shape::kHinted, 128, Hint::kStreamingLoad},
    {"cs_store", 0, Shape::kHinted, 128, Hint::kStreamingStore},
    {"lu", 0, Shape::kHinted, 128, Hint::kLastUse},
    {"cs_b256", 0, Shape::kHinted, 256, Hint::kStreaming},
    {"cs_b512", 0, Shape::kHinted, 512, Hint::kStreaming},
    {"lu_b512", 0, Shape::kHinted, 512, Hint::kLastUse},
    {"nc", 0, Shape::kHinted, 128, Hint::kNonCoherent},
    {"host_split", 0, Shape::kHostSplit, 128, Hint::kPlain},
    {"kernel", 1, Shape::kKernel, 128, Hint::kPlain},
    {"kernel_b256", 1, Shape::kKernel, 256, Hint::kPlain},
    {"kernel_b512", 1, Shape::kKernel, 512, Hint::kPlain},
    {"plain", 1, Shape::kHinted, 128, Hint::kPlain},
    {"cs", 1, Shape::kHinted, 128, Hint::kStreaming},
    {"cs_load", 1, Shape::kHinted, 128, Hint::kStreamingLoad},
    {"cs_store", 1, Shape::kHinted, 128, Hint::kStreamingStore},
    {"lu", 1, Shape::kHinted, 128, Hint::kLastUse},
    {"cs_b256", 1, Shape::kHinted, 256, Hint::kStreaming},
    {"cs_b512", 1, Shape::kHinted, 512, Hint::kStreaming},
    {"lu_b512", 1, Shape::kHinted, 512, Hint::kLastUse},
    {"nc", 1, Shape::kHinted, 128, Hint::kNonCoherent},
    {"host_split", 1, Shape::kHostSplit, 128, Hint::kPlain},
    {"bare16", 1, Shape::kBare16, 128, Hint::kPlain},
    {"bare_cvt8", 1, Shape::kBareCvt8, 128, Hint::kPlain},
};
constexpr int kCount = sizeof(kVariants) / sizeof(kVariants[0]);

template <typename T>
void (*hintedFor(Hint h))(ReduceCopyArgs) {
  switch (h) {
    case Hint::kStreaming:
      return hintedKernel<T, Hint::kStreaming>;
    case Hint::kStreamingLoad:
      return hintedKernel<T, Hint::kStreamingLoad>;
    case Hint::kStreamingStore:
      return hintedKernel<T, Hint::kStreamingStore>;
    case Hint::kLastUse:
      return hintedKernel<T, Hint::kLastUse>;
    case Hint::kNonCoherent:
      return hintedKernel<T, Hint::kNonCoherent>;
    default:
      return hintedKernel<T, Hint::kPlain>;
  }
}

template <typename T>
int launchTyped(const Variant& v, const void* a, const void* b, void* c, uint64_t count) {
  ReduceCopyArgs args;
  args.srcs[0] = a;
  args.srcs[1] = b;
  args.nsrcs = 2;
  args.dsts[0] = c;
  args.ndsts = 1;
  args.count = count;
  const unsigned grid = collie::cuda::streamingBlocks(count, sizeof(T), v.block);
  switch (v.shape) {
    case Shape::kKernel:
      collie::cuda::streamingReduceCopyKernel<T, SumOp<T>><<<grid, v.block>>>(args);
      break;
    case Shape::kHinted:
      hintedFor<T>(v.hint)<<<grid, v.block>>>(args);
      break;
    case Shape::kHostSplit: {
      const uintptr_t phase = reinterpret_cast<uintptr_t>(a) % kPackBytes;
      SplitArgs s;
      s.args = args;
      s.head = ((kPackBytes - phase) % kPackBytes) / sizeof(T);
      if (s.head > count) s.head = count;
      s.packs = (count - s.head) / (kPackBytes / sizeof(T));
      s.tailBegin = s.head + s.packs * (kPackBytes / sizeof(T));
      s.loose = s.head + (count - s.tailBegin);
      hostSplitKernel<T><<<grid, v.block>>>(s);
      break;
    }
    case Shape::kBare16: {
      const uint64_t packs = count * sizeof(T) / 16;
      bare16Kernel<<<static_cast<unsigned>((packs + v.block - 1) / v.block), v.block>>>(
          static_cast<const uint4*>(a), static_cast<const uint4*>(b), static_cast<uint4*>(c),
          packs);
      break;
    }
    case Shape::kBareCvt8: {
      const uint64_t packs = count * sizeof(T) / 8;
      bareCvt8Kernel<<<static_cast<unsigned>((packs + v.block - 1) / v.block), v.block>>>(
          static_cast<const uint2*>(a), static_cast<const uint2*>(b), static_cast<uint2*>(c),
          packs);
      break;
    }
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

extern "C" {

int variants_count(void) { return kCount; }

const char* variants_name(int v) { return v >= 0 && v < kCount ? kVariants[v].name : ""; }

int variants_dtype(int v) { return v >= 0 && v < kCount ? kVariants[v].dtype : -1; }

int variants_bare(int v) {
  return v >= 0 && v < kCount &&
         (kVariants[v].shape == Shape::kBare16 || kVariants[v].shape == Shape::kBareCvt8);
}

int variants_launch(int v, const void* a, const void* b, void* c, uint64_t count) {
  if (v < 0 || v >= kCount) return static_cast<int>(cudaErrorInvalidValue);
  if (kVariants[v].dtype == 0) return launchTyped<float>(kVariants[v], a, b, c, count);
  return launchTyped<BFloat16>(kVariants[v], a, b, c, count);
}

}  // extern "C"
