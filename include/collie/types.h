// Element types, reduction operators and collective kinds shared by every layer.
//
// The numeric values of DataType and ReduceOp are part of the C API (collie.h) and
// must not change. Pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace collie {

enum class DataType : uint8_t {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBFloat16 = 9,
};
inline constexpr int kNumDataTypes = 10;

enum class ReduceOp : uint8_t {
  kSum = 0,
  kProd = 1,
  kMax = 2,
  kMin = 3,
  kAvg = 4,
  kBand = 5,  // bitwise and, or, exclusive or: integer dtypes only
  kBor = 6,
  kBxor = 7,
};
inline constexpr int kNumReduceOps = 8;

enum class CollectiveKind : uint8_t {
  kAllReduce = 0,
  kReduceScatter = 1,
  kAllGather = 2,
  kBroadcast = 3,
  kReduce = 4,
  kSend = 5,
  kRecv = 6,
  kBarrier = 7,
};

enum class Algorithm : uint8_t {
  kAuto = 0,
  kRing = 1,
  kTree = 2,     // double binary tree (all-reduce) / binary tree (broadcast, reduce)
  kChain = 3,    // pipelined chain (broadcast, reduce)
  kOneShot = 4,  // whole buffers exchanged, reduced by every rank (small all-reduce, 2 ranks)
};

bool isValid(DataType dtype);
bool isValid(ReduceOp op);
// Bytes per element; 0 for an invalid value.
size_t dataTypeSize(DataType dtype);
bool isFloating(DataType dtype);
constexpr bool isBitwise(ReduceOp op) {
  return op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
}
// Whether `op` is defined on `dtype`: every op on integers, all but the bitwise ones on
// floating types. False for invalid values.
bool isValidFor(ReduceOp op, DataType dtype);

// Lower-case names as nccl-tests prints them: "float", "half", "bfloat16", "int8", ...
std::string_view dataTypeName(DataType dtype);
std::string_view reduceOpName(ReduceOp op);            // "sum", "prod", "max", "min", "avg"
std::string_view collectiveName(CollectiveKind kind);  // "allreduce", ...
std::string_view algorithmName(Algorithm algo);        // "auto", "ring", "tree", "chain"

// Accept the names above plus common aliases ("float32", "fp16", "f64", "uint8"...).
std::optional<DataType> parseDataType(std::string_view name);
std::optional<ReduceOp> parseReduceOp(std::string_view name);
std::optional<Algorithm> parseAlgorithm(std::string_view name);

}  // namespace collie
