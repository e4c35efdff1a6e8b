#include "collie/types.h"

#include <string>

namespace collie {
namespace {

struct DataTypeInfo {
  DataType dtype;
  size_t size;
  bool floating;
  std::string_view name;
};

constexpr DataTypeInfo kDataTypes[kNumDataTypes] = {
    {DataType::kInt8, 1, false, "int8"},     {DataType::kUint8, 1, false, "uint8"},
    {DataType::kInt32, 4, false, "int32"},   {DataType::kUint32, 4, false, "uint32"},
    {DataType::kInt64, 8, false, "int64"},   {DataType::kUint64, 8, false, "uint64"},
    {DataType::kFloat16, 2, true, "half"},   {DataType::kFloat32, 4, true, "float"},
    {DataType::kFloat64, 8, true, "double"}, {DataType::kBFloat16, 2, true, "bfloat16"},
};

constexpr std::string_view kOpNames[kNumReduceOps] = {"sum",  "prod", "max",  "min",      "avg",
                                                      "band", "bor",  "bxor", "premulsum"};

}  // namespace

bool isValid(DataType dtype) { return static_cast<unsigned>(dtype) < kNumDataTypes; }
bool isValid(ReduceOp op) { return static_cast<unsigned>(op) < kNumReduceOps; }

size_t dataTypeSize(DataType dtype) {
  return isValid(dtype) ? kDataTypes[static_cast<unsigned>(dtype)].size : 0;
}

bool isFloating(DataType dtype) {
  return isValid(dtype) && kDataTypes[static_cast<unsigned>(dtype)].floating;
}

bool isValidFor(ReduceOp op, DataType dtype) {
  return isValid(op) && isValid(dtype) && !(isBitwise(op) && isFloating(dtype));
}

std::string_view dataTypeName(DataType dtype) {
  return isValid(dtype) ? kDataTypes[static_cast<unsigned>(dtype)].name : "invalid";
}

std::string_view reduceOpName(ReduceOp op) {
  return isValid(op) ? kOpNames[static_cast<unsigned>(op)] : "invalid";
}

std::string_view collectiveName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "allreduce";
    case CollectiveKind::kReduceScatter:
      return "reducescatter";
    case CollectiveKind::kAllGather:
      return "allgather";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kReduce:
      return "reduce";
    case CollectiveKind::kSend:
      return "send";
    case CollectiveKind::kRecv:
      return "recv";
    case CollectiveKind::kBarrier:
      return "barrier";
    case CollectiveKind::kAllToAll:
      return "alltoall";
    case CollectiveKind::kGather:
      return "gather";
    case CollectiveKind::kScatter:
      return "scatter";
    case CollectiveKind::kAllToAllV:
      return "alltoallv";
    case CollectiveKind::kAllGatherV:
      return "allgatherv";
    case CollectiveKind::kReduceScatterV:
      return "reducescatterv";
  }
  return "invalid";
}

std::string_view algorithmName(Algorithm algo) {
  switch (algo) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kChain:
      return "chain";
    case Algorithm::kOneShot:
      return "oneshot";
    case Algorithm::kBoard:
      return "board";
    case Algorithm::kDirect:
      return "direct";
    case Algorithm::kCma:
      return "cma";
    case Algorithm::kPairwise:
      return "pairwise";
    case Algorithm::kLinear:
      return "linear";
    case Algorithm::kHier:
      return "hier";
  }
  return "invalid";
}

std::optional<DataType> parseDataType(std::string_view name) {
  struct Alias {
    std::string_view name;
    DataType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"int8", DataType::kInt8},       {"char", DataType::kInt8},
      {"uint8", DataType::kUint8},     {"int32", DataType::kInt32},
      {"int", DataType::kInt32},       {"uint32", DataType::kUint32},
      {"int64", DataType::kInt64},     {"uint64", DataType::kUint64},
      {"half", DataType::kFloat16},    {"float16", DataType::kFloat16},
      {"fp16", DataType::kFloat16},    {"float", DataType::kFloat32},
      {"float32", DataType::kFloat32}, {"fp32", DataType::kFloat32},
      {"double", DataType::kFloat64},  {"float64", DataType::kFloat64},
      {"fp64", DataType::kFloat64},    {"bfloat16", DataType::kBFloat16},
      {"bf16", DataType::kBFloat16},
  };
  for (const Alias& alias : kAliases) {
    if (alias.name == name) return alias.dtype;
  }
  return std::nullopt;
}

std::optional<ReduceOp> parseReduceOp(std::string_view name) {
  for (int i = 0; i < kNumReduceOps; ++i) {
    if (kOpNames[i] == name) return static_cast<ReduceOp>(i);
  }
  return std::nullopt;
}

std::optional<Algorithm> parseAlgorithm(std::string_view name) {
  for (Algorithm algo : kAllAlgorithms) {
    if (algorithmName(algo) == name) return algo;
  }
  return std::nullopt;
}

std::string algorithmNames() {
  std::string names;
  for (Algorithm algo : kAllAlgorithms) {
    names += (names.empty() ? "" : ", ") + std::string(algorithmName(algo));
  }
  return names;
}

}  // namespace collie
