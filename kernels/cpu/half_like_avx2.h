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
// step, in registers and without shuffles: a 32-bit lane holds two BFloat16, and each
// is a float by masking (the high one) or by a 16-bit shift (the low one), so the op
// runs on the even and the odd elements as two vectors. Narrowing is the integer round
// to nearest even of floatToBFloat16, back into the same halves. That rounding is wrong
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
  const __m256i roundBias = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  const size_t whole = n / 16 * 16;
  for (size_t i = 0; i < whole; i += 16) {
    const __m256i va = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
    const __m256i vb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i));
    const __m256 ae = _mm256_castsi256_ps(_mm256_slli_epi32(va, 16));
    const __m256 be = _mm256_castsi256_ps(_mm256_slli_epi32(vb, 16));
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
    // (x + 0x7fff + lsb) keeps the rounded BFloat16 in its high 16 bits.
    const __m256i xe = _mm256_castps_si256(re);
    const __m256i lsbE = _mm256_and_si256(_mm256_srli_epi32(xe, 16), one);
    const __m256i lowHalf =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(xe, roundBias), lsbE), 16);
    const __m256i xo = _mm256_castps_si256(ro);
    const __m256i lsbO = _mm256_and_si256(_mm256_srli_epi32(xo, 16), one);
    const __m256i highHalf =
        _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(xo, roundBias), lsbO), high);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_or_si256(lowHalf, highHalf));
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
