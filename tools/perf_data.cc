#include "tools/perf_data.h"

#include <algorithm>
#include <cstring>

#include "tools/perf_half.h"

namespace collie::tools {
namespace {

template <typename T>
void store(T value, void* dst) {
  std::memcpy(dst, &value, sizeof value);
}

// Values of reductions other than prod cycle through 1..m with m*nranks <= 256, so that
// sums are exact even in bfloat16 (8 significant bits) and wrap predictably in int8.
int64_t reduceSpan(int nranks) { return std::clamp<int64_t>(256 / std::max(nranks, 1), 1, 5); }

// Products: at most 12 ranks contribute a 2 at any element, half of them per element.
constexpr int kProdRanks = 12;

// The op's exact integer result over all ranks at input element `index`.
int64_t reduceExact(const PerfCase& c, size_t index) {
  int64_t acc = inputValue(c, 0, index);
  for (int r = 1; r < c.nranks; ++r) {
    int64_t v = inputValue(c, r, index);
    switch (c.op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += v;
        break;
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kBand:
        acc &= v;
        break;
      case ReduceOp::kBor:
        acc |= v;
        break;
      case ReduceOp::kBxor:
        acc ^= v;
        break;
      case ReduceOp::kPreMulSum:  // refused by perf_args: it needs a scalar per rank
        break;
    }
  }
  return acc;
}

template <typename T>
void encodeIntAverage(int64_t sum, int nranks, void* dst) {
  // The kernels sum in the type (wrapping), then divide with truncation.
  T wrapped = static_cast<T>(sum);
  store(static_cast<T>(wrapped / static_cast<T>(nranks)), dst);
}

}  // namespace

int64_t inputValue(const PerfCase& c, int rank, size_t index) {
  int64_t i = static_cast<int64_t>(index % 1000003);  // keeps the arithmetic small
  if (!hasReduction(c.kind)) {
    // Broadcast / allgather move data only: make every rank's values distinct.
    return (3 * i + 7 * rank) % 101;
  }
  if (c.op == ReduceOp::kProd) {
    return (rank < kProdRanks && (i + rank) % 2 == 0) ? 2 : 1;
  }
  return 1 + (i + 2 * rank) % reduceSpan(c.nranks);
}

void encodeValue(DataType dtype, int64_t value, void* dst) {
  switch (dtype) {
    case DataType::kInt8:
      store(static_cast<int8_t>(value), dst);
      break;
    case DataType::kUint8:
      store(static_cast<uint8_t>(value), dst);
      break;
    case DataType::kInt32:
      store(static_cast<int32_t>(value), dst);
      break;
    case DataType::kUint32:
      store(static_cast<uint32_t>(value), dst);
      break;
    case DataType::kInt64:
      store(static_cast<int64_t>(value), dst);
      break;
    case DataType::kUint64:
      store(static_cast<uint64_t>(value), dst);
      break;
    case DataType::kFloat16:
      store(floatToHalf(static_cast<float>(value)), dst);
      break;
    case DataType::kBFloat16:
      store(floatToBFloat16(static_cast<float>(value)), dst);
      break;
    case DataType::kFloat32:
      store(static_cast<float>(value), dst);
      break;
    case DataType::kFloat64:
      store(static_cast<double>(value), dst);
      break;
  }
}

void encodeAverage(DataType dtype, int64_t sum, int nranks, void* dst) {
  switch (dtype) {
    case DataType::kInt8:
      encodeIntAverage<int8_t>(sum, nranks, dst);
      break;
    case DataType::kUint8:
      encodeIntAverage<uint8_t>(sum, nranks, dst);
      break;
    case DataType::kInt32:
      encodeIntAverage<int32_t>(sum, nranks, dst);
      break;
    case DataType::kUint32:
      encodeIntAverage<uint32_t>(sum, nranks, dst);
      break;
    case DataType::kInt64:
      encodeIntAverage<int64_t>(sum, nranks, dst);
      break;
    case DataType::kUint64:
      encodeIntAverage<uint64_t>(sum, nranks, dst);
      break;
    case DataType::kFloat16: {
      // The sum is first rounded to half (exact here), then divided in float32.
      float s = halfToFloat(floatToHalf(static_cast<float>(sum)));
      store(floatToHalf(s / static_cast<float>(nranks)), dst);
      break;
    }
    case DataType::kBFloat16: {
      float s = bfloat16ToFloat(floatToBFloat16(static_cast<float>(sum)));
      store(floatToBFloat16(s / static_cast<float>(nranks)), dst);
      break;
    }
    case DataType::kFloat32:
      store(static_cast<float>(sum) / static_cast<float>(nranks), dst);
      break;
    case DataType::kFloat64:
      store(static_cast<double>(sum) / static_cast<double>(nranks), dst);
      break;
  }
}

void fillInput(const PerfCase& c, void* dst, size_t first, size_t count) {
  size_t elemSize = dataTypeSize(c.dtype);
  auto* out = static_cast<uint8_t*>(dst);
  for (size_t k = 0; k < count; ++k) {
    encodeValue(c.dtype, inputValue(c, c.rank, first + k), out + k * elemSize);
  }
}

void fillSentinel(void* dst, size_t bytes) { std::memset(dst, 0xff, bytes); }

uint64_t countWrong(const PerfCase& c, const void* out) {
  size_t elemSize = dataTypeSize(c.dtype);
  if ((c.kind == CollectiveKind::kReduce || c.kind == CollectiveKind::kGather) &&
      c.rank != c.root) {
    return 0;
  }
  const auto* got = static_cast<const uint8_t*>(out);
  uint8_t expected[8];
  uint64_t wrong = 0;
  size_t chunk = c.shape.callCount;
  for (size_t k = 0; k < c.shape.recvElems; ++k) {
    switch (c.kind) {
      case CollectiveKind::kBroadcast:
        encodeValue(c.dtype, inputValue(c, c.root, k), expected);
        break;
      case CollectiveKind::kAllGather:
      case CollectiveKind::kGather:
        encodeValue(c.dtype, inputValue(c, static_cast<int>(k / chunk), k % chunk), expected);
        break;
      case CollectiveKind::kAllToAll:  // block p: block `rank` of rank p's input
        encodeValue(c.dtype,
                    inputValue(c, static_cast<int>(k / chunk),
                               static_cast<size_t>(c.rank) * chunk + k % chunk),
                    expected);
        break;
      case CollectiveKind::kScatter:  // block `rank` of the root's input
        encodeValue(c.dtype, inputValue(c, c.root, static_cast<size_t>(c.rank) * chunk + k),
                    expected);
        break;
      default: {
        // allreduce / reduce: element k; reducescatter: this rank's block.
        size_t index =
            c.kind == CollectiveKind::kReduceScatter ? static_cast<size_t>(c.rank) * chunk + k : k;
        int64_t exact = reduceExact(c, index);
        if (c.op == ReduceOp::kAvg) {
          encodeAverage(c.dtype, exact, c.nranks, expected);
        } else {
          encodeValue(c.dtype, exact, expected);
        }
        break;
      }
    }
    if (std::memcmp(got + k * elemSize, expected, elemSize) != 0) ++wrong;
  }
  return wrong;
}

}  // namespace collie::tools
