// Tree all-reduce, broadcast and reduce over real transports with ranks as threads:
// transport x nranks (1..16, powers of two and not; COLLIE_TEST_QUICK=1: 5 of them),
// every dtype and op, in place and not. Results are exact (tests/support/reference.h),
// bitwise identical on every rank, and identical from run to run.
#include <gtest/gtest.h>

#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "support/quick_matrix.h"
#include "support/rank_threads.h"
#include "support/reference.h"

namespace collie {
namespace {

using testing::expectedReduction;
using testing::makeInput;

using testing::Failures;

void runAndCheck(Communicator& comm, CollectiveKind kind, DataType dtype, ReduceOp op, size_t count,
                 bool inPlace, Failures* failures) {
  const int n = comm.size();
  const int r = comm.rank();
  const size_t es = dataTypeSize(dtype);
  const int root = n > 2 ? n - 2 : 0;
  std::vector<uint8_t> input = makeInput(dtype, op, r, count);
  std::vector<uint8_t> output(count * es, 0xEE);
  if (inPlace) output = input;
  const void* send = inPlace ? output.data() : input.data();
  std::vector<uint8_t> expected;
  Result<Work> work = invalidArgument("unset");
  if (kind == CollectiveKind::kAllReduce) {
    work = comm.allReduce(send, output.data(), count, dtype, op);
    expected = expectedReduction(dtype, op, n, 0, count);
  } else if (kind == CollectiveKind::kBroadcast) {
    work = comm.broadcast(send, output.data(), count, dtype, root);
    expected = makeInput(dtype, op, root, count);
  } else {
    work = comm.reduce(send, output.data(), count, dtype, op, root);
    expected = r == root ? expectedReduction(dtype, op, n, 0, count) : output;
  }
  std::string what = std::string(collectiveName(kind)) + " " + std::string(dataTypeName(dtype)) +
                     " " + std::string(reduceOpName(op)) + " count=" + std::to_string(count) +
                     (inPlace ? " in-place" : "") + " rank " + std::to_string(r);
  if (!work.isOk()) return failures->add(what + ": " + work.status().toString());
  Status status = work->wait(std::chrono::minutes(2));
  if (!status.isOk()) return failures->add(what + ": " + status.toString());
  if (output != expected) failures->add(what + ": wrong bytes");
}

class TreeCollectivesTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(TreeCollectivesTest, EveryDtypeAndOpIsExact) {
  const std::string transport = std::get<0>(GetParam());
  const int nranks = std::get<1>(GetParam());
  Options options;
  options.transport = transport;
  options.algorithm = Algorithm::kTree;
  options.chunkBytes = 4096;  // several pipelined chunks per collective
  options.timeout = std::chrono::seconds(60);
  auto comms = testing::makeCommunicators(nranks, options);
  ASSERT_EQ(comms.size(), static_cast<size_t>(nranks));
  Failures failures;
  // Fewer cases as ranks (threads on two cores) grow.
  const std::vector<size_t> counts =
      nranks <= 8 ? std::vector<size_t>{0, 1, 7, 1023, 70001} : std::vector<size_t>{1, 1023};
  testing::onEveryRank(nranks, [&](int r) {
    for (CollectiveKind kind :
         {CollectiveKind::kAllReduce, CollectiveKind::kBroadcast, CollectiveKind::kReduce}) {
      const bool reduces = kind != CollectiveKind::kBroadcast;
      for (int d = 0; d < kNumDataTypes; ++d) {
        for (int o = 0; o < (reduces ? kNumReduceOps : 1); ++o) {
          if (reduces && !testing::sampledOp(d, o, nranks)) continue;  // TSan: one op per dtype
          for (size_t i = 0; i < counts.size(); ++i) {
            runAndCheck(*comms[r], kind, static_cast<DataType>(d), static_cast<ReduceOp>(o),
                        counts[i], (i + d + o) % 2 == 0, &failures);
          }
        }
      }
    }
  });
  for (const std::string& message : failures.messages) ADD_FAILURE() << message;
}

TEST_P(TreeCollectivesTest, FloatSumIsBitwiseIdenticalOnEveryRankAndRun) {
  const std::string transport = std::get<0>(GetParam());
  const int nranks = std::get<1>(GetParam());
  Options options;
  options.transport = transport;
  options.algorithm = Algorithm::kTree;
  options.chunkBytes = 16384;
  auto comms = testing::makeCommunicators(nranks, options);
  ASSERT_EQ(comms.size(), static_cast<size_t>(nranks));
  const size_t count = nranks <= 8 ? 100003 : 20011;
  std::vector<std::vector<float>> outputs(2 * nranks, std::vector<float>(count));
  testing::onEveryRank(nranks, [&](int r) {
    std::mt19937 rng(99 + r);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> input(count);
    for (float& v : input) v = dist(rng);
    for (int run = 0; run < 2; ++run) {
      auto work = comms[r]->allReduce(input.data(), outputs[run * nranks + r].data(), count,
                                      DataType::kFloat32, ReduceOp::kSum);
      ASSERT_TRUE(work.isOk()) << work.status().toString();
      ASSERT_TRUE(work->wait().isOk());
    }
  });
  for (size_t i = 1; i < outputs.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(outputs[0].data(), outputs[i].data(), count * sizeof(float)))
        << "rank " << i % nranks << " run " << i / nranks << " differs from rank 0 run 0";
  }
}

// COLLIE_TEST_QUICK=1 (sanitizer runs): trivial, pair, odd, not a power of two, and a
// 3-level tree; the unsanitized run covers them all up to 16.
std::vector<int> rankCounts() {
  return testing::quickMatrix() ? std::vector<int>{1, 2, 3, 5, 8}
                                : std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16};
}

std::string name(const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
}

INSTANTIATE_TEST_SUITE_P(Transports, TreeCollectivesTest,
                         ::testing::Combine(::testing::Values("shm", "tcp"),
                                            ::testing::ValuesIn(rankCounts())),
                         name);

}  // namespace
}  // namespace collie
