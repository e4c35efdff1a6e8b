// The AVX-512 kernels that reduce Half and BFloat16 in registers (sum, prod, min, max),
// for CPUs with AVX512F, DQ, BW and AVX512_BF16 (Sapphire Rapids, Zen 4 and later), and
// Half sum and prod in AVX512-FP16's own arithmetic where the CPU has that too:
// dst[i] = T(op(float(a[i]), float(b[i]))), one float operation rounded once, the same
// bits as half_like_avx2.h and the portable definition in core/common/half.h. Included
// by reduce.cc only, whose cpu-avx512 and cpu-avx512fp16 entry points call them; `Load`
// is its policy for reading an input at any byte address (the vector loads are unaligned
// anyway) and `op` the scalar float op of the tails.
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "collie/types.h"
#include "core/common/half.h"

// Whether the compiler builds AVX512-FP16 code under a target attribute
// (reduceHalfAvx512Fp16 below, reduce.cc's Avx512Fp16Isa): gcc 12 does; clang 14 does not
// (its _Float16 needs -mavx512fp16 for the whole file; clang 15 made it a type of every
// SSE2 target). Without it Half sums and products widen to float on every CPU, as they
// do on CPUs without AVX512-FP16.
#if (defined(__clang__) && __clang_major__ >= 15) || \
    (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 12)
#define COLLIE_AVX512_FP16_BUILDS 1
#else
#define COLLIE_AVX512_FP16_BUILDS 0
#endif

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps() as the unused merge operand,
// which its -Wmaybe-uninitialized reports at every inlined call (GCC bug 105593, fixed
// in GCC 13).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace collie::cpu {

#define COLLIE_AVX512_HALF_LIKE \
  __attribute__((target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512bf16")))

// op(x, y) on 16 floats; min and max are vminps/vmaxps, whose (x < y ? x : y) and
// (x > y ? x : y), NaN and signed zeros included, are MinOp's and MaxOp's.
template <ReduceOp kOp>
COLLIE_AVX512_HALF_LIKE inline __m512 floatOp16(__m512 x, __m512 y) {
  if constexpr (kOp == ReduceOp::kProd) return _mm512_mul_ps(x, y);
  if constexpr (kOp == ReduceOp::kMin) return _mm512_min_ps(x, y);
  if constexpr (kOp == ReduceOp::kMax) return _mm512_max_ps(x, y);
  return _mm512_add_ps(x, y);
}

// 16 BFloat16 at p as floats: a BFloat16 is the high half of its float.
COLLIE_AVX512_HALF_LIKE inline __m512 widenBFloat16x16(const BFloat16* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

// Stores 16 floats as BFloat16 with vcvtneps2bf16: round to nearest even, a NaN quieted
// with its top payload bits kept, as floatToBFloat16. The instruction differs from it in
// one case only: it flushes a denormal float to a signed zero, where floatToBFloat16
// rounds it like any other value. A step with a denormal (rare: below 1.2e-38) stores
// those lanes again through floatToBFloat16.
COLLIE_AVX512_HALF_LIKE inline void narrowBFloat16x16(BFloat16* dst, __m512 r) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), (__m256i)_mm512_cvtneps_pbh(r));
  constexpr int kDenormal = 0x20;  // vfpclassps: denormal
  const __mmask16 denormal = _mm512_fpclass_ps_mask(r, kDenormal);
  if (__builtin_expect(denormal != 0, 0)) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, r);
    for (int j = 0; j < 16; ++j) {
      if ((denormal >> j) & 1) dst[j] = floatToBFloat16(lanes[j]);
    }
  }
}

// dst = BFloat16(op(float(a), float(b))), 32 elements a step. A 32-bit lane holds two
// BFloat16, each already a float after a 16-bit shift (the even element) or a mask (the
// odd one), as in the AVX2 kernel: so the op runs on the even and the odd elements as two
// vectors, with no widening shuffle. vcvtne2ps2bf16 narrows both into one vector (evens
// in the low half, odds in the high half) and one vpermw interleaves them. A step whose
// result holds a denormal (rare) is done again element by element (narrowBFloat16x16
// says why). Each step loads a and b before it stores dst, so exact aliasing is safe.
template <ReduceOp kOp, typename Load, typename ScalarOp>
COLLIE_AVX512_HALF_LIKE void reduceBFloat16Avx512(BFloat16* dst, const BFloat16* a,
                                                  const BFloat16* b, size_t n, ScalarOp op) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  // Word j of the result: the j/2-th even result (j even) or the j/2-th odd one.
  alignas(64) static constexpr uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  constexpr int kDenormal = 0x20;  // vfpclassps: denormal
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i va = _mm512_loadu_si512(a + i);
    const __m512i vb = _mm512_loadu_si512(b + i);
    const __m512 even = floatOp16<kOp>(_mm512_castsi512_ps(_mm512_slli_epi32(va, 16)),
                                       _mm512_castsi512_ps(_mm512_slli_epi32(vb, 16)));
    const __m512 odd = floatOp16<kOp>(_mm512_castsi512_ps(_mm512_and_si512(va, high)),
                                      _mm512_castsi512_ps(_mm512_and_si512(vb, high)));
    const __mmask16 denormal =
        _mm512_fpclass_ps_mask(even, kDenormal) | _mm512_fpclass_ps_mask(odd, kDenormal);
    if (__builtin_expect(denormal != 0, 0)) {
      // Before any store of this step: dst may be a or b.
      for (size_t k = i; k < i + 32; ++k) {
        dst[k] =
            floatToBFloat16(op(bfloat16ToFloat(Load::at(a, k)), bfloat16ToFloat(Load::at(b, k))));
      }
      continue;
    }
    const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(odd, even);
    _mm512_storeu_si512(dst + i, _mm512_permutexvar_epi16(interleave, packed));
  }
  if (i + 16 <= n) {
    narrowBFloat16x16(dst + i, floatOp16<kOp>(widenBFloat16x16(a + i), widenBFloat16x16(b + i)));
    i += 16;
  }
  for (; i < n; ++i) {
    dst[i] = floatToBFloat16(op(bfloat16ToFloat(Load::at(a, i)), bfloat16ToFloat(Load::at(b, i))));
  }
}

// dst = Half(op(float(a), float(b))), 16 elements a step: vcvtph2ps, the op, vcvtps2ph
// with round to nearest even, the instructions of the AVX2 kernel at twice the width.
template <ReduceOp kOp, typename Load, typename ScalarOp>
COLLIE_AVX512_HALF_LIKE void reduceHalfAvx512(Half* dst, const Half* a, const Half* b, size_t n,
                                              ScalarOp op) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)));
    const __m512 y = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(floatOp16<kOp>(x, y), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) {
    dst[i] = floatToHalf(op(halfToFloat(Load::at(a, i)), halfToFloat(Load::at(b, i))));
  }
}

// dst = Half(a + b) or Half(a * b) with AVX512-FP16's own half arithmetic, 32 elements
// a step and no conversions, for CPUs that have it (Sapphire Rapids and later; not Zen 4).
// The bits are the definition's (one float op, rounded to half): float's 24 bits are at
// least 2 x 11 + 2, so rounding the exact sum or product to float and then to half is
// the same as rounding it once to half (and float's range holds every half sum and
// product); a NaN comes out quieted with its payload, as through float; FP16
// instructions handle denormals whatever MXCSR's DAZ/FTZ say. Sum and prod only: min
// and max keep a signalling NaN as it is (reduce.cc). Exact aliasing is safe.
#if COLLIE_AVX512_FP16_BUILDS
#define COLLIE_AVX512_FP16 \
  __attribute__((target("avx2,f16c,avx512f,avx512dq,avx512bw,avx512vl,avx512bf16,avx512fp16")))
template <ReduceOp kOp, typename Load, typename ScalarOp>
COLLIE_AVX512_FP16 void reduceHalfAvx512Fp16(Half* dst, const Half* a, const Half* b, size_t n,
                                             ScalarOp op) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512h x = _mm512_loadu_ph(a + i);
    const __m512h y = _mm512_loadu_ph(b + i);
    static_assert(kOp == ReduceOp::kSum || kOp == ReduceOp::kProd);
    _mm512_storeu_ph(dst + i, kOp == ReduceOp::kProd ? _mm512_mul_ph(x, y) : _mm512_add_ph(x, y));
  }
  for (; i < n; ++i) {
    dst[i] = floatToHalf(op(halfToFloat(Load::at(a, i)), halfToFloat(Load::at(b, i))));
  }
}
#undef COLLIE_AVX512_FP16
#endif  // COLLIE_AVX512_FP16_BUILDS

}  // namespace collie::cpu

#undef COLLIE_AVX512_HALF_LIKE
#pragma GCC diagnostic pop
