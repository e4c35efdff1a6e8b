// Element types, reduction operators and collective kinds shared by every layer.
//
// The numeric values of DataType and ReduceOp are part of the C API (collie.h) and
// must not change. Pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
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
  // Pre-multiplied sum (NCCL's ncclRedOpCreatePreMulSum, torch's PREMUL_SUM): the sum
  // over ranks r of scalar_r * input_r, each rank's own factor (a ReduceScalar passed
  // with the collective) applied exactly once to its own contribution. Every dtype.
  kPreMulSum = 8,
};
inline constexpr int kNumReduceOps = 9;

enum class CollectiveKind : uint8_t {
  kAllReduce = 0,
  kReduceScatter = 1,
  kAllGather = 2,
  kBroadcast = 3,
  kReduce = 4,
  kSend = 5,
  kRecv = 6,
  kBarrier = 7,
  // The exchanges: blocks move between ranks, nothing is reduced.
  kAllToAll = 8,    // block p of every rank's send goes to rank p (equal blocks)
  kGather = 9,      // every rank's send lands in block r of the root's recv
  kScatter = 10,    // block r of the root's send lands in rank r's recv
  kAllToAllV = 11,  // all-to-all with a count and offset per peer (ExchangeLayout)
  // Reduce-scatter and all-gather with a count per rank (BlockCounts, the same on every
  // rank; blocks packed in rank order).
  kAllGatherV = 12,      // every rank's send (counts[r] elements) lands in block r of recv
  kReduceScatterV = 13,  // recv (counts[r] elements) = op over ranks of block r of send
};
// Whether `kind` is one of the exchanges above.
constexpr bool isExchange(CollectiveKind kind) {
  return kind == CollectiveKind::kAllToAll || kind == CollectiveKind::kGather ||
         kind == CollectiveKind::kScatter || kind == CollectiveKind::kAllToAllV;
}
// Whether `kind` takes a count per rank (CollectiveArgs::blockCounts).
constexpr bool hasBlockCounts(CollectiveKind kind) {
  return kind == CollectiveKind::kAllGatherV || kind == CollectiveKind::kReduceScatterV;
}

enum class Algorithm : uint8_t {
  kAuto = 0,
  kRing = 1,
  kTree = 2,     // double binary tree (all-reduce) / binary tree (broadcast, reduce)
  kChain = 3,    // pipelined chain (broadcast, reduce)
  kOneShot = 4,  // whole buffers exchanged, reduced by every rank (small all-reduce, 2 ranks)
  // Team collectives: run by a transport that connects every rank of the communicator
  // (today shm, every rank on one host), not by a schedule of messages.
  kBoard = 5,   // every rank publishes its part on a shared board and computes its output
  kDirect = 6,  // single copy through buffers every rank registered (all-reduce)
  kCma = 7,     // single copy through cross-memory attach, process_vm_readv (all-reduce)
  // Exchanges (all-to-all, gather, scatter):
  kPairwise = 8,  // n-1 rounds; in round k send to rank+k, receive from rank-k (all-to-all)
  kLinear = 9,    // every send posted at once, then the receives in rank order
  // Two levels (several hosts, as many ranks on each): within each host, then between
  // the hosts' ranks of equal local rank, then within each host again.
  kHier = 10,
};
inline constexpr Algorithm kAllAlgorithms[] = {
    Algorithm::kAuto,     Algorithm::kRing,   Algorithm::kTree,   Algorithm::kChain,
    Algorithm::kOneShot,  Algorithm::kBoard,  Algorithm::kDirect, Algorithm::kCma,
    Algorithm::kPairwise, Algorithm::kLinear, Algorithm::kHier};
// Whether `algo` is run by a transport's team collectives (board, direct, cma).
constexpr bool isTeamAlgorithm(Algorithm algo) {
  return algo == Algorithm::kBoard || algo == Algorithm::kDirect || algo == Algorithm::kCma;
}

bool isValid(DataType dtype);
bool isValid(ReduceOp op);

// The factor of ReduceOp::kPreMulSum: one element of the collective's dtype, held as
// its bytes in host order. Each rank passes its own; ranks are not compared on it.
// `device`, when set, is instead the address of that element in device memory, read
// when the collective runs (NCCL's ncclScalarDevice): by the multiply kernel on the
// device path (also at every launch of a CUDA graph that captured it), copied to the
// host at the call where the collective does not run as kernels.
struct ReduceScalar {
  alignas(8) uint8_t bytes[8] = {};
  bool present = false;
  const void* device = nullptr;
};
// `value` converted once to `dtype`: floating types round to nearest even (float16 and
// bfloat16 through float, as torch's Half(double) does); integer types truncate toward
// zero and saturate at the type's range (NaN gives 0). An invalid dtype gives an
// absent scalar.
ReduceScalar scalarOf(double value, DataType dtype);
// The dataTypeSize(dtype) bytes at `value` (a typed scalar, as NCCL takes it).
ReduceScalar scalarFromBytes(const void* value, DataType dtype);
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
std::string_view reduceOpName(ReduceOp op);  // "sum", "prod", "max", "min", "avg", ..., "premulsum"
std::string_view collectiveName(CollectiveKind kind);  // "allreduce", ...
std::string_view algorithmName(Algorithm algo);        // "auto", "ring", "tree", "board", ...
// "auto, ring, tree, chain, oneshot, board, direct, cma, pairwise, linear": every name
// parseAlgorithm() takes.
std::string algorithmNames();

// Accept the names above plus common aliases ("float32", "fp16", "f64", "uint8"...).
std::optional<DataType> parseDataType(std::string_view name);
std::optional<ReduceOp> parseReduceOp(std::string_view name);
std::optional<Algorithm> parseAlgorithm(std::string_view name);

}  // namespace collie
