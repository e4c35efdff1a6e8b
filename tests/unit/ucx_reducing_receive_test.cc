// ReducingReceive (transports/ucx): a message reduced fragment by fragment, at byte
// offsets that cut elements, in any order, from addresses not aligned for the element
// type, equals the whole message reduced at once.
#include "transports/ucx/ucx_reducing_receive.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "support/reference.h"

namespace collie {
namespace {

struct Fragment {
  size_t offset;
  size_t length;
};

// Cuts [0, bytes) at `cuts` random byte positions and shuffles the pieces.
std::vector<Fragment> randomFragments(size_t bytes, size_t cuts, std::mt19937& rng) {
  std::vector<size_t> at = {0, bytes};
  std::uniform_int_distribution<size_t> position(1, bytes > 1 ? bytes - 1 : 1);
  for (size_t i = 0; i < cuts && bytes > 1; ++i) at.push_back(position(rng));
  std::sort(at.begin(), at.end());
  at.erase(std::unique(at.begin(), at.end()), at.end());
  std::vector<Fragment> fragments;
  for (size_t i = 0; i + 1 < at.size(); ++i) fragments.push_back({at[i], at[i + 1] - at[i]});
  std::shuffle(fragments.begin(), fragments.end(), rng);
  return fragments;
}

class ReducingReceiveTest
    : public ::testing::TestWithParam<std::tuple<DataType, ReduceOp, bool /*inPlace*/>> {};

TEST_P(ReducingReceiveTest, FragmentsInAnyOrderEqualTheReference) {
  const auto [dtype, op, inPlace] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(dtype) * 31 + static_cast<unsigned>(op));
  for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{65537}}) {
    for (size_t cuts : {size_t{0}, size_t{3}, size_t{40}}) {
      const std::vector<uint8_t> incoming = testing::makeInput(dtype, op, 1, count);
      const std::vector<uint8_t> own = testing::makeInput(dtype, op, 0, count);
      const std::vector<uint8_t> expected = testing::expectedReduction(dtype, op, 2, 0, count);
      std::vector<uint8_t> output(own.size(), 0xEE);
      std::vector<uint8_t> inout = own;
      ReduceOnReceive reduce;
      reduce.own = inPlace ? inout.data() : own.data();
      reduce.dst = inPlace ? inout.data() : output.data();
      reduce.dtype = dtype;
      reduce.op = op;
      reduce.divisor = op == ReduceOp::kAvg ? 2 : 0;
      reduce.incomingFirst = cuts == 3;  // the operand order must not matter here
      reduce.kernels = &hostReduceBackend();
      ucx::ReducingReceive receive;
      receive.start(reduce, incoming.size());
      // Like UCX's receive buffer: each fragment lies after headers of any length, so at
      // addresses not aligned for the element type (shifts 3, 6, 1, 4, ... bytes).
      std::vector<uint8_t> carrier;
      size_t shift = 0;
      for (const Fragment& f : randomFragments(incoming.size(), cuts, rng)) {
        shift = (shift + 3) % 8;
        carrier.assign(f.length + 8, 0);
        std::memcpy(carrier.data() + shift, incoming.data() + f.offset, f.length);
        receive.apply(f.offset, carrier.data() + shift, f.length);
      }
      EXPECT_EQ(receive.pendingElements(), 0u);
      EXPECT_EQ(inPlace ? inout : output, expected)
          << dataTypeName(dtype) << " " << reduceOpName(op) << " count " << count << " cuts "
          << cuts;
    }
  }
}

TEST(ReducingReceive, AnElementCutIntoSingleBytesIsReducedOnceAllArrived) {
  const std::vector<uint8_t> incoming =
      testing::makeInput(DataType::kFloat64, ReduceOp::kSum, 1, 3);
  const std::vector<uint8_t> own = testing::makeInput(DataType::kFloat64, ReduceOp::kSum, 0, 3);
  std::vector<uint8_t> output(own.size(), 0);
  ReduceOnReceive reduce{output.data(), own.data(),          DataType::kFloat64, ReduceOp::kSum, 0,
                         false,         &hostReduceBackend()};
  ucx::ReducingReceive receive;
  receive.start(reduce, incoming.size());
  // Element 1 (bytes 8..15) arrives one byte at a time, last byte last.
  for (size_t b = 8; b < 15; ++b) receive.apply(b, incoming.data() + b, 1);
  EXPECT_EQ(receive.pendingElements(), 1u);
  EXPECT_TRUE(std::all_of(output.begin() + 8, output.end(), [](uint8_t v) { return v == 0; }));
  receive.apply(0, incoming.data(), 8);
  receive.apply(16, incoming.data() + 16, 8);
  receive.apply(15, incoming.data() + 15, 1);
  EXPECT_EQ(receive.pendingElements(), 0u);
  EXPECT_EQ(output, testing::expectedReduction(DataType::kFloat64, ReduceOp::kSum, 2, 0, 3));
}

std::vector<std::tuple<DataType, ReduceOp, bool>> allCases() {
  std::vector<std::tuple<DataType, ReduceOp, bool>> cases;
  for (int d = 0; d < kNumDataTypes; ++d) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      if (!isValidFor(static_cast<ReduceOp>(o), static_cast<DataType>(d))) continue;
      for (bool inPlace : {false, true}) {
        cases.emplace_back(static_cast<DataType>(d), static_cast<ReduceOp>(o), inPlace);
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, ReducingReceiveTest, ::testing::ValuesIn(allCases()));

}  // namespace
}  // namespace collie
