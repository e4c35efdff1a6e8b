// Host reduction loops: see cpu_reduce.h for the contract.
//
// Layout: one loop template per aliasing case (so that __restrict is only promised
// where it holds), a block path for Half/BFloat16 (widen a block to float, reduce,
// narrow once), and entry points per (type, op): Baseline (default ISA), Avx2 (target
// attribute; loops are force-inlined into it and vectorised for AVX2), and Avx512 and
// Avx512Fp16 (Avx2 with the Half/BFloat16 register kernels of half_like_avx512.h).
// Tables of function pointers are built from the templates at compile time.
#include "kernels/cpu/cpu_reduce.h"

#if defined(__x86_64__) || defined(__i386__)
#define COLLIE_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define COLLIE_X86 0
#endif

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/common/cpu_cache.h"
#include "kernels/common/half.h"
#include "kernels/common/ops.h"
#if COLLIE_X86
#include "kernels/cpu/half_like_avx2.h"
#include "kernels/cpu/half_like_avx512.h"
#endif

namespace collie {
namespace {

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
// just after its own headers); dst reaches these loops aligned for T (the entry points at
// the end of this file see to it). Reading a misaligned T through a T* is undefined
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

// Portable conversions (kernels/common/half.h); branch-free, so they vectorise.
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

// The two ISA levels. Everything above is force-inlined into these entry points, so
// each gets its own vectorised copy of the loops.
struct BaselineIsa {
  // No streaming stores: the fan-out entry reduces into one output and copies it.
  template <typename T, ReduceOp kOp>
  static constexpr auto fanOut = nullptr;
  template <typename T, ReduceOp kOp>
  static void reduce(void* dst, const void* a, const void* b, size_t n, int divisor) {
    if (inputsAligned<T>(a, b)) {
      reduceTyped<ScalarConvert, AlignedLoad, T, kOp>(dst, a, b, n, divisor);
    } else {
      reduceTyped<ScalarConvert, AnyAddressLoad, T, kOp>(dst, a, b, n, divisor);
    }
  }
  template <typename T>
  static void divide(void* dst, const void* src, size_t n, int divisor) {
    divideTyped<ScalarConvert, T>(dst, src, n, divisor);
  }
  template <typename T>
  static void scale(void* dst, const void* src, const void* scalar, size_t n) {
    const T s = AnyAddressLoad::at(static_cast<const T*>(scalar), 0);
    if (inputsAligned<T>(src, src)) {
      scaleTyped<ScalarConvert, AlignedLoad, T>(dst, src, s, n);
    } else {
      scaleTyped<ScalarConvert, AnyAddressLoad, T>(dst, src, s, n);
    }
  }
};

#if COLLIE_X86
// ---- Streaming (non-temporal) stores for outputs larger than the last-level cache ----
// Such an output cannot stay cached, so writing it through the cache only costs a
// read-for-ownership per line and evicts the inputs. It is computed a block at a time
// into an L1-resident buffer and streamed out from there; results are the same bits.

constexpr size_t kStreamBlockBytes = 4096;

// Out of place and at least as large as the last-level cache.
bool streamsOutput(const void* dst, const void* a, const void* b, size_t bytes) {
  return bytes >= (1u << 20) && dst != a && dst != b && bytes >= lastLevelCacheBytes();
}

__attribute__((target("avx2"))) void streamBlock(uint8_t* dst, const uint8_t* src) {
  for (size_t i = 0; i < kStreamBlockBytes; i += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_load_si256(reinterpret_cast<const __m256i*>(src + i)));
  }
}

template <typename T, ReduceOp kOp>
__attribute__((target("avx2,f16c"))) void reduceStreaming(void* dstv, const void* av,
                                                          const void* bv, size_t n, int divisor) {
  auto* dst = static_cast<uint8_t*>(dstv);
  const auto* a = static_cast<const uint8_t*>(av);
  const auto* b = static_cast<const uint8_t*>(bv);
  constexpr size_t kPerBlock = kStreamBlockBytes / sizeof(T);
  // Plain stores up to the first 32-byte boundary of dst (elements are T-aligned).
  const size_t headBytes = (32 - (reinterpret_cast<uintptr_t>(dst) & 31)) & 31;
  const size_t head = std::min(n, headBytes / sizeof(T));
  reduceTyped<F16cConvert, AlignedLoad, T, kOp>(dst, a, b, head, divisor);
  size_t done = head;
  alignas(64) uint8_t block[kStreamBlockBytes];
  if ((reinterpret_cast<uintptr_t>(dst + done * sizeof(T)) & 31) == 0) {
    for (; done + kPerBlock <= n; done += kPerBlock) {
      const size_t at = done * sizeof(T);
      reduceTyped<F16cConvert, AlignedLoad, T, kOp>(block, a + at, b + at, kPerBlock, divisor);
      streamBlock(dst + at, block);
    }
    _mm_sfence();
  }
  const size_t at = done * sizeof(T);
  reduceTyped<F16cConvert, AlignedLoad, T, kOp>(dst + at, a + at, b + at, n - done, divisor);
}

// One reduction into several outputs (the fan-out entry): a line at a time into a
// 64-byte stack line that the compiler keeps in registers, streamed into every output.
// Inputs aligned for T, outputs aligned for T and equal modulo 32 (the entry checks).
template <typename T, ReduceOp kOp>
__attribute__((target("avx2,f16c"))) void fanOutStreaming(void* const* dsts, int ndst,
                                                          const uint8_t* a, const uint8_t* b,
                                                          size_t n, int divisor) {
  constexpr size_t kPerLine = 64 / sizeof(T);
  // Plain stores into dsts[0], copied to the others: the head before the first 32-byte
  // boundary and the tail after the last whole line.
  auto out = [&](int k) { return static_cast<uint8_t*>(dsts[k]); };
  auto plain = [&](size_t first, size_t count) {
    const size_t at = first * sizeof(T);
    reduceTyped<F16cConvert, AlignedLoad, T, kOp>(out(0) + at, a + at, b + at, count, divisor);
    for (int k = 1; k < ndst; ++k) std::memcpy(out(k) + at, out(0) + at, count * sizeof(T));
  };
  const size_t headBytes = (32 - (reinterpret_cast<uintptr_t>(dsts[0]) & 31)) & 31;
  size_t done = std::min(n, headBytes / sizeof(T));
  plain(0, done);
  alignas(64) uint8_t line[64];
  for (; done + kPerLine <= n; done += kPerLine) {
    const size_t at = done * sizeof(T);
    reduceTyped<F16cConvert, AlignedLoad, T, kOp>(line, a + at, b + at, kPerLine, divisor);
    const __m256i low = _mm256_load_si256(reinterpret_cast<const __m256i*>(line));
    const __m256i high = _mm256_load_si256(reinterpret_cast<const __m256i*>(line + 32));
    for (int k = 0; k < ndst; ++k) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(out(k) + at), low);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(out(k) + at + 32), high);
    }
  }
  _mm_sfence();
  plain(done, n - done);
}

struct Avx2Isa {
  template <typename T, ReduceOp kOp>
  __attribute__((target("avx2,f16c"))) static void fanOut(void* const* dsts, int ndst,
                                                          const void* a, const void* b, size_t n,
                                                          int divisor) {
    fanOutStreaming<T, kOp>(dsts, ndst, static_cast<const uint8_t*>(a),
                            static_cast<const uint8_t*>(b), n, divisor);
  }
  template <typename T, ReduceOp kOp>
  __attribute__((target("avx2,f16c"))) static void reduce(void* dst, const void* a, const void* b,
                                                          size_t n, int divisor) {
    if (!inputsAligned<T>(a, b)) {
      reduceTyped<F16cConvert, AnyAddressLoad, T, kOp>(dst, a, b, n, divisor);
    } else if (streamsOutput(dst, a, b, n * sizeof(T))) {
      reduceStreaming<T, kOp>(dst, a, b, n, divisor);
    } else {
      reduceTyped<F16cConvert, AlignedLoad, T, kOp>(dst, a, b, n, divisor);
    }
  }
  template <typename T>
  __attribute__((target("avx2,f16c"))) static void divide(void* dst, const void* src, size_t n,
                                                          int divisor) {
    divideTyped<F16cConvert, T>(dst, src, n, divisor);
  }
  template <typename T>
  __attribute__((target("avx2,f16c"))) static void scale(void* dst, const void* src,
                                                         const void* scalar, size_t n) {
    const T s = AnyAddressLoad::at(static_cast<const T*>(scalar), 0);
    if (inputsAligned<T>(src, src)) {
      scaleTyped<F16cConvert, AlignedLoad, T>(dst, src, s, n);
    } else {
      scaleTyped<F16cConvert, AnyAddressLoad, T>(dst, src, s, n);
    }
  }
};

// Avx2Isa with the Half and BFloat16 register kernels at 512 bits
// (half_like_avx512.h): twice the elements per instruction, and BFloat16 narrowed by
// vcvtne2ps2bf16 instead of about ten integer operations per vector. Everything else,
// and a reduce whose output streams past the cache (memory-bound), is Avx2Isa's.
struct Avx512Isa : Avx2Isa {
  template <typename T, ReduceOp kOp>
  __attribute__((target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512bf16"))) static void reduce(
      void* dst, const void* a, const void* b, size_t n, int divisor) {
    constexpr bool kRegisterKernel =
        kIsHalfLike<T> && (kOp == ReduceOp::kSum || kOp == ReduceOp::kProd ||
                           kOp == ReduceOp::kMin || kOp == ReduceOp::kMax);
    if constexpr (kRegisterKernel) {
      if (!streamsOutput(dst, a, b, n * sizeof(T))) {
        reduceHalfLike<T, kOp>(static_cast<T*>(dst), static_cast<const T*>(a),
                               static_cast<const T*>(b), n);
        return;
      }
    }
    Avx2Isa::reduce<T, kOp>(dst, a, b, n, divisor);
  }

 private:
  template <typename T, ReduceOp kOp, typename Load>
  __attribute__((target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512bf16"))) static void reduceWith(
      T* dst, const T* a, const T* b, size_t n) {
    if constexpr (std::is_same_v<T, BFloat16>) {
      cpu::reduceBFloat16Avx512<kOp, Load>(dst, a, b, n, opFor<float, kOp>());
    } else {
      cpu::reduceHalfAvx512<kOp, Load>(dst, a, b, n, opFor<float, kOp>());
    }
  }
  template <typename T, ReduceOp kOp>
  __attribute__((target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512bf16"))) static void
  reduceHalfLike(T* dst, const T* a, const T* b, size_t n) {
    if (inputsAligned<T>(a, b)) {
      reduceWith<T, kOp, AlignedLoad>(dst, a, b, n);
    } else {
      reduceWith<T, kOp, AnyAddressLoad>(dst, a, b, n);
    }
  }
};

// Avx512Isa with Half sum and prod in AVX512-FP16's own arithmetic (half_like_avx512.h),
// for CPUs that have it.
struct Avx512Fp16Isa : Avx512Isa {
  template <typename T, ReduceOp kOp>
  __attribute__((
      target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl,avx512bf16,avx512fp16"))) static void
  reduce(void* dst, const void* a, const void* b, size_t n, int divisor) {
    // Not min and max: vminph/vmaxph return a signalling NaN operand as it is, where
    // the definition's widening to float has quieted it (kernels_test's every-pattern
    // check).
    constexpr bool kNative =
        std::is_same_v<T, Half> && (kOp == ReduceOp::kSum || kOp == ReduceOp::kProd);
    if constexpr (kNative) {
      if (!streamsOutput(dst, a, b, n * sizeof(T))) {
        auto* out = static_cast<Half*>(dst);
        const auto* x = static_cast<const Half*>(a);
        const auto* y = static_cast<const Half*>(b);
        if (inputsAligned<T>(a, b)) {
          cpu::reduceHalfAvx512Fp16<kOp, AlignedLoad>(out, x, y, n, opFor<float, kOp>());
        } else {
          cpu::reduceHalfAvx512Fp16<kOp, AnyAddressLoad>(out, x, y, n, opFor<float, kOp>());
        }
        return;
      }
    }
    Avx512Isa::reduce<T, kOp>(dst, a, b, n, divisor);
  }
};
#endif  // COLLIE_X86

// ---- Dispatch tables ----------------------------------------------------------------

using ReduceFn = void (*)(void*, const void*, const void*, size_t, int);
using DivideFn = void (*)(void*, const void*, size_t, int);
using ScaleFn = void (*)(void*, const void*, const void*, size_t);
using FanOutFn = void (*)(void* const*, int, const void*, const void*, size_t, int);

struct Table {
  std::array<std::array<ReduceFn, kNumReduceOps>, kNumDataTypes> reduce{};
  std::array<std::array<FanOutFn, kNumReduceOps>, kNumDataTypes> fanOut{};
  std::array<DivideFn, kNumDataTypes> divide{};
  std::array<ScaleFn, kNumDataTypes> scale{};
};

// Table entry kI: dtype kI / kNumReduceOps, op kI % kNumReduceOps (both enums count
// from 0), and whether the op is defined on the dtype (not bitwise ops on floating types).
template <size_t kI>
struct EntryOf {
  using T = typename TypeOf<static_cast<DataType>(kI / kNumReduceOps)>::type;
  static constexpr auto kOp = static_cast<ReduceOp>(kI % kNumReduceOps);
  static constexpr bool kDefined = !(isBitwise(kOp) && !std::is_integral_v<T>);
};

// The kernel of one (dtype, op), or nullptr where the op is not defined.
template <typename Isa, size_t kI>
constexpr ReduceFn entryFor() {
  using E = EntryOf<kI>;
  if constexpr (E::kDefined) return &Isa::template reduce<typename E::T, E::kOp>;
  return nullptr;
}

// The streaming fan-out of one (dtype, op), or nullptr (not defined, or the ISA has none).
template <typename Isa, size_t kI>
constexpr FanOutFn fanOutFor() {
  using E = EntryOf<kI>;
  if constexpr (E::kDefined) return Isa::template fanOut<typename E::T, E::kOp>;
  return nullptr;
}

template <typename Isa, size_t... kI>
constexpr Table makeTable(std::index_sequence<kI...>) {
  // Entry kI is dtype kI / kNumReduceOps, op kI % kNumReduceOps (both enums count from 0).
  Table t;
  ((t.reduce[kI / kNumReduceOps][kI % kNumReduceOps] = entryFor<Isa, kI>()), ...);
  ((t.fanOut[kI / kNumReduceOps][kI % kNumReduceOps] = fanOutFor<Isa, kI>()), ...);
  return t;
}

template <typename Isa, size_t... kI>
constexpr Table withDivide(Table t, std::index_sequence<kI...>) {
  ((t.divide[kI] = &Isa::template divide<typename TypeOf<static_cast<DataType>(kI)>::type>), ...);
  ((t.scale[kI] = &Isa::template scale<typename TypeOf<static_cast<DataType>(kI)>::type>), ...);
  return t;
}

template <typename Isa>
constexpr Table kTable =
    withDivide<Isa>(makeTable<Isa>(std::make_index_sequence<kNumDataTypes * kNumReduceOps>()),
                    std::make_index_sequence<kNumDataTypes>());

[[noreturn]] void invalidCall(const char* what, unsigned dtype, unsigned op) {
  std::fprintf(stderr, "collie: BUG: host reduce kernel called with %s (dtype %u, op %u)\n", what,
               dtype, op);
  std::abort();
}

// ---- Entry points -------------------------------------------------------------------
// The typed loops store only to addresses aligned for T. A dst that is not (a user buffer
// at an odd address: NCCL accepts those too) is computed a block at a time into an
// aligned buffer on the stack and copied out; exact aliasing stays safe because each
// block of the inputs is read before that block of dst is written. Such buffers are rare,
// so this path is built for correctness, not speed.
constexpr size_t kMisalignedDstBlockBytes = 4096;

// Each DataType's element size, known here at compile time (no call per kernel call).
template <size_t... kI>
constexpr std::array<size_t, kNumDataTypes> elementSizes(std::index_sequence<kI...>) {
  return {sizeof(typename TypeOf<static_cast<DataType>(kI)>::type)...};
}
constexpr std::array<size_t, kNumDataTypes> kElementSize =
    elementSizes(std::make_index_sequence<kNumDataTypes>());

// An address aligned to the element size (a power of two) is aligned for the type
// (sizeof is a multiple of alignof).
bool alignedFor(const void* p, size_t elementSize) {
  return (reinterpret_cast<uintptr_t>(p) & (elementSize - 1)) == 0;
}

// Writes `count` elements of `elementSize` bytes to dst a block at a time:
// fill(block, at, n) computes the n elements that start at byte `at` into the aligned
// block, which is then copied to dst + at.
template <typename Fill>
void throughAlignedBlocks(void* dst, size_t count, size_t elementSize, Fill fill) {
  alignas(64) uint8_t block[kMisalignedDstBlockBytes];
  const size_t perBlock = sizeof(block) / elementSize;
  for (size_t done = 0; done < count; done += perBlock) {
    const size_t n = std::min(perBlock, count - done);
    const size_t at = done * elementSize;
    fill(block, at, n);
    std::memcpy(static_cast<uint8_t*>(dst) + at, block, n * elementSize);
  }
}

template <typename Isa>
void reduceEntry(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op,
                 int divisor) {
  const unsigned d = static_cast<unsigned>(dtype);
  const unsigned o = static_cast<unsigned>(op);
  if (d >= kNumDataTypes || o >= kNumReduceOps) invalidCall("an invalid dtype or op", d, o);
  if (count == 0) return;
  const ReduceFn reduce = kTable<Isa>.reduce[d][o];
  if (reduce == nullptr) invalidCall("a bitwise op on a floating dtype", d, o);
  const size_t size = kElementSize[d];
  if (alignedFor(dst, size)) return reduce(dst, a, b, count, divisor);
  // An input that dst aliases is misaligned too: the kernel reads it as any other input.
  throughAlignedBlocks(dst, count, size, [&](uint8_t* block, size_t at, size_t n) {
    reduce(block, static_cast<const uint8_t*>(a) + at, static_cast<const uint8_t*>(b) + at, n,
           divisor);
  });
}

template <typename Isa>
void divideEntry(void* dst, const void* src, size_t count, DataType dtype, int divisor) {
  const unsigned d = static_cast<unsigned>(dtype);
  if (d >= kNumDataTypes) invalidCall("an invalid dtype", d, 0);
  if (count == 0) return;
  const DivideFn divide = kTable<Isa>.divide[d];
  const size_t size = kElementSize[d];
  if (alignedFor(dst, size) && alignedFor(src, size)) return divide(dst, src, count, divisor);
  // divide reads src aligned, so src's block is copied in first and divided in place.
  throughAlignedBlocks(dst, count, size, [&](uint8_t* block, size_t at, size_t n) {
    std::memcpy(block, static_cast<const uint8_t*>(src) + at, n * size);
    divide(block, block, n, divisor);
  });
}

template <typename Isa>
void scaleEntry(void* dst, const void* src, const void* scalar, size_t count, DataType dtype) {
  const unsigned d = static_cast<unsigned>(dtype);
  if (d >= kNumDataTypes) invalidCall("an invalid dtype", d, 0);
  if (count == 0) return;
  const ScaleFn scale = kTable<Isa>.scale[d];
  const size_t size = kElementSize[d];
  if (alignedFor(dst, size)) return scale(dst, src, scalar, count);
  throughAlignedBlocks(dst, count, size, [&](uint8_t* block, size_t at, size_t n) {
    scale(block, static_cast<const uint8_t*>(src) + at, scalar, n);
  });
}

template <typename Isa>
void reduceFanOutEntry(void* const* dsts, int ndst, const void* a, const void* b, size_t count,
                       DataType dtype, ReduceOp op, int divisor) {
  const unsigned d = static_cast<unsigned>(dtype);
  const unsigned o = static_cast<unsigned>(op);
  if (d >= kNumDataTypes || o >= kNumReduceOps) invalidCall("an invalid dtype or op", d, o);
  if (count == 0 || ndst <= 0) return;
  const size_t size = kElementSize[d];
  const FanOutFn fanOut = kTable<Isa>.fanOut[d][o];
  const uintptr_t lane = reinterpret_cast<uintptr_t>(dsts[0]) & 31;
  bool streams =
      fanOut != nullptr && alignedFor(a, size) && alignedFor(b, size) && alignedFor(dsts[0], size);
  for (int k = 1; k < ndst && streams; ++k) {
    streams = (reinterpret_cast<uintptr_t>(dsts[k]) & 31) == lane;
  }
  if (streams) return fanOut(dsts, ndst, a, b, count, divisor);
  reduceEntry<Isa>(dsts[0], a, b, count, dtype, op, divisor);
  for (int k = 1; k < ndst; ++k) std::memcpy(dsts[k], dsts[0], count * size);
}

constexpr ReduceBackend kBaselineBackend{"cpu-baseline", &reduceEntry<BaselineIsa>,
                                         &divideEntry<BaselineIsa>, &scaleEntry<BaselineIsa>,
                                         &reduceFanOutEntry<BaselineIsa>};
#if COLLIE_X86
constexpr ReduceBackend kAvx2Backend{"cpu-avx2", &reduceEntry<Avx2Isa>, &divideEntry<Avx2Isa>,
                                     &scaleEntry<Avx2Isa>, &reduceFanOutEntry<Avx2Isa>};
constexpr ReduceBackend kAvx512Backend{"cpu-avx512", &reduceEntry<Avx512Isa>,
                                       &divideEntry<Avx512Isa>, &scaleEntry<Avx512Isa>,
                                       &reduceFanOutEntry<Avx512Isa>};
constexpr ReduceBackend kAvx512Fp16Backend{"cpu-avx512fp16", &reduceEntry<Avx512Fp16Isa>,
                                           &divideEntry<Avx512Fp16Isa>, &scaleEntry<Avx512Fp16Isa>,
                                           &reduceFanOutEntry<Avx512Fp16Isa>};

bool cpuHasAvx2F16c() {
  // avx2 through the compiler (it also checks that the OS saves ymm state); f16c
  // through cpuid leaf 1, since clang's __builtin_cpu_supports does not know it.
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  return __builtin_cpu_supports("avx2") && f16c;
}

// AVX512F, DQ and BW, and AVX512_BF16 (vcvtneps2bf16); the compiler checks that the OS saves
// the zmm and mask state.
bool cpuHasAvx512Bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
}

bool cpuHasAvx512Fp16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512fp16");
}
#endif  // COLLIE_X86

struct Variants {
  std::array<const ReduceBackend*, 4> list{};
  size_t size = 0;
};

const Variants& variants() {
  static const Variants v = [] {
    Variants out;
    out.list[out.size++] = &kBaselineBackend;
#if COLLIE_X86
    if (cpuHasAvx2F16c()) {
      out.list[out.size++] = &kAvx2Backend;
      if (cpuHasAvx512Bf16()) {
        out.list[out.size++] = &kAvx512Backend;
        if (cpuHasAvx512Fp16()) out.list[out.size++] = &kAvx512Fp16Backend;
      }
    }
#endif
    return out;
  }();
  return v;
}

}  // namespace

const ReduceBackend& cpuReduceBackend() {
  const Variants& v = variants();
  return *v.list[v.size - 1];
}

std::span<const ReduceBackend* const> cpuReduceBackendVariants() {
  const Variants& v = variants();
  return {v.list.data(), v.size};
}

}  // namespace collie
