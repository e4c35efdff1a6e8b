// Test support: values whose floating-point sums round, so that the order of a reduction
// shows in its bits.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace collie::testing {

// Rank `rank`'s value of element `i`: a float of random sign and magnitude (2^-8 .. 2^8,
// 24 random bits of mantissa; splitmix64 of rank and index, the same on every run), so
// that sums of three or more round differently in different orders.
inline float roundingValue(int rank, size_t i) {
  uint64_t x = (static_cast<uint64_t>(rank) << 40) + i + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  const float mantissa = static_cast<float>(static_cast<int32_t>(x & 0xffffff) - (1 << 23)) /
                         static_cast<float>(1 << 23);
  return std::ldexp(mantissa, static_cast<int>((x >> 32) % 17) - 8);
}

}  // namespace collie::testing
