// ReduceScalar: the factor of ReduceOp::kPreMulSum, converted once to the collective's
// dtype (see collie/types.h for the rounding rules).
#include <cmath>
#include <cstring>
#include <limits>

#include "collie/types.h"
#include "core/common/half.h"

namespace collie {
namespace {

// Truncated toward zero, saturated at I's range; NaN gives 0.
template <typename I>
I saturate(double value) {
  if (std::isnan(value)) return 0;
  if (value <= static_cast<double>(std::numeric_limits<I>::min())) {
    return std::numeric_limits<I>::min();
  }
  // max() of 64-bit types is not a double; 2^bits (or 2^(bits-1)) is, and is out of range.
  if (value >= std::ldexp(1.0, std::numeric_limits<I>::digits)) {
    return std::numeric_limits<I>::max();
  }
  return static_cast<I>(value);
}

template <typename T>
ReduceScalar holding(T value) {
  ReduceScalar scalar;
  static_assert(sizeof(T) <= sizeof(scalar.bytes));
  std::memcpy(scalar.bytes, &value, sizeof(T));
  scalar.present = true;
  return scalar;
}

}  // namespace

ReduceScalar scalarOf(double value, DataType dtype) {
  switch (dtype) {
    case DataType::kInt8:
      return holding(saturate<int8_t>(value));
    case DataType::kUint8:
      return holding(saturate<uint8_t>(value));
    case DataType::kInt32:
      return holding(saturate<int32_t>(value));
    case DataType::kUint32:
      return holding(saturate<uint32_t>(value));
    case DataType::kInt64:
      return holding(saturate<int64_t>(value));
    case DataType::kUint64:
      return holding(saturate<uint64_t>(value));
    case DataType::kFloat16:
      return holding(fromFloat<Half>(static_cast<float>(value)));
    case DataType::kFloat32:
      return holding(static_cast<float>(value));
    case DataType::kFloat64:
      return holding(value);
    case DataType::kBFloat16:
      return holding(fromFloat<BFloat16>(static_cast<float>(value)));
  }
  return ReduceScalar();
}

ReduceScalar scalarFromBytes(const void* value, DataType dtype) {
  ReduceScalar scalar;
  if (value == nullptr || !isValid(dtype)) return scalar;
  std::memcpy(scalar.bytes, value, dataTypeSize(dtype));
  scalar.present = true;
  return scalar;
}

}  // namespace collie
