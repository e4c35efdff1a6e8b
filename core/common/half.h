// Half (IEEE 754 binary16) and BFloat16 (the top half of a binary32): 16-bit storage
// types with conversions to and from float.
//
// Contract:
//   - Storage only: no arithmetic operators. Reduce by converting to float, computing,
//     and converting back once (see kernels/common/ops.h).
//   - float -> Half / BFloat16 rounds to nearest, ties to even. Finite values too large
//     for the type become infinity; values too small become (signed) zero or a
//     subnormal; infinities stay infinities; NaN stays NaN (made quiet, the top payload
//     bits kept), exactly like x86 F16C `vcvtps2ph` and CUDA `__float2half_rn`.
//   - Half / BFloat16 -> float is exact (subnormals included).
//   - The conversions assume the default floating-point environment (round to
//     nearest, no flush-to-zero): Half subnormals go through one float addition.
//   - Pure functions, usable on host and device; no library calls, so nvcc can compile
//     them as __host__ __device__. They are branch-free so that host loops over them
//     auto-vectorise.
// Thread safety: values; the functions are pure.
#pragma once

#include <cstdint>

#include "core/common/host_device.h"

namespace collie {

struct Half {
  uint16_t bits;
};

struct BFloat16 {
  uint16_t bits;
};

static_assert(sizeof(Half) == 2 && alignof(Half) == 2);
static_assert(sizeof(BFloat16) == 2 && alignof(BFloat16) == 2);

namespace detail {

COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return __builtin_bit_cast(uint32_t, f);
#endif
}

COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE float bitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

// cond ? a : b as mask arithmetic: both sides are always computed, so the compiler
// keeps the float operation unconditional and can vectorise the loop (a plain ternary
// is sunk into a branch, and GCC will not if-convert a possibly trapping float add).
COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE uint32_t select(bool cond, uint32_t a, uint32_t b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return (a & mask) | (b & ~mask);
}

}  // namespace detail

// Half -> float, exact.
COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE float halfToFloat(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t mag = h.bits & 0x7fffu;
  // Normal numbers: shift exponent and mantissa into place, rebias 15 -> 127.
  const uint32_t normal = (mag << 13) + 0x38000000u;
  // Infinity and NaN: the exponent field must become all ones.
  const uint32_t special = normal + 0x38000000u;
  // Subnormals (and zero): mag * 2^-24. 0.5f has an ulp of 2^-24, so placing mag in
  // the mantissa of 0.5f and subtracting 0.5f is exact.
  const uint32_t subnormal = detail::floatBits(detail::bitsFloat(0x3f000000u + mag) - 0.5f);
  return detail::bitsFloat(sign | detail::select(mag >= 0x7c00u, special,
                                                 detail::select(mag < 0x0400u, subnormal, normal)));
}

// float -> Half, round to nearest even.
COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE Half floatToHalf(float f) {
  const uint32_t x = detail::floatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t mag = x & 0x7fffffffu;
  // NaN: keep the top 10 payload bits and set the quiet bit.
  const uint32_t nan = 0x7e00u | ((mag >> 13) & 0x3ffu);
  // Normal range: add 0x0fff plus the lowest kept bit, which rounds to nearest even;
  // a carry out of the mantissa correctly bumps the exponent.
  const uint32_t normal = (mag + 0x0fffu + ((mag >> 13) & 1u) - 0x38000000u) >> 13;
  // Below 2^-14: the result is round(|f| * 2^24). Adding 0.5f (ulp 2^-24) rounds the
  // magnitude to that grid in hardware, ties to even; the low bits are the result.
  const uint32_t subnormal = detail::floatBits(detail::bitsFloat(mag) + 0.5f) - 0x3f000000u;
  uint32_t out = detail::select(mag < 0x38800000u, subnormal, normal);
  // 65520 and above round to infinity (0x477ff000 is the tie between 65504 and 2^16).
  out = detail::select(mag >= 0x477ff000u, 0x7c00u, out);
  out = detail::select(mag > 0x7f800000u, nan, out);
  return Half{static_cast<uint16_t>(sign | out)};
}

// BFloat16 -> float, exact.
COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE float bfloat16ToFloat(BFloat16 b) {
  return detail::bitsFloat(static_cast<uint32_t>(b.bits) << 16);
}

// float -> BFloat16, round to nearest even; overflow rounds to infinity by carry.
COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE BFloat16 floatToBFloat16(float f) {
  const uint32_t x = detail::floatBits(f);
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x0040u;
  const bool isNan = (x & 0x7fffffffu) > 0x7f800000u;
  return BFloat16{static_cast<uint16_t>(isNan ? nan : rounded)};
}

// Generic spellings, for templates over the element type.
COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE float toFloat(Half h) { return halfToFloat(h); }
COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE float toFloat(BFloat16 b) { return bfloat16ToFloat(b); }

template <typename T>
COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE T fromFloat(float f);
template <>
COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE Half fromFloat<Half>(float f) {
  return floatToHalf(f);
}
template <>
COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE BFloat16 fromFloat<BFloat16>(float f) {
  return floatToBFloat16(f);
}

}  // namespace collie
