// An all-reduce gives the same bits whichever path of its plan runs it
// (core/plan/fold_order.h). On 3 and 4 shm ranks as threads, above the board and within
// COLLIE_TUNE_ADAPT_MAX, the engine runs the first six calls of a size class on the ring
// and the next six through cma (core/engine/single_copy_choice.h), and registered buffers
// go direct. The values' sums round (random magnitudes), so the order shows: every call's
// output on every rank must equal the first call's (the ring's) bit for bit, and for the
// float sum differ from the rank-order sum somewhere (else the test could not tell the
// orders apart). Float32 sum and average and bfloat16 sum, in and out of place, with the
// tuner's chunk and with 64 KiB chunks on 2 channels (many rounds and segments). About
// 5 s.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "collie/shared_memory.h"
#include "core/common/half.h"
#include "core/team/cross_memory.h"
#include "core/team/direct_share.h"
#include "support/quick_matrix.h"
#include "support/rank_threads.h"
#include "support/rounding_values.h"
#include "support/sanitizers.h"

namespace collie {
namespace {

using testing::Failures;

struct Case {
  DataType dtype;
  ReduceOp op;
  bool inPlace;
};

void fill(uint8_t* out, int rank, size_t count, DataType dtype) {
  for (size_t i = 0; i < count; ++i) {
    if (dtype == DataType::kBFloat16) {
      const BFloat16 b = floatToBFloat16(testing::roundingValue(rank, i));
      std::memcpy(out + 2 * i, &b, 2);
    } else {
      const float f = testing::roundingValue(rank, i);
      std::memcpy(out + 4 * i, &f, 4);
    }
  }
}

// How many float32 elements the rank-order sum gets other than `result`.
size_t differencesFromRankOrder(const std::vector<uint8_t>& result, int n, size_t count) {
  size_t differ = 0;
  for (size_t i = 0; i < count; ++i) {
    float sum = testing::roundingValue(0, i);
    for (int r = 1; r < n; ++r) sum += testing::roundingValue(r, i);
    float got;
    std::memcpy(&got, result.data() + 4 * i, 4);
    differ += std::memcmp(&sum, &got, 4) != 0 ? 1 : 0;
  }
  return differ;
}

struct Shape {
  int nranks;
  size_t chunkBytes;  // 0: the tuner's
};

class FoldOrderTest : public ::testing::TestWithParam<Shape> {};

TEST_P(FoldOrderTest, RingCmaAndDirectGiveTheSameBits) {
  const Shape shape = GetParam();
  const int n = shape.nranks;
  const std::vector<Case> all = {{DataType::kFloat32, ReduceOp::kSum, false},
                                 {DataType::kFloat32, ReduceOp::kAvg, true},
                                 {DataType::kBFloat16, ReduceOp::kSum, true}};
  // The sanitizer runs (quick matrix) take one case per shape, each case in two shapes.
  const std::vector<Case> cases =
      testing::quickMatrix() ? std::vector<Case>{all[(n + (shape.chunkBytes ? 1 : 0)) % 3]} : all;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(dataTypeName(c.dtype)) + " " + std::string(reduceOpName(c.op)) +
                 (c.inPlace ? " in place" : " out of place"));
    Options options;
    options.transport = "shm";
    options.timeout = std::chrono::seconds(60);
    // The plan direct>cma>ring from fixed FIFO constants (as team_collectives_test).
    options.config = {{"COLLIE_TUNE_ALPHA_US", "20"}, {"COLLIE_TUNE_BW_GBPS", "10"}};
    if (shape.chunkBytes != 0) {
      options.chunkBytes = shape.chunkBytes;
      options.nchannels = 2;
    }
    auto comms = testing::makeCommunicators(n, options);
    ASSERT_EQ(comms.size(), static_cast<size_t>(n));
    // An odd count past the board's 2 MiB a rank, within 8 MiB.
    const size_t es = dataTypeSize(c.dtype);
    const size_t count = (3u << 20) / es + 7;
    const size_t bytes = count * es;
    std::vector<std::vector<uint8_t>> first(n);  // call 1's output (the ring's)
    Failures failures;
    auto call = [&](int index, const std::function<std::pair<uint8_t*, uint8_t*>(int)>& buffers) {
      testing::onEveryRank(n, [&](int r) {
        auto [in, out] = buffers(r);
        if (c.inPlace) in = out;
        fill(in, r, count, c.dtype);
        Result<Work> work = comms[r]->allReduce(in, out, count, c.dtype, c.op);
        Status status = work.isOk() ? work->wait() : work.status();
        if (!status.isOk()) {
          failures.add("call " + std::to_string(index) + " rank " + std::to_string(r) + ": " +
                       status.toString());
          return;
        }
        if (index == 1) {
          first[r].assign(out, out + bytes);
          return;
        }
        // Every rank against rank 0's first output: the same bits on every rank too.
        if (first[0].size() != bytes) return;  // call 1 failed on rank 0 (reported)
        if (std::memcmp(out, first[0].data(), bytes) != 0) {
          size_t at = 0;
          while (at < bytes && out[at] == first[0][at]) ++at;
          failures.add("call " + std::to_string(index) + " rank " + std::to_string(r) + ": byte " +
                       std::to_string(at) + " differs from the ring's first call");
        }
      });
    };
    std::vector<std::vector<uint8_t>> heapIn(n, std::vector<uint8_t>(bytes)),
        heapOut(n, std::vector<uint8_t>(bytes));
    auto heap = [&](int r) { return std::make_pair(heapIn[r].data(), heapOut[r].data()); };
    const uint64_t cmaBefore = crossMemoryShareCount();
    for (int i = 1; i <= 6; ++i) call(i, heap);
    ASSERT_EQ(crossMemoryShareCount() - cmaBefore, 0u) << "calls 1..6 go the ring";
    for (int i = 7; i <= 12; ++i) call(i, heap);
    if (!failures.messages.empty() && failures.messages[0].find("denied") != std::string::npos) {
      GTEST_SKIP() << "cross-memory attach is denied here: " << failures.messages[0];
    }
    EXPECT_EQ(crossMemoryShareCount() - cmaBefore, 6u * n) << "calls 7..12 go cma";
    if (c.dtype == DataType::kFloat32 && c.op == ReduceOp::kSum) {
      ASSERT_EQ(first[0].size(), bytes);
      EXPECT_GT(differencesFromRankOrder(first[0], n, count), 0u)
          << "the values do not tell the ring's order from rank order";
    }
#if !COLLIE_TEST_TSAN  // as team_collectives_test: TSan cannot see the board's edge
    std::vector<uint8_t*> send(n), recv(n);
    for (int r = 0; r < n; ++r) {
      send[r] = static_cast<uint8_t*>(*allocShared(bytes));
      recv[r] = static_cast<uint8_t*>(*allocShared(bytes));
      ASSERT_TRUE(comms[r]->registerBuffer(send[r], bytes).isOk());
      ASSERT_TRUE(comms[r]->registerBuffer(recv[r], bytes).isOk());
    }
    const uint64_t directBefore = directShareCount();
    const int directCalls = testing::quickMatrix() ? 1 : 2;
    for (int i = 0; i < directCalls; ++i) {
      call(13 + i, [&](int r) { return std::make_pair(send[r], recv[r]); });
    }
    EXPECT_EQ(directShareCount() - directBefore, static_cast<uint64_t>(directCalls * n))
        << "registered buffers go direct";
    comms.clear();
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(freeShared(send[r]).isOk());
      EXPECT_TRUE(freeShared(recv[r]).isOk());
    }
#endif
    for (const std::string& message : failures.messages) ADD_FAILURE() << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FoldOrderTest,
                         ::testing::Values(Shape{3, 0}, Shape{4, 0}, Shape{3, 64 << 10},
                                           Shape{4, 64 << 10}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return std::to_string(info.param.nranks) + "ranks_" +
                                  (info.param.chunkBytes ? "chunk64K" : "tunedChunk");
                         });

}  // namespace
}  // namespace collie
