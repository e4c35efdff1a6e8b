// Broadcast and reduce whose ranks name different roots (issue 22, item 6): every rank
// fails within milliseconds with an error that names the root field and both values, on
// every transport and every algorithm that serves rooted collectives (the shm board,
// chain and tree schedules), at small and large sizes. Before the root agreement, a
// broadcast's self-appointed roots both finished their sends and reported success, and
// a reduce's waited the whole timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "support/rank_threads.h"

namespace collie {
namespace {

using namespace std::chrono_literals;  // NOLINT(build/namespaces)
using testing::makeCommunicators;
using testing::onEveryRank;
using Clock = std::chrono::steady_clock;

constexpr int32_t kSentinel = -777;

struct RootCase {
  std::string transport;
  Algorithm algorithm;
  size_t bytes;
  int nranks;
};

void PrintTo(const RootCase& c, std::ostream* os) {
  *os << c.transport << " " << algorithmName(c.algorithm) << " " << c.bytes << " B " << c.nranks
      << " ranks";
}

class RootAgreementTest : public ::testing::TestWithParam<RootCase> {
 protected:
  // The case's communicators; a timeout far longer than the check may take (reaching it
  // would be the old behaviour).
  std::vector<std::unique_ptr<Communicator>> make() {
    Options options;
    options.transport = GetParam().transport;
    options.algorithm = GetParam().algorithm;
    options.timeout = 20s;
    return makeCommunicators(GetParam().nranks, options);
  }
};

// fault: broadcast or reduce where ranks name different roots | every rank fails at once,
// naming the root field and both values | root_agreement_test
TEST_P(RootAgreementTest, DifferingRootsFailEveryRankAtOnce) {
  const RootCase& param = GetParam();
  for (const bool broadcast : {true, false}) {
    SCOPED_TRACE(broadcast ? "broadcast" : "reduce");
    auto comms = make();
    ASSERT_EQ(comms.size(), static_cast<size_t>(param.nranks));
    const size_t count = param.bytes / sizeof(int32_t);
    std::vector<Status> results(param.nranks);
    std::vector<Clock::duration> took(param.nranks);
    onEveryRank(param.nranks, [&](int r) {
      // Rank 1 names itself the root; every other rank names rank 0.
      const int root = r == 1 ? 1 : 0;
      std::vector<int32_t> in(count, r + 1), out(count, kSentinel);
      const auto start = Clock::now();
      Result<Work> work =
          broadcast ? comms[r]->broadcast(in.data(), out.data(), count, DataType::kInt32, root)
                    : comms[r]->reduce(in.data(), out.data(), count, DataType::kInt32,
                                       ReduceOp::kSum, root);
      ASSERT_TRUE(work.isOk()) << work.status().toString();
      results[r] = work->wait(30s);
      took[r] = Clock::now() - start;
    });
    for (int r = 0; r < param.nranks; ++r) {
      const Status& st = results[r];
      ASSERT_FALSE(st.isOk()) << "rank " << r << " completed a collective whose ranks named "
                              << "different roots";
      EXPECT_TRUE(st.code() == StatusCode::kMismatch || st.code() == StatusCode::kRemoteError)
          << "rank " << r << ": " << st.toString();
      EXPECT_NE(st.message().find("root"), std::string::npos)
          << "rank " << r << " does not name the root: " << st.toString();
      EXPECT_LT(took[r], 2s) << "rank " << r << ": " << st.toString();
    }
    // The rank that saw a disagreement itself names both values.
    bool namedBoth = false;
    for (const Status& st : results) {
      namedBoth = namedBoth ||
                  (st.code() == StatusCode::kMismatch &&
                   st.message().find("this rank 0") != std::string::npos) ||
                  (st.code() == StatusCode::kMismatch &&
                   st.message().find("this rank 1") != std::string::npos);
    }
    EXPECT_TRUE(namedBoth) << results[0].toString();
  }
}

// The agreement costs no correctness: the same collectives with one root still give
// every rank the right bytes (a broadcast of the root's input, a reduce into the root).
TEST_P(RootAgreementTest, AgreeingRootsStillComputeTheResult) {
  const RootCase& param = GetParam();
  auto comms = make();
  ASSERT_EQ(comms.size(), static_cast<size_t>(param.nranks));
  const size_t count = param.bytes / sizeof(int32_t);
  const int root = param.nranks - 1;
  onEveryRank(param.nranks, [&](int r) {
    std::vector<int32_t> in(count), out(count, kSentinel);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(i % 1000) + r;
    auto work = comms[r]->broadcast(in.data(), out.data(), count, DataType::kInt32, root);
    ASSERT_TRUE(work.isOk());
    ASSERT_TRUE(work->wait(30s).isOk());
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(out[i], static_cast<int32_t>(i % 1000) + root) << "rank " << r << " at " << i;
    }
    std::fill(out.begin(), out.end(), kSentinel);
    work = comms[r]->reduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum, root);
    ASSERT_TRUE(work.isOk());
    ASSERT_TRUE(work->wait(30s).isOk());
    if (r != root) return;
    const int32_t rankSum = param.nranks * (param.nranks - 1) / 2;
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(out[i], static_cast<int32_t>(i % 1000) * param.nranks + rankSum) << "at " << i;
    }
  });
}

std::vector<RootCase> rootCases() {
  std::vector<RootCase> cases;
  for (const char* transport : {"shm", "tcp"}) {
    for (Algorithm algorithm : {Algorithm::kAuto, Algorithm::kChain, Algorithm::kTree}) {
      for (size_t bytes : {size_t{8}, size_t{4096}, size_t{1} << 20}) {
        for (int nranks : {2, 3}) cases.push_back({transport, algorithm, bytes, nranks});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(TransportsAlgorithmsSizes, RootAgreementTest,
                         ::testing::ValuesIn(rootCases()),
                         [](const ::testing::TestParamInfo<RootCase>& info) {
                           return info.param.transport + "_" +
                                  std::string(algorithmName(info.param.algorithm)) + "_" +
                                  std::to_string(info.param.bytes) + "B_" +
                                  std::to_string(info.param.nranks) + "ranks";
                         });

}  // namespace
}  // namespace collie
