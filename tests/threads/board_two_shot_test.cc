// The board's all-reduce in two shots (docs/decisions/two-shot-board.md) on 2, 3 and 4
// shm ranks as threads: sizes whose shares split unevenly, in place and out of place,
// sum, avg, max and a bfloat16 sum. Every rank's bytes equal the one-shot board's
// (COLLIE_SHM_TWOSHOT_MIN=0) bit for bit, since both reduce each element in rank order,
// and a float sum equals the float64 reference. The share counter shows the two-shot
// path ran. Ranks whose knobs differ run the largest minimum alike.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/team/board_collectives.h"
#include "support/rank_threads.h"
#include "support/reference.h"

namespace collie {
namespace {

using testing::Failures;

std::vector<std::unique_ptr<Communicator>> make(int nranks, const std::string& twoShotMin) {
  Options options;
  options.transport = "shm";
  options.algorithm = Algorithm::kBoard;
  options.timeout = std::chrono::seconds(30);
  // A CPU per rank, so that the thresholds are the configured ones on this 2-core host.
  options.config = {{"COLLIE_SHM_TWOSHOT_MIN", twoShotMin}, {"COLLIE_CPUS", "8"}};
  return testing::makeCommunicators(nranks, options);
}

struct Case {
  DataType dtype;
  ReduceOp op;
  size_t count;
  bool inPlace;
};

// Every rank's output of `c` on `comms`, from testing::makeInput.
std::vector<std::vector<uint8_t>> run(std::vector<std::unique_ptr<Communicator>>& comms,
                                      const Case& c, Failures* failures) {
  const int n = static_cast<int>(comms.size());
  std::vector<std::vector<uint8_t>> outputs(n);
  testing::onEveryRank(n, [&](int r) {
    std::vector<uint8_t> in = testing::makeInput(c.dtype, c.op, r, c.count);
    std::vector<uint8_t> out(in.size(), 0xee);
    uint8_t* dst = c.inPlace ? in.data() : out.data();
    Result<Work> work = comms[r]->allReduce(in.data(), dst, c.count, c.dtype, c.op);
    Status status = work.isOk() ? work->wait() : work.status();
    if (!status.isOk()) failures->add("rank " + std::to_string(r) + ": " + status.toString());
    outputs[r].assign(dst, dst + in.size());
  });
  return outputs;
}

class BoardTwoShotTest : public ::testing::TestWithParam<int> {};

TEST_P(BoardTwoShotTest, EqualsTheOneShotBoardBitForBitOnEveryRank) {
  const int n = GetParam();
  auto oneShot = make(n, "0");
  auto twoShot = make(n, "4K");
  ASSERT_EQ(oneShot.size(), static_cast<size_t>(n));
  ASSERT_EQ(twoShot.size(), static_cast<size_t>(n));
  std::vector<Case> cases;
  for (size_t count : {size_t{1021}, size_t{4099}, size_t{65535}}) {  // 4-256 KiB of floats
    for (bool inPlace : {false, true}) {
      cases.push_back({DataType::kFloat32, ReduceOp::kSum, count, inPlace});
      cases.push_back({DataType::kFloat32, ReduceOp::kAvg, count, inPlace});
      cases.push_back({DataType::kInt32, ReduceOp::kMax, count, inPlace});
    }
  }
  cases.push_back({DataType::kBFloat16, ReduceOp::kSum, 3001, false});
  cases.push_back({DataType::kFloat64, ReduceOp::kSum, 32767, true});
  Failures failures;
  const uint64_t before = boardTwoShotCount();
  uint64_t expectedShots = 0;
  for (const Case& c : cases) {
    const std::string what = std::string(dataTypeName(c.dtype)) + " " +
                             std::string(reduceOpName(c.op)) + " of " + std::to_string(c.count) +
                             (c.inPlace ? " in place" : " out of place");
    std::vector<std::vector<uint8_t>> want = run(oneShot, c, &failures);
    std::vector<std::vector<uint8_t>> got = run(twoShot, c, &failures);
    if (c.count * dataTypeSize(c.dtype) >= 4096) expectedShots += n;
    for (int r = 0; r < n; ++r) {
      if (got[r] != want[0] || want[r] != want[0]) {
        failures.add(what + ": rank " + std::to_string(r) + " differs from rank 0's one-shot");
      }
    }
    if (c.dtype == DataType::kFloat32 && c.op == ReduceOp::kSum) {
      std::vector<uint8_t> reference = testing::expectedReduction(c.dtype, c.op, n, 0, c.count);
      if (got[0] != reference) failures.add(what + ": not the float64 reference");
    }
  }
  for (const std::string& message : failures.messages) ADD_FAILURE() << message;
  EXPECT_EQ(boardTwoShotCount() - before, expectedShots);
}

// Ranks whose minimums differ run the largest alike: with 4K and 64K one shot at 32 KiB
// and two at 64 KiB; with 4K and 0 (never) one shot at both.
TEST(BoardTwoShotAgreement, RanksTakeTheLargestMinimumAnyRankSet) {
  constexpr int kRanks = 2;
  for (const char* other : {"64K", "0"}) {
    Options options;
    options.transport = "shm";
    options.algorithm = Algorithm::kBoard;
    options.timeout = std::chrono::seconds(30);
    auto comms = testing::makeCommunicators(kRanks, options, [&](int r, Options* mine) {
      mine->config = {{"COLLIE_SHM_TWOSHOT_MIN", r == 0 ? "4K" : other}, {"COLLIE_CPUS", "8"}};
    });
    ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
    Failures failures;
    for (size_t count : {size_t{8192}, size_t{16384}}) {  // 32 KiB, then 64 KiB
      const uint64_t before = boardTwoShotCount();
      std::vector<std::vector<uint8_t>> got =
          run(comms, {DataType::kFloat32, ReduceOp::kSum, count, false}, &failures);
      std::vector<uint8_t> reference =
          testing::expectedReduction(DataType::kFloat32, ReduceOp::kSum, kRanks, 0, count);
      for (int r = 0; r < kRanks; ++r) {
        if (got[r] != reference) failures.add("rank " + std::to_string(r) + " is wrong");
      }
      const bool twoShots = count == 16384 && std::string(other) == "64K";
      EXPECT_EQ(boardTwoShotCount() - before, twoShots ? 2u : 0u)
          << "minimums 4K and " << other << ", " << count * 4 << " bytes";
    }
    for (const std::string& message : failures.messages) ADD_FAILURE() << other << ": " << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, BoardTwoShotTest, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace collie
