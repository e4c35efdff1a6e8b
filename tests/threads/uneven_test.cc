// All-gather and reduce-scatter with a count per rank (Communicator::allGatherV,
// reduceScatterV) over real transports, ranks as threads: shm and tcp, 2-4 ranks, counts
// uneven with empty blocks, all empty, and beyond the inline limit. All-gather-v: every
// byte equals the senders' and the element past the end keeps its sentinel, also in
// place. Reduce-scatter-v (float32 sum): each rank's block equals the float64 reference
// within rounding, and bit for bit the float32 sum in the documented ring order (rank
// r + 1's block first, ..., rank r last). Ranks that pass other counts fail with
// Mismatch; bad arguments are refused naming the rank. COLLIE_TEST_QUICK=1: 3 ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "support/quick_matrix.h"
#include "support/rank_threads.h"

namespace collie {
namespace {

using namespace std::chrono_literals;  // NOLINT(build/namespaces)
using testing::makeCommunicators;
using testing::onEveryRank;
using testing::quickMatrix;

constexpr int32_t kSentinel = -777;

struct UnevenCase {
  std::string transport;
  int nranks;
};

void PrintTo(const UnevenCase& c, std::ostream* os) { *os << c.transport << " " << c.nranks; }

// Count patterns: uneven with an empty block, all empty, and (full run) one block beyond
// the inline limit of 64 KiB per rank.
std::vector<std::vector<size_t>> patterns(int n) {
  std::vector<size_t> uneven(n), empty(n, 0), large(n);
  for (int p = 0; p < n; ++p) {
    uneven[p] = static_cast<size_t>((p * 7 + 3) % 11);
    large[p] = p == 0 ? 30011 : static_cast<size_t>(p * 1000 + 1);
  }
  uneven[n - 1] = 0;
  if (quickMatrix()) return {uneven, empty};
  return {uneven, empty, large};
}

std::string text(const std::vector<size_t>& counts) {
  std::string s = "counts";
  for (size_t c : counts) s += " " + std::to_string(c);
  return s;
}

std::vector<size_t> offsetsOf(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size());
  for (size_t p = 1; p < counts.size(); ++p) offsets[p] = offsets[p - 1] + counts[p - 1];
  return offsets;
}

size_t totalOf(const std::vector<size_t>& counts) {
  size_t total = 0;
  for (size_t c : counts) total += c;
  return total;
}

int32_t intOf(int rank, size_t i) { return static_cast<int32_t>(rank * 1000003 + i % 9973); }
// Values whose float32 sums round, so that the order of the additions shows.
float floatOf(int rank, size_t i) {
  return 1.0f / static_cast<float>(3 + rank) + static_cast<float>(i % 97) * 0.37f;
}

class UnevenTest : public ::testing::TestWithParam<UnevenCase> {
 protected:
  std::vector<std::unique_ptr<Communicator>> make() {
    Options options;
    options.transport = GetParam().transport;
    options.timeout = 20s;
    return makeCommunicators(GetParam().nranks, options);
  }
};

TEST_P(UnevenTest, AllGatherVDeliversEveryBlock) {
  const int n = GetParam().nranks;
  auto comms = make();
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  for (const std::vector<size_t>& counts : patterns(n)) {
    SCOPED_TRACE(text(counts));
    const std::vector<size_t> offsets = offsetsOf(counts);
    const size_t total = totalOf(counts);
    for (bool inPlace : {false, true}) {
      onEveryRank(n, [&](int r) {
        std::vector<int32_t> in(counts[r]), out(total + 1, kSentinel);
        for (size_t i = 0; i < counts[r]; ++i) in[i] = intOf(r, i);
        const int32_t* send = in.data();
        if (inPlace) {
          std::copy(in.begin(), in.end(), out.begin() + offsets[r]);
          send = out.data() + offsets[r];
        }
        Result<Work> work = comms[r]->allGatherV(send, out.data(), counts, DataType::kInt32);
        ASSERT_TRUE(work.isOk()) << work.status().toString();
        Status done = work->wait(30s);
        ASSERT_TRUE(done.isOk()) << "rank " << r << ": " << done.toString();
        for (int p = 0; p < n; ++p) {
          for (size_t i = 0; i < counts[p]; ++i) {
            ASSERT_EQ(out[offsets[p] + i], intOf(p, i))
                << "rank " << r << " block of " << p << " at " << i << " in place " << inPlace;
          }
        }
        EXPECT_EQ(out[total], kSentinel) << "rank " << r << " wrote past the gathered buffer";
      });
    }
  }
}

TEST_P(UnevenTest, ReduceScatterVSumsInRingOrder) {
  const int n = GetParam().nranks;
  auto comms = make();
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  for (const std::vector<size_t>& counts : patterns(n)) {
    SCOPED_TRACE(text(counts));
    const std::vector<size_t> offsets = offsetsOf(counts);
    const size_t total = totalOf(counts);
    onEveryRank(n, [&](int r) {
      std::vector<float> in(total), out(counts[r] + 1, -1.0f);
      for (size_t i = 0; i < total; ++i) in[i] = floatOf(r, i);
      Result<Work> work = comms[r]->reduceScatterV(in.data(), out.data(), counts,
                                                   DataType::kFloat32, ReduceOp::kSum);
      ASSERT_TRUE(work.isOk()) << work.status().toString();
      Status done = work->wait(30s);
      ASSERT_TRUE(done.isOk()) << "rank " << r << ": " << done.toString();
      for (size_t i = 0; i < counts[r]; ++i) {
        const size_t at = offsets[r] + i;
        double reference = 0;
        for (int p = 0; p < n; ++p) reference += floatOf(p, at);
        // The documented order: rank r + 1's element first, then r + 2, ..., r last.
        float ring = floatOf((r + 1) % n, at);
        for (int s = 2; s <= n; ++s) ring += floatOf((r + s) % n, at);
        ASSERT_NEAR(out[i], reference, 1e-5 * std::fabs(reference) + 1e-6)
            << "rank " << r << " element " << i;
        uint32_t got, want;
        std::memcpy(&got, &out[i], 4);
        std::memcpy(&want, &ring, 4);
        ASSERT_EQ(got, want) << "rank " << r << " element " << i << ": not the ring order's sum";
      }
      EXPECT_EQ(out[counts[r]], -1.0f) << "rank " << r << " wrote past its block";
    });
  }
}

// fault: ranks of an all-gather-v / reduce-scatter-v pass different counts | every rank
// fails with Mismatch (or the failure it is sent), one naming the count | uneven_test
TEST_P(UnevenTest, DifferentCountsFailWithMismatch) {
  const int n = GetParam().nranks;
  if (n != 3) GTEST_SKIP() << "mismatch cases run at 3 ranks";
  auto comms = make();
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  for (bool reduce : {false, true}) {
    std::vector<Status> results(n);
    onEveryRank(n, [&](int r) {
      // Rank 1 believes rank 2's block is empty; the totals differ too.
      const std::vector<size_t> counts =
          r == 1 ? std::vector<size_t>{4, 4, 0} : std::vector<size_t>{4, 4, 4};
      std::vector<int32_t> in(12, r), out(12, kSentinel);
      Result<Work> work =
          reduce ? comms[r]->reduceScatterV(in.data(), out.data(), counts, DataType::kInt32,
                                            ReduceOp::kSum)
                 : comms[r]->allGatherV(in.data(), out.data(), counts, DataType::kInt32);
      ASSERT_TRUE(work.isOk()) << work.status().toString();
      results[r] = work->wait(30s);
    });
    bool namedCount = false;
    for (int r = 0; r < n; ++r) {
      ASSERT_FALSE(results[r].isOk()) << "rank " << r << " completed with other counts";
      EXPECT_TRUE(results[r].code() == StatusCode::kMismatch ||
                  results[r].code() == StatusCode::kRemoteError)
          << "rank " << r << ": " << results[r].toString();
      namedCount = namedCount || results[r].message().find("count differs") != std::string::npos;
    }
    EXPECT_TRUE(namedCount) << results[0].toString();
    // The communicator is failed now (sticky); the next case makes new ones.
    comms = make();
    ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  }
}

std::vector<UnevenCase> unevenCases() {
  std::vector<UnevenCase> cases;
  const std::vector<int> rankCounts =
      quickMatrix() ? std::vector<int>{3} : std::vector<int>{2, 3, 4};
  for (const char* transport : {"shm", "tcp"}) {
    for (int n : rankCounts) cases.push_back({transport, n});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Uneven, UnevenTest, ::testing::ValuesIn(unevenCases()),
                         [](const ::testing::TestParamInfo<UnevenCase>& info) {
                           return info.param.transport + "_" + std::to_string(info.param.nranks) +
                                  "ranks";
                         });

// Bad arguments are refused before anything is queued, naming the rank and the argument.
TEST(UnevenArgs, RefusesBadArguments) {
  auto comms = makeCommunicators(2, Options{});
  ASSERT_EQ(comms.size(), 2u);
  std::vector<int32_t> buf(64);
  auto a = comms[1]->allGatherV(buf.data(), buf.data() + 32, {1, 2, 3}, DataType::kInt32);
  ASSERT_FALSE(a.isOk());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("allGatherV on rank 1: counts needs 2 entries"),
            std::string::npos)
      << a.status().toString();
  // Overlapping other than in place (rank 1's block starts at element 4).
  a = comms[1]->allGatherV(buf.data() + 1, buf.data(), {4, 4}, DataType::kInt32);
  ASSERT_FALSE(a.isOk());
  EXPECT_NE(a.status().message().find("overlap other than in place"), std::string::npos)
      << a.status().toString();
  auto b = comms[0]->reduceScatterV(nullptr, buf.data(), {4, 4}, DataType::kInt32, ReduceOp::kSum);
  ASSERT_FALSE(b.isOk());
  EXPECT_NE(b.status().message().find("reduceScatterV on rank 0"), std::string::npos)
      << b.status().toString();
  b = comms[0]->reduceScatterV(buf.data(), buf.data() + 32, {4, 4}, DataType::kFloat32,
                               ReduceOp::kBand);
  ASSERT_FALSE(b.isOk());
  EXPECT_NE(b.status().message().find("needs an integer dtype"), std::string::npos)
      << b.status().toString();
}

}  // namespace
}  // namespace collie
