// Test support: inputs whose reductions are exact in every dtype, and the expected
// bytes of every collective computed independently of collie's kernels' code paths
// (integer math, then one conversion to the dtype).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "collie/types.h"
#include "core/common/half.h"

namespace collie::testing {

// Small positive integers: sums of up to 16 ranks stay exact even in int8/bfloat16.
// Bitwise ops get values 1..127, so that every bit of an int8 flips somewhere.
inline int64_t inputValue(ReduceOp op, int rank, size_t index) {
  if (op == ReduceOp::kProd) return ((rank + index) % 5 == 0) ? 2 : 1;
  if (isBitwise(op)) return static_cast<int64_t>((rank * 37 + index * 11) % 127) + 1;
  return static_cast<int64_t>((rank * 3 + index) % 4) + 1;
}

inline int64_t reduceValues(ReduceOp op, int nranks, size_t index) {
  int64_t value = inputValue(op, 0, index);
  for (int r = 1; r < nranks; ++r) {
    int64_t v = inputValue(op, r, index);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
      case ReduceOp::kPreMulSum:  // the kernels reduce it as sum (factor applied before)
        value += v;
        break;
      case ReduceOp::kProd:
        value *= v;
        break;
      case ReduceOp::kMax:
        value = std::max(value, v);
        break;
      case ReduceOp::kMin:
        value = std::min(value, v);
        break;
      case ReduceOp::kBand:
        value &= v;
        break;
      case ReduceOp::kBor:
        value |= v;
        break;
      case ReduceOp::kBxor:
        value ^= v;
        break;
    }
  }
  return value;
}

// Writes `value` (an integer, or sum / divisor when divisor > 0) as one element.
inline void storeElement(DataType dtype, void* out, int64_t value, int divisor = 0) {
  auto put = [out](auto v) { std::memcpy(out, &v, sizeof(v)); };
  switch (dtype) {
    case DataType::kInt8:
      put(static_cast<int8_t>(divisor ? value / divisor : value));
      break;
    case DataType::kUint8:
      put(static_cast<uint8_t>(divisor ? value / divisor : value));
      break;
    case DataType::kInt32:
      put(static_cast<int32_t>(divisor ? value / divisor : value));
      break;
    case DataType::kUint32:
      put(static_cast<uint32_t>(divisor ? value / divisor : value));
      break;
    case DataType::kInt64:
      put(static_cast<int64_t>(divisor ? value / divisor : value));
      break;
    case DataType::kUint64:
      put(static_cast<uint64_t>(divisor ? value / divisor : value));
      break;
    case DataType::kFloat32:
      put(divisor ? static_cast<float>(value) / static_cast<float>(divisor)
                  : static_cast<float>(value));
      break;
    case DataType::kFloat64:
      put(divisor ? static_cast<double>(value) / divisor : static_cast<double>(value));
      break;
    case DataType::kFloat16: {
      float f = divisor ? static_cast<float>(value) / static_cast<float>(divisor)
                        : static_cast<float>(value);
      put(floatToHalf(f));
      break;
    }
    case DataType::kBFloat16: {
      float f = divisor ? static_cast<float>(value) / static_cast<float>(divisor)
                        : static_cast<float>(value);
      put(floatToBFloat16(f));
      break;
    }
  }
}

// inputValue(op, rank, index) repeats in index with this period, and so does every
// reduction of it over ranks.
inline size_t inputPeriod(ReduceOp op) {
  if (op == ReduceOp::kProd) return 5;
  if (isBitwise(op)) return 127;
  return 4;
}

// Writes elements [0, count) of `bytes` (`es` bytes each) given its first `period`:
// each element equals the one `period` before it. Copies doubling prefixes, so a
// reference of millions of elements costs a few memcpys (the 8-rank collective tests
// spent most of their time computing references element by element on every rank).
inline void repeatPeriod(std::vector<uint8_t>& bytes, size_t es, size_t period, size_t count) {
  for (size_t filled = period; filled < count; filled *= 2) {
    std::memcpy(bytes.data() + filled * es, bytes.data(), std::min(filled, count - filled) * es);
  }
}

// Fills `count` elements of this rank's input.
inline std::vector<uint8_t> makeInput(DataType dtype, ReduceOp op, int rank, size_t count,
                                      size_t firstIndex = 0) {
  const size_t es = dataTypeSize(dtype);
  const size_t period = std::min(count, inputPeriod(op));
  std::vector<uint8_t> bytes(count * es);
  for (size_t i = 0; i < period; ++i) {
    storeElement(dtype, bytes.data() + i * es, inputValue(op, rank, firstIndex + i));
  }
  repeatPeriod(bytes, es, period, count);
  return bytes;
}

// The reduction over `nranks` ranks of elements [firstIndex, firstIndex + count).
inline std::vector<uint8_t> expectedReduction(DataType dtype, ReduceOp op, int nranks,
                                              size_t firstIndex, size_t count) {
  const size_t es = dataTypeSize(dtype);
  const size_t period = std::min(count, inputPeriod(op));
  std::vector<uint8_t> bytes(count * es);
  for (size_t i = 0; i < period; ++i) {
    storeElement(dtype, bytes.data() + i * es, reduceValues(op, nranks, firstIndex + i),
                 op == ReduceOp::kAvg ? nranks : 0);
  }
  repeatPeriod(bytes, es, period, count);
  return bytes;
}

}  // namespace collie::testing
