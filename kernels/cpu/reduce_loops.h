// The host reduction loops that every ISA variant of kernels/cpu/reduce.cc compiles
// into its entry points: the input load policies, one elementwise loop per aliasing case
// (so that __restrict is only promised where it holds), the Half/BFloat16 block path
// (widen a block to float, reduce, narrow once) and the typed kernels reduceTyped,
// divideTyped and scaleTyped that choose among them. Everything here is force-inlined
// (COLLIE_FORCE_INLINE) or a template, so each variant's target attribute vectorises
// its own copy. Included by reduce.cc only; the contract of the kernels is
// cpu_reduce.h's (and core/kernel/reduce_backend.h's).
//
// Thread safety: pure functions of their arguments.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#define COLLIE_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define COLLIE_X86 0
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collie/types.h"
#include "core/common/half.h"
#include "kernels/common/ops.h"
#if COLLIE_X86
#include "kernels/cpu/half_like_avx2.h"
#endif

namespace collie::cpu {

// Half/BFloat16 elements widened per block: three float blocks stay in L1.
constexpr size_t kBlock = 256;

template <DataType kType>
struct TypeOf;
template <>
struct TypeOf<DataType::kInt8> {
  using type = int8_t;
};
template <>
struct TypeOf<DataType::kUint8> {
  using type = uint8_t;
};
template <>
struct TypeOf<DataType::kInt32> {
  using type = int32_t;
};
template <>
struct TypeOf<DataType::kUint32> {
  using type = uint32_t;
};
template <>
struct TypeOf<DataType::kInt64> {
  using type = int64_t;
};
template <>
struct TypeOf<DataType::kUint64> {
  using type = uint64_t;
};
template <>
struct TypeOf<DataType::kFloat16> {
  using type = Half;
};
template <>
struct TypeOf<DataType::kFloat32> {
  using type = float;
};
template <>
struct TypeOf<DataType::kFloat64> {
  using type = double;
};
template <>
struct TypeOf<DataType::kBFloat16> {
  using type = BFloat16;
};

// kAvg's last step fused into the sum: one pass over memory instead of two.
template <typename T>
struct SumDivideOp {
  int divisor;
  COLLIE_FORCE_INLINE T operator()(T a, T b) const { return divideBy(SumOp<T>()(a, b), divisor); }
};

// The functor for kOp on compute type C (kAvg without a divisor is plain kSum).
template <typename C, ReduceOp kOp>
COLLIE_FORCE_INLINE auto opFor() {
  if constexpr (kOp == ReduceOp::kProd) {
    return ProdOp<C>();
  } else if constexpr (kOp == ReduceOp::kMin) {
    return MinOp<C>();
  } else if constexpr (kOp == ReduceOp::kMax) {
    return MaxOp<C>();
  } else if constexpr (kOp == ReduceOp::kBand) {
    return BandOp<C>();
  } else if constexpr (kOp == ReduceOp::kBor) {
    return BorOp<C>();
  } else if constexpr (kOp == ReduceOp::kBxor) {
    return BxorOp<C>();
  } else {
    return SumOp<C>();
  }
}

// ---- How inputs are read -----------------------------------------------------------
// The contract lets the inputs a and b lie at any byte address (UCX hands fragments over
// just after its own headers); dst reaches these loops aligned for T (reduce.cc's entry
// points see to it). Reading a misaligned T through a T* is undefined
// (UBSan reports it), so inputs are read through a Load policy:
// AlignedLoad (a plain T*, the common case and the only one that streams) or, when an
// input is misaligned, AnyAddressLoad: a packed one-member struct, alignment 1, which
// GCC and Clang vectorise into the same unaligned vector loads. Two entry paths rather
// than one: with the packed struct everywhere, ThreadSanitizer turned every access into
// a __tsan_read_range call and the TSan build's kernels ran about 2x slower; GCC's
// UBSan ignores the lower alignment of an aligned(1) typedef; and a memcpy into a local
// made GCC load integers and turn float max into compare-and-blend (30% slower).

struct AlignedLoad {
  template <typename T>
  COLLIE_FORCE_INLINE static T at(const T* p, size_t i) {
    return p[i];
  }
};

template <typename T>
struct [[gnu::packed, gnu::may_alias]] Packed {
  T value;
};
static_assert(alignof(Packed<double>) == 1 && sizeof(Packed<double>) == sizeof(double));

struct AnyAddressLoad {
  template <typename T>
  COLLIE_FORCE_INLINE static T at(const T* p, size_t i) {
    return reinterpret_cast<const Packed<T>*>(p)[i].value;
  }
};

// Whether both inputs are aligned for T (then AlignedLoad reads them).
template <typename T>
bool inputsAligned(const void* a, const void* b) {
  return (reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) % alignof(T) == 0;
}

// ---- Elementwise loops, one per aliasing case -------------------------------------
// No element depends on another, so exact aliasing is harmless to the math; the
// separate cases exist so that the compiler is told the truth about __restrict.

template <typename Load, typename T, typename Op>
COLLIE_FORCE_INLINE void loopOutOfPlace(T* __restrict dst, const T* __restrict a,
                                        const T* __restrict b, size_t n, Op op) {
  for (size_t i = 0; i < n; ++i) dst[i] = op(Load::at(a, i), Load::at(b, i));
}

template <typename Load, typename T, typename Op>
COLLIE_FORCE_INLINE void loopIntoA(T* __restrict dst, const T* __restrict b, size_t n, Op op) {
  for (size_t i = 0; i < n; ++i) dst[i] = op(dst[i], Load::at(b, i));
}

template <typename Load, typename T, typename Op>
COLLIE_FORCE_INLINE void loopIntoB(T* __restrict dst, const T* __restrict a, size_t n, Op op) {
  for (size_t i = 0; i < n; ++i) dst[i] = op(Load::at(a, i), dst[i]);
}

template <typename T, typename Op>
COLLIE_FORCE_INLINE void loopSelf(T* dst, size_t n, Op op) {
  for (size_t i = 0; i < n; ++i) dst[i] = op(dst[i], dst[i]);
}

template <typename Load, typename T, typename Op>
COLLIE_FORCE_INLINE void elementwise(T* dst, const T* a, const T* b, size_t n, Op op) {
  if (dst == a && dst == b) {
    loopSelf(dst, n, op);
  } else if (dst == a) {
    loopIntoA<Load>(dst, b, n, op);
  } else if (dst == b) {
    loopIntoB<Load>(dst, a, n, op);
  } else {
    loopOutOfPlace<Load>(dst, a, b, n, op);
  }
}

template <typename T>
COLLIE_FORCE_INLINE void divideInPlace(T* dst, size_t n, int divisor) {
  for (size_t i = 0; i < n; ++i) dst[i] = divideBy(dst[i], divisor);
}

template <typename T>
COLLIE_FORCE_INLINE void divideOutOfPlace(T* __restrict dst, const T* __restrict src, size_t n,
                                          int divisor) {
  for (size_t i = 0; i < n; ++i) dst[i] = divideBy(src[i], divisor);
}

// ---- Half / BFloat16 conversions of a block -----------------------------------------

// Portable conversions (core/common/half.h); branch-free, so they vectorise.
struct ScalarConvert {
  template <typename Load, typename T>
  COLLIE_FORCE_INLINE static void widen(const T* __restrict src, float* __restrict out, size_t m) {
    for (size_t j = 0; j < m; ++j) out[j] = toFloat(Load::at(src, j));
  }
  template <typename T>
  COLLIE_FORCE_INLINE static void narrow(const float* __restrict in, T* __restrict dst, size_t m) {
    for (size_t j = 0; j < m; ++j) dst[j] = fromFloat<T>(in[j]);
  }
};

#if COLLIE_X86
// F16C for Half (vcvtph2ps / vcvtps2ph, round to nearest even: the same bits as
// half.h); BFloat16 keeps the portable code, which AVX2 vectorises. Not force-inlined:
// GCC refuses to inline an AVX2 function into the (baseline) templates that call it,
// and one call per block of kBlock elements costs nothing measurable.
struct F16cConvert {
  template <typename Load, typename T>
  __attribute__((target("avx2,f16c"))) static void widen(const T* __restrict src,
                                                         float* __restrict out, size_t m) {
    if constexpr (std::is_same_v<T, Half>) {
      size_t j = 0;
      for (; j + 8 <= m; j += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j));
        _mm256_storeu_ps(out + j, _mm256_cvtph_ps(h));
      }
      for (; j < m; ++j) out[j] = toFloat(Load::at(src, j));
    } else {
      ScalarConvert::widen<Load>(src, out, m);
    }
  }
  template <typename T>
  __attribute__((target("avx2,f16c"))) static void narrow(const float* __restrict in,
                                                          T* __restrict dst, size_t m) {
    if constexpr (std::is_same_v<T, Half>) {
      size_t j = 0;
      for (; j + 8 <= m; j += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + j), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j), h);
      }
      for (; j < m; ++j) dst[j] = fromFloat<T>(in[j]);
    } else {
      ScalarConvert::narrow(in, dst, m);
    }
  }
};
#endif  // COLLIE_X86

// dst = op(a, b) on Half/BFloat16 through float blocks. Each block of a and b is read
// before the block of dst is written, so exact aliasing is safe.
template <typename Cvt, typename Load, typename T, typename FloatOp>
COLLIE_FORCE_INLINE void blockwise(T* dst, const T* a, const T* b, size_t n, FloatOp op,
                                   int avgDivisor) {
  alignas(64) float fa[kBlock];
  alignas(64) float fb[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = n - i < kBlock ? n - i : kBlock;
    Cvt::template widen<Load>(a + i, fa, m);
    Cvt::template widen<Load>(b + i, fb, m);
    for (size_t j = 0; j < m; ++j) fa[j] = op(fa[j], fb[j]);
    Cvt::narrow(fa, dst + i, m);
    if (avgDivisor > 0) {
      // The sum is rounded to T first (contract), then divided in float.
      const float d = static_cast<float>(avgDivisor);
      Cvt::template widen<AlignedLoad>(dst + i, fa, m);
      for (size_t j = 0; j < m; ++j) fa[j] = fa[j] / d;
      Cvt::narrow(fa, dst + i, m);
    }
  }
}

template <typename Cvt, typename T>
COLLIE_FORCE_INLINE void blockwiseDivide(T* dst, const T* src, size_t n, int divisor) {
  alignas(64) float f[kBlock];
  const float d = static_cast<float>(divisor);
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = n - i < kBlock ? n - i : kBlock;
    Cvt::template widen<AlignedLoad>(src + i, f, m);
    for (size_t j = 0; j < m; ++j) f[j] = f[j] / d;
    Cvt::narrow(f, dst + i, m);
  }
}

// ---- Typed kernels ------------------------------------------------------------------

// dst = src * s (kPreMulSum's multiply). Each block of src is read before that block of
// dst is written, so exact aliasing is safe.
template <typename Cvt, typename Load, typename T>
COLLIE_FORCE_INLINE void scaleTyped(void* dstv, const void* srcv, T s, size_t n) {
  T* dst = static_cast<T*>(dstv);
  const T* src = static_cast<const T*>(srcv);
  if constexpr (kIsHalfLike<T>) {
    alignas(64) float f[kBlock];
    const float fs = toFloat(s);
    for (size_t i = 0; i < n; i += kBlock) {
      const size_t m = n - i < kBlock ? n - i : kBlock;
      Cvt::template widen<Load>(src + i, f, m);
      for (size_t j = 0; j < m; ++j) f[j] = f[j] * fs;
      Cvt::narrow(f, dst + i, m);
    }
  } else {
    const ProdOp<T> op;
    for (size_t i = 0; i < n; ++i) dst[i] = op(Load::at(src, i), s);
  }
}

template <typename Cvt, typename Load, typename T, ReduceOp kOp>
COLLIE_FORCE_INLINE void reduceTyped(void* dstv, const void* av, const void* bv, size_t n,
                                     int divisor) {
  T* dst = static_cast<T*>(dstv);
  const T* a = static_cast<const T*>(av);
  const T* b = static_cast<const T*>(bv);
  const int avgDivisor = kOp == ReduceOp::kAvg && divisor > 0 ? divisor : 0;
  constexpr bool kFloatOp = kOp == ReduceOp::kSum || kOp == ReduceOp::kProd ||
                            kOp == ReduceOp::kMin || kOp == ReduceOp::kMax;
#if COLLIE_X86
  // In registers (half_like_avx2.h); kAvg keeps the blocks, its sum rounded before the
  // division.
  if constexpr (std::is_same_v<Cvt, F16cConvert> && kFloatOp && kIsHalfLike<T>) {
    if constexpr (std::is_same_v<T, BFloat16>) {
      cpu::reduceBFloat16Avx2<kOp, Load>(dst, a, b, n, opFor<float, kOp>());
    } else {
      cpu::reduceHalfF16c<kOp, Load>(dst, a, b, n, opFor<float, kOp>());
    }
    return;
  }
#endif
  if constexpr (std::is_same_v<T, BFloat16>) {
    // Its conversions are a shift and integer rounding, so one per-element loop
    // vectorises with nothing through memory (the float blocks read and wrote each
    // element four more times in L1); ops.h's BFloat16 op is that definition.
    if (avgDivisor == 0) {
      elementwise<Load>(dst, a, b, n, opFor<T, kOp>());
    } else {
      blockwise<Cvt, Load>(dst, a, b, n, opFor<float, kOp>(), avgDivisor);
    }
  } else if constexpr (kIsHalfLike<T>) {
    blockwise<Cvt, Load>(dst, a, b, n, opFor<float, kOp>(), avgDivisor);
  } else if (avgDivisor > 0) {
    elementwise<Load>(dst, a, b, n, SumDivideOp<T>{avgDivisor});
  } else {
    elementwise<Load>(dst, a, b, n, opFor<T, kOp>());
  }
}

template <typename Cvt, typename T>
COLLIE_FORCE_INLINE void divideTyped(void* dstv, const void* srcv, size_t n, int divisor) {
  T* dst = static_cast<T*>(dstv);
  const T* src = static_cast<const T*>(srcv);
  if (divisor <= 0) {  // Nothing to divide by: the identity, as for divisor 1.
    if (dst != src) std::memcpy(dst, src, n * sizeof(T));
  } else if constexpr (kIsHalfLike<T>) {
    blockwiseDivide<Cvt>(dst, src, n, divisor);
  } else if (dst == src) {
    divideInPlace(dst, n, divisor);
  } else {
    divideOutOfPlace(dst, src, n, divisor);
  }
}

}  // namespace collie::cpu
