// collie perf -c 1: half/bfloat16 conversion, and the expected values against a
// reference that reduces rank by rank in the element type, as the kernels do.
#include "tools/perf_data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tools/perf_half.h"

namespace collie::tools {
namespace {

TEST(PerfHalf, RoundsToNearestEven) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);               // halfway to the next power: infinity
  EXPECT_EQ(floatToHalf(1.0f + 1.0f / 2048), 0x3c00);     // tie, even stays
  EXPECT_EQ(floatToHalf(1.0f + 3.0f / 2048), 0x3c02);     // tie, odd rounds up
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (zero)
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // tie, odd rounds up
  EXPECT_EQ(floatToHalf(std::nanf("")) & 0x7c00, 0x7c00);
  EXPECT_EQ(halfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24));
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite half survives a round trip
    ASSERT_EQ(floatToHalf(halfToFloat(static_cast<uint16_t>(h))), h);
  }
  EXPECT_EQ(floatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(floatToBFloat16(257.0f), floatToBFloat16(256.0f));  // tie to even
  EXPECT_EQ(floatToBFloat16(259.0f), floatToBFloat16(260.0f));  // tie, odd rounds up
  EXPECT_EQ(bfloat16ToFloat(0x4040), 3.0f);
}

// Loads element k of `dtype` as double (exact for every value used here).
double load(DataType dtype, const uint8_t* p) {
  switch (dtype) {
    case DataType::kInt8:
      return static_cast<int8_t>(*p);
    case DataType::kUint8:
      return *p;
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return halfToFloat(h);
    }
    case DataType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bfloat16ToFloat(h);
    }
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DataType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::kUint32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DataType::kUint64: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
  }
  return 0;
}

// Reference: reduce rank by rank, rounding to the type after every step.
std::vector<uint8_t> referenceReduce(const PerfCase& c, size_t n) {
  size_t es = dataTypeSize(c.dtype);
  std::vector<uint8_t> acc(n * es), in(n * es);
  PerfCase r0 = c;
  r0.rank = 0;
  fillInput(r0, acc.data(), 0, n);
  for (int r = 1; r < c.nranks; ++r) {
    PerfCase rc = c;
    rc.rank = r;
    fillInput(rc, in.data(), 0, n);
    for (size_t k = 0; k < n; ++k) {
      double a = load(c.dtype, &acc[k * es]), b = load(c.dtype, &in[k * es]);
      const auto ia = static_cast<int64_t>(a), ib = static_cast<int64_t>(b);
      double v = c.op == ReduceOp::kProd   ? a * b
                 : c.op == ReduceOp::kMax  ? std::max(a, b)
                 : c.op == ReduceOp::kMin  ? std::min(a, b)
                 : c.op == ReduceOp::kBand ? static_cast<double>(ia & ib)
                 : c.op == ReduceOp::kBor  ? static_cast<double>(ia | ib)
                 : c.op == ReduceOp::kBxor ? static_cast<double>(ia ^ ib)
                                           : a + b;
      encodeValue(c.dtype, static_cast<int64_t>(v), &acc[k * es]);  // all exact integers
    }
  }
  if (c.op == ReduceOp::kAvg) {
    for (size_t k = 0; k < n; ++k) {
      encodeAverage(c.dtype, static_cast<int64_t>(load(c.dtype, &acc[k * es])), c.nranks,
                    &acc[k * es]);
    }
  }
  return acc;
}

constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                                  DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
                                  DataType::kFloat16, DataType::kFloat32, DataType::kFloat64,
                                  DataType::kBFloat16};

TEST(PerfData, ExpectedReductionsMatchAStepwiseReference) {
  for (int nranks : {1, 2, 3, 8, 24}) {
    for (DataType dtype : kAllTypes) {
      for (int op = 0; op < kNumReduceOps; ++op) {
        if (!isValidFor(static_cast<ReduceOp>(op), dtype)) continue;
        if (static_cast<ReduceOp>(op) == ReduceOp::kPreMulSum) continue;  // perf refuses it
        for (CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter}) {
          PerfCase c;
          c.kind = kind;
          c.dtype = dtype;
          c.op = static_cast<ReduceOp>(op);
          c.nranks = nranks;
          c.rank = nranks - 1;
          c.shape = perfShape(kind, 240 * static_cast<int64_t>(dataTypeSize(dtype)), dtype, nranks,
                              c.rank);
          std::vector<uint8_t> ref = referenceReduce(c, c.shape.sendElems);
          const uint8_t* mine = ref.data() + c.shape.inPlaceRecvOffset * dataTypeSize(dtype);
          ASSERT_EQ(countWrong(c, mine), 0u)
              << "nranks " << nranks << " " << dataTypeName(dtype) << " " << reduceOpName(c.op);
          std::vector<uint8_t> corrupt(mine, mine + c.shape.recvElems * dataTypeSize(dtype));
          corrupt[dataTypeSize(dtype) * 5] ^= 0x40;
          ASSERT_EQ(countWrong(c, corrupt.data()), 1u);
        }
      }
    }
  }
}

TEST(PerfData, ProductsAndSumsStayExact) {
  PerfCase c;
  c.op = ReduceOp::kProd;
  c.nranks = 64;
  int64_t prod = 1;
  for (int r = 0; r < c.nranks; ++r) prod *= inputValue(c, r, 0);
  EXPECT_LE(prod, 64);
  c.op = ReduceOp::kSum;
  int64_t sum = 0;
  for (int r = 0; r < c.nranks; ++r) sum += inputValue(c, r, 3);
  EXPECT_LE(sum, 256);
}

TEST(PerfData, AverageFollowsTheKernelRules) {
  uint8_t out[8];
  encodeAverage(DataType::kInt32, 7, 2, out);
  int32_t i;
  std::memcpy(&i, out, 4);
  EXPECT_EQ(i, 3);  // truncates
  encodeAverage(DataType::kFloat16, 7, 3, out);
  uint16_t h;
  std::memcpy(&h, out, 2);
  EXPECT_EQ(h, floatToHalf(7.0f / 3.0f));
  encodeAverage(DataType::kFloat64, 7, 3, out);
  double d;
  std::memcpy(&d, out, 8);
  EXPECT_EQ(d, 7.0 / 3.0);
}

TEST(PerfData, GatherAndBroadcastExpectEveryRanksOwnData) {
  PerfCase c;
  c.kind = CollectiveKind::kAllGather;
  c.dtype = DataType::kInt32;
  c.nranks = 3;
  c.rank = 1;
  c.shape = perfShape(c.kind, 3 * 4 * 10, c.dtype, 3, 1);
  std::vector<int32_t> out(30);
  for (int r = 0; r < 3; ++r) {
    PerfCase rc = c;
    rc.rank = r;
    fillInput(rc, out.data() + 10 * r, 0, 10);
  }
  EXPECT_EQ(countWrong(c, out.data()), 0u);
  std::swap(out[0], out[10]);  // blocks of ranks 0 and 1 mixed up
  EXPECT_EQ(countWrong(c, out.data()), 2u);

  c.kind = CollectiveKind::kBroadcast;
  c.root = 2;
  c.shape = perfShape(c.kind, 40, c.dtype, 3, 1);
  PerfCase root = c;
  root.rank = 2;
  fillInput(root, out.data(), 0, 10);
  EXPECT_EQ(countWrong(c, out.data()), 0u);
  fillSentinel(out.data(), 40);
  EXPECT_EQ(countWrong(c, out.data()), 10u);

  c.kind = CollectiveKind::kReduce;  // only the root's output is checked
  EXPECT_EQ(countWrong(c, out.data()), 0u);
}

}  // namespace
}  // namespace collie::tools
