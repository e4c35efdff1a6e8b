// The x86 kernels that reduce Half and BFloat16 in registers (sum, prod, min, max):
// dst[i] = T(op(float(a[i]), float(b[i]))), one float operation rounded once, the bits
// of the portable definition in core/common/half.h and ops.h. Included by reduce.cc
// only, whose -O3 AVX2 entry points call them; `Load` is its policy for reading an input
// at any byte address (the vector loads are unaligned anyway) and `op` the scalar float
// op of the tail.
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <immintrin.h>

#include <cstddef>

#include "collie/types.h"
#include "core/common/half.h"

namespace collie::cpu {

// dst = BFloat16(op(float(a), float(b))) for sum, prod, min and max, 16 elements a
// step, in registers: a 32-bit lane holds two BFloat16, and each is a float by masking
// (the high one) or by moving it up 16 bits (the low one), so the op runs on the even
// and the odd elements as two vectors. Min and max return one of their inputs, so their
// results are BFloat16 already and are only packed back. Sum and prod are narrowed by
// the round to nearest even of floatToBFloat16, worked in 16-bit lanes on the packed
// pair: the truncated result plus one where (low 16 bits + 0x7fff + its last bit)
// carries, which vpavgw tells without a 17-bit sum (its (x + y + 1) >> 1 of low bits
// and 0x7ffe + last bit has its top bit set exactly then). On a Zen 3 VM a 32 KiB sum
// in place took 1.75-1.96 us this way against 1.95-2.08 with the rounding in each 32-bit
// half (bench/results/dtypes/bfloat16_avx2_rounding_2026-12-05.md). The rounding is wrong
// for a NaN only (it may carry into the sign), so one unordered compare of the two
// result vectors finds a step with a NaN in it (rare), and that step runs element by
// element, through floatToBFloat16, before anything of it is stored. Min and max are
// vminps/vmaxps, whose (a < b ? a : b) and (a > b ? a : b), NaN and signed zeros
// included, are MinOp's and MaxOp's: the bits are the portable path's. Each step loads
// a and b before it stores dst, so exact aliasing is safe.
template <ReduceOp kOp, typename Load, typename ScalarOp>
__attribute__((target("avx2"))) void reduceBFloat16Avx2(BFloat16* dst, const BFloat16* a,
                                                        const BFloat16* b, size_t n, ScalarOp op) {
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  // Byte shuffles within each 128-bit lane: the low BFloat16 of every 32-bit lane into
  // its high half (a float), and a float's high half down into the low one.
  const __m256i up = _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 4, 5, -1, -1, 8, 9, -1, -1, 12, 13, -1,
                                      -1, 0, 1, -1, -1, 4, 5, -1, -1, 8, 9, -1, -1, 12, 13);
  const __m256i down = _mm256_setr_epi8(2, 3, -1, -1, 6, 7, -1, -1, 10, 11, -1, -1, 14, 15, -1, -1,
                                        2, 3, -1, -1, 6, 7, -1, -1, 10, 11, -1, -1, 14, 15, -1, -1);
  const __m256i lastBit = _mm256_set1_epi16(1);
  const __m256i halfBias = _mm256_set1_epi16(0x7ffe);
  const size_t whole = n / 16 * 16;
  for (size_t i = 0; i < whole; i += 16) {
    const __m256i va = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
    const __m256i vb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i));
    const __m256 ae = _mm256_castsi256_ps(_mm256_shuffle_epi8(va, up));
    const __m256 be = _mm256_castsi256_ps(_mm256_shuffle_epi8(vb, up));
    const __m256 ao = _mm256_castsi256_ps(_mm256_and_si256(va, high));
    const __m256 bo = _mm256_castsi256_ps(_mm256_and_si256(vb, high));
    __m256 re, ro;
    if constexpr (kOp == ReduceOp::kProd) {
      re = _mm256_mul_ps(ae, be);
      ro = _mm256_mul_ps(ao, bo);
    } else if constexpr (kOp == ReduceOp::kMin) {
      re = _mm256_min_ps(ae, be);
      ro = _mm256_min_ps(ao, bo);
    } else if constexpr (kOp == ReduceOp::kMax) {
      re = _mm256_max_ps(ae, be);
      ro = _mm256_max_ps(ao, bo);
    } else {
      re = _mm256_add_ps(ae, be);
      ro = _mm256_add_ps(ao, bo);
    }
    if (__builtin_expect(_mm256_movemask_ps(_mm256_cmp_ps(re, ro, _CMP_UNORD_Q)) != 0, 0)) {
      // Before any store of this step: dst may be a or b.
      for (size_t k = i; k < i + 16; ++k) {
        dst[k] =
            floatToBFloat16(op(bfloat16ToFloat(Load::at(a, k)), bfloat16ToFloat(Load::at(b, k))));
      }
      continue;
    }
    const __m256i xe = _mm256_castps_si256(re);
    const __m256i xo = _mm256_castps_si256(ro);
    // The high halves, packed back in element order: the truncated results.
    const __m256i truncated = _mm256_blend_epi16(_mm256_shuffle_epi8(xe, down), xo, 0xaa);
    if constexpr (kOp == ReduceOp::kMin || kOp == ReduceOp::kMax) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), truncated);
      continue;
    }
    // The low halves, packed alike; carry = -1 where the rounding carries.
    const __m256i lows = _mm256_blend_epi16(xe, _mm256_shuffle_epi8(xo, up), 0xaa);
    const __m256i bias = _mm256_add_epi16(_mm256_and_si256(truncated, lastBit), halfBias);
    const __m256i carry = _mm256_cmpgt_epi16(_mm256_setzero_si256(), _mm256_avg_epu16(lows, bias));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_sub_epi16(truncated, carry));
  }
  for (size_t k = 0; k < n % 16; ++k) {  // (a bound GCC sees as below 16)
    const size_t i = whole + k;
    dst[i] = floatToBFloat16(op(bfloat16ToFloat(Load::at(a, i)), bfloat16ToFloat(Load::at(b, i))));
  }
}

// dst = Half(op(float(a), float(b))) for sum, prod, min and max, 8 elements a step
// in registers: vcvtph2ps, the op (min and max as for BFloat16 above), vcvtps2ph with
// round to nearest even: the instructions of the block path, without the blocks.
template <ReduceOp kOp, typename Load, typename ScalarOp>
__attribute__((target("avx2,f16c"))) void reduceHalfF16c(Half* dst, const Half* a, const Half* b,
                                                         size_t n, ScalarOp op) {
  const size_t whole = n / 8 * 8;
  for (size_t i = 0; i < whole; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    __m256 r;
    if constexpr (kOp == ReduceOp::kProd) {
      r = _mm256_mul_ps(x, y);
    } else if constexpr (kOp == ReduceOp::kMin) {
      r = _mm256_min_ps(x, y);
    } else if constexpr (kOp == ReduceOp::kMax) {
      r = _mm256_max_ps(x, y);
    } else {
      r = _mm256_add_ps(x, y);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
  for (size_t k = 0; k < n % 8; ++k) {  // (a bound GCC sees as below 8)
    const size_t i = whole + k;
    dst[i] = floatToHalf(op(halfToFloat(Load::at(a, i)), halfToFloat(Load::at(b, i))));
  }
}

}  // namespace collie::cpu
