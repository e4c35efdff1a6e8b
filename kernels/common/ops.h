// The reduction operators, written once for the host kernels (kernels/cpu) and the
// CUDA kernels (kernels/cuda).
//
// Contract, for every element type T of collie::DataType:
//   SumOp<T>, ProdOp<T>, MinOp<T>, MaxOp<T>:  T operator()(T a, T b) const.
//   BandOp<T>, BorOp<T>, BxorOp<T>: the same, for integer T only.
//   - Integers: sum and product wrap modulo 2^bits (computed in unsigned arithmetic, so
//     there is no signed-overflow UB); min and max are exact.
//   - float, double: one IEEE operation in the type's own precision.
//   - Half, BFloat16: both operands widened to float, one float operation, one rounding
//     back to the type (nearest even). The host kernels use the float functors on
//     blocks of widened values, which gives the same bits.
//   - Min/max of floating types are `a < b ? a : b` and `a > b ? a : b`: when either
//     operand is NaN the result is b (x86 minps/maxps behaviour, so the host loops
//     vectorise). NaN therefore propagates only from b; -0.0 and +0.0 compare equal and
//     give b. This matches neither fmin (drops NaN) nor std::min (returns a).
//   divideBy<T>(x, divisor), divisor > 0, the last step of kAvg:
//   - Integers: truncating division (toward zero); 8- to 32-bit ones go through an
//     exact floating division so that the host loops vectorise.
//   - float: x / float(divisor); double: x / double(divisor).
//   - Half, BFloat16: widened to float, divided in float, rounded once.
// Thread safety: stateless functors; pure.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/common/half.h"
#include "core/common/host_device.h"

namespace collie {

// True for the 16-bit floating storage types that compute in float.
template <typename T>
inline constexpr bool kIsHalfLike = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// The type arithmetic happens in: float for Half/BFloat16, T otherwise.
template <typename T>
using ComputeType = std::conditional_t<kIsHalfLike<T>, float, T>;

namespace detail {

// Unsigned type at least as wide as unsigned int: arithmetic in it never promotes to a
// signed type, so it wraps instead of overflowing.
template <typename T>
using WrapType =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <typename T, typename F>
COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE T viaFloat(T a, T b, F f) {
  return fromFloat<T>(f(toFloat(a), toFloat(b)));
}

}  // namespace detail

template <typename T>
struct SumOp {
  COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE T operator()(T a, T b) const {
    if constexpr (kIsHalfLike<T>) {
      return detail::viaFloat(a, b, SumOp<float>());
    } else if constexpr (std::is_integral_v<T>) {
      using W = detail::WrapType<T>;
      return static_cast<T>(static_cast<W>(static_cast<W>(a) + static_cast<W>(b)));
    } else {
      return a + b;
    }
  }
};

template <typename T>
struct ProdOp {
  COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE T operator()(T a, T b) const {
    if constexpr (kIsHalfLike<T>) {
      return detail::viaFloat(a, b, ProdOp<float>());
    } else if constexpr (std::is_integral_v<T>) {
      using W = detail::WrapType<T>;
      return static_cast<T>(static_cast<W>(static_cast<W>(a) * static_cast<W>(b)));
    } else {
      return a * b;
    }
  }
};

template <typename T>
struct MinOp {
  COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE T operator()(T a, T b) const {
    if constexpr (kIsHalfLike<T>) {
      return detail::viaFloat(a, b, MinOp<float>());
    } else {
      return a < b ? a : b;
    }
  }
};

template <typename T>
struct MaxOp {
  COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE T operator()(T a, T b) const {
    if constexpr (kIsHalfLike<T>) {
      return detail::viaFloat(a, b, MaxOp<float>());
    } else {
      return a > b ? a : b;
    }
  }
};

// Bitwise and, or, exclusive or: integer types only (the API refuses them on floating
// types, and the kernel tables hold no entry there).
template <typename T>
struct BandOp {
  static_assert(std::is_integral_v<T>, "bitwise ops are defined on integers only");
  COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE T operator()(T a, T b) const {
    return static_cast<T>(a & b);
  }
};

template <typename T>
struct BorOp {
  static_assert(std::is_integral_v<T>, "bitwise ops are defined on integers only");
  COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE T operator()(T a, T b) const {
    return static_cast<T>(a | b);
  }
};

template <typename T>
struct BxorOp {
  static_assert(std::is_integral_v<T>, "bitwise ops are defined on integers only");
  COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE T operator()(T a, T b) const {
    return static_cast<T>(a ^ b);
  }
};

template <typename T>
COLLIE_HOST_DEVICE COLLIE_FORCE_INLINE T divideBy(T x, int divisor) {
  if constexpr (kIsHalfLike<T>) {
    return fromFloat<T>(toFloat(x) / static_cast<float>(divisor));
  } else if constexpr (std::is_integral_v<T> && sizeof(T) <= 4) {
    // Truncating integer division through a floating division, which vectorises (x86
    // has no SIMD integer divide). Exact: with |x| < 2^p (p = 24 for float, 53 for
    // double) an integer quotient is exact, and a non-integer one lies at least 1/d
    // from the integers while the rounding error is below |x| 2^-p / d < 1/d, so
    // truncation picks the same integer. Needs IEEE division (not nvcc -use_fast_math).
    using F = std::conditional_t<(sizeof(T) <= 2), float, double>;
    return static_cast<T>(static_cast<F>(x) / static_cast<F>(divisor));
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    return static_cast<T>(static_cast<int64_t>(x) / static_cast<int64_t>(divisor));
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<uint64_t>(x) / static_cast<uint64_t>(divisor));
  } else {
    return x / static_cast<T>(divisor);
  }
}

}  // namespace collie
