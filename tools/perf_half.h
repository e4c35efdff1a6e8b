// Float16 / bfloat16 <-> float conversions for `collie perf -c 1`.
//
// Local stand-in until kernels/common/half.h lands: the lead should switch the perf
// checker to that header's Half / BFloat16 types so both sides share one rounding
// implementation. Rules (as the kernels use): float -> half and float -> bfloat16
// round to nearest, ties to even; NaN stays NaN; overflow gives infinity.
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <cstring>

namespace collie::tools {

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t floatToBFloat16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bfloat16ToFloat(uint16_t h) { return bitsFloat(static_cast<uint32_t>(h) << 16); }

inline uint16_t floatToHalf(float f) {
  uint32_t u = floatBits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t absBits = u & 0x7fffffffu;
  if (absBits > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (absBits >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (absBits < 0x38800000u) {                        // below 2^-14: subnormal
    // Scale so that the subnormal's integer mantissa lands in the low bits; the float
    // addition rounds to nearest-even for us.
    float magic = bitsFloat(absBits) + bitsFloat(0x3f000000u);  // + 0.5
    return sign | static_cast<uint16_t>(floatBits(magic) - 0x3f000000u);
  }
  uint32_t mant = absBits & 0x007fffffu;
  uint32_t exp = (absBits >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carries into exponent
  return sign | static_cast<uint16_t>(h);
}

inline float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bitsFloat(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    float value = static_cast<float>(mant) * bitsFloat(0x33800000u);  // mant * 2^-24
    return (sign != 0) ? -value : value;
  }
  return bitsFloat(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

}  // namespace collie::tools
