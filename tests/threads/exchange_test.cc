// The exchanges (all-to-all, all-to-all with a count per peer, gather, scatter) over real
// transports, ranks as threads: every byte of every rank's output equals what the
// collective's definition puts there (and bytes outside it keep their sentinel), for
// shm and tcp, 2-4 ranks, sizes from 0 elements to beyond the inline limit, every
// all-to-all algorithm, in place (send == recv) on every rank and on some; and ranks
// that disagree (count, root, a peer's count) fail with Mismatch naming the field or the
// length. COLLIE_TEST_QUICK=1 runs a few cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
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

// The element i of the block that rank `from` sends to rank `to`.
int32_t valueOf(int from, int to, size_t i) {
  return static_cast<int32_t>(from * 1000003 + to * 10007 + static_cast<int32_t>(i % 9973));
}

struct ExchangeCase {
  std::string transport;
  int nranks;
  Algorithm algorithm;
};

void PrintTo(const ExchangeCase& c, std::ostream* os) {
  *os << c.transport << " " << c.nranks << " ranks " << algorithmName(c.algorithm);
}

std::vector<size_t> counts() {
  // 0, 1, uneven, and beyond the inline limit (64 KiB per rank) on the full run.
  if (quickMatrix()) return {0, 1, 1001};
  return {0, 1, 1001, 40000};
}

class ExchangeTest : public ::testing::TestWithParam<ExchangeCase> {
 protected:
  // The mismatch cases do not depend on the rank count: they run at 3 ranks only (CI time).
  bool mismatchCase() const { return GetParam().nranks == 3; }
  std::vector<std::unique_ptr<Communicator>> make() {
    Options options;
    options.transport = GetParam().transport;
    options.algorithm = GetParam().algorithm;
    options.timeout = 20s;
    return makeCommunicators(GetParam().nranks, options);
  }
};

// Out of place, then in place (send == recv) on every rank, then on even ranks only: in
// place is each rank's own choice (the engine copies its input aside first).
TEST_P(ExchangeTest, AllToAllDeliversEveryBlock) {
  const int n = GetParam().nranks;
  auto comms = make();
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  enum class InPlace { kNone, kEvery, kEvenRanks };
  for (size_t count : counts()) {
    for (InPlace mode : {InPlace::kNone, InPlace::kEvery, InPlace::kEvenRanks}) {
      SCOPED_TRACE("count " + std::to_string(count) +
                   ", in place: " + std::to_string(static_cast<int>(mode)));
      onEveryRank(n, [&](int r) {
        const bool inPlace = mode == InPlace::kEvery || (mode == InPlace::kEvenRanks && r % 2 == 0);
        std::vector<int32_t> in(count * n), out(count * n, kSentinel);
        for (int p = 0; p < n; ++p) {
          for (size_t i = 0; i < count; ++i) in[p * count + i] = valueOf(r, p, i);
        }
        std::vector<int32_t>& result = inPlace ? in : out;
        Result<Work> work = comms[r]->allToAll(in.data(), result.data(), count, DataType::kInt32);
        ASSERT_TRUE(work.isOk()) << work.status().toString();
        Status done = work->wait(30s);
        ASSERT_TRUE(done.isOk()) << "rank " << r << ": " << done.toString();
        for (int p = 0; p < n; ++p) {
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(result[p * count + i], valueOf(p, r, i))
                << "rank " << r << " block from " << p << " at " << i;
          }
        }
      });
    }
  }
}

// Counts per pair that differ, with zeros, and offsets with gaps: the receive blocks in
// reverse rank order.
size_t pairCount(int from, int to, size_t scale) {
  return static_cast<size_t>((from * 3 + to * 5 + 1) % 4) * scale + (from == to ? 1 : 0);
}

// Rank r's layout of pairCount blocks: send blocks in rank order, receive blocks in
// reverse rank order, each followed by a gap of that many elements.
struct UnequalLayout {
  std::vector<size_t> sendCounts, recvCounts, sendOffsets, recvOffsets;
  size_t sendEnd = 0, recvEnd = 0;  // elements each side spans, gaps included
};
UnequalLayout unequalLayout(int r, int n, size_t scale, size_t sendGap, size_t recvGap) {
  UnequalLayout l;
  l.sendCounts.resize(n);
  l.recvCounts.resize(n);
  l.sendOffsets.resize(n);
  l.recvOffsets.resize(n);
  for (int p = 0; p < n; ++p) {
    l.sendCounts[p] = pairCount(r, p, scale);
    l.sendOffsets[p] = l.sendEnd;
    l.sendEnd += l.sendCounts[p] + sendGap;
  }
  for (int p = n - 1; p >= 0; --p) {
    l.recvCounts[p] = pairCount(p, r, scale);
    l.recvOffsets[p] = l.recvEnd;
    l.recvEnd += l.recvCounts[p] + recvGap;
  }
  return l;
}

TEST_P(ExchangeTest, AllToAllVDeliversUnequalBlocks) {
  const int n = GetParam().nranks;
  auto comms = make();
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  for (size_t scale : quickMatrix() ? std::vector<size_t>{7} : std::vector<size_t>{7, 9000}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    onEveryRank(n, [&](int r) {
      const UnequalLayout l = unequalLayout(r, n, scale, 2, 3);
      std::vector<int32_t> in(l.sendEnd, kSentinel), out(l.recvEnd, kSentinel);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < l.sendCounts[p]; ++i) in[l.sendOffsets[p] + i] = valueOf(r, p, i);
      }
      Result<Work> work = comms[r]->allToAllV(in.data(), l.sendCounts, l.sendOffsets, out.data(),
                                              l.recvCounts, l.recvOffsets, DataType::kInt32);
      ASSERT_TRUE(work.isOk()) << work.status().toString();
      Status done = work->wait(30s);
      ASSERT_TRUE(done.isOk()) << "rank " << r << ": " << done.toString();
      std::vector<int32_t> want(l.recvEnd, kSentinel);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < l.recvCounts[p]; ++i) {
          want[l.recvOffsets[p] + i] = valueOf(p, r, i);
        }
      }
      ASSERT_EQ(out, want) << "rank " << r;
    });
  }
}

// With a count per peer in place: one buffer holds the send blocks (packed in rank
// order) and the receive blocks (in reverse rank order, at other offsets), so a block
// received lands over bytes still to be sent; the bytes in no receive block keep the
// input's.
TEST_P(ExchangeTest, AllToAllVInPlace) {
  const int n = GetParam().nranks;
  auto comms = make();
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  for (size_t scale : quickMatrix() ? std::vector<size_t>{7} : std::vector<size_t>{7, 9000}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    onEveryRank(n, [&](int r) {
      const UnequalLayout l = unequalLayout(r, n, scale, 0, 1);
      std::vector<int32_t> buf(std::max(l.sendEnd, l.recvEnd), kSentinel);
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < l.sendCounts[p]; ++i) buf[l.sendOffsets[p] + i] = valueOf(r, p, i);
      }
      std::vector<int32_t> want = buf;
      for (int p = 0; p < n; ++p) {
        for (size_t i = 0; i < l.recvCounts[p]; ++i) {
          want[l.recvOffsets[p] + i] = valueOf(p, r, i);
        }
      }
      Result<Work> work = comms[r]->allToAllV(buf.data(), l.sendCounts, l.sendOffsets, buf.data(),
                                              l.recvCounts, l.recvOffsets, DataType::kInt32);
      ASSERT_TRUE(work.isOk()) << work.status().toString();
      Status done = work->wait(30s);
      ASSERT_TRUE(done.isOk()) << "rank " << r << ": " << done.toString();
      ASSERT_EQ(buf, want) << "rank " << r;
    });
  }
}

TEST_P(ExchangeTest, GatherAndScatterEveryRoot) {
  const int n = GetParam().nranks;
  if (GetParam().algorithm == Algorithm::kPairwise) GTEST_SKIP() << "gather has no pairwise";
  auto comms = make();
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  for (size_t count : counts()) {
    for (int root = 0; root < n; ++root) {
      SCOPED_TRACE("count " + std::to_string(count) + " root " + std::to_string(root));
      onEveryRank(n, [&](int r) {
        std::vector<int32_t> in(count), out(count * n, kSentinel);
        for (size_t i = 0; i < count; ++i) in[i] = valueOf(r, root, i);
        Result<Work> work = comms[r]->gather(in.data(), out.data(), count, DataType::kInt32, root);
        ASSERT_TRUE(work.isOk()) << work.status().toString();
        Status done = work->wait(30s);
        ASSERT_TRUE(done.isOk()) << "rank " << r << ": " << done.toString();
        for (int p = 0; p < n; ++p) {
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(out[p * count + i], r == root ? valueOf(p, root, i) : kSentinel)
                << "gather: rank " << r << " block " << p << " at " << i;
          }
        }
        // Scatter: the root's block p goes to rank p.
        std::vector<int32_t> all(count * n), mine(count, kSentinel);
        for (int p = 0; p < n; ++p) {
          for (size_t i = 0; i < count; ++i) all[p * count + i] = valueOf(r, p, i);
        }
        work = comms[r]->scatter(all.data(), mine.data(), count, DataType::kInt32, root);
        ASSERT_TRUE(work.isOk()) << work.status().toString();
        done = work->wait(30s);
        ASSERT_TRUE(done.isOk()) << "rank " << r << ": " << done.toString();
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(mine[i], valueOf(root, r, i)) << "scatter: rank " << r << " at " << i;
        }
      });
    }
  }
}

// fault: ranks of an all-to-all pass different counts | every rank fails with Mismatch,
// the rank that sees it naming the count | exchange_test
TEST_P(ExchangeTest, DifferentCountsFailWithMismatch) {
  const int n = GetParam().nranks;
  if (!mismatchCase()) GTEST_SKIP() << "mismatch cases run at 3 ranks";
  auto comms = make();
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  std::vector<Status> results(n);
  onEveryRank(n, [&](int r) {
    const size_t count = r == 1 ? 5 : 4;
    std::vector<int32_t> in(count * n, r), out(count * n, kSentinel);
    Result<Work> work = comms[r]->allToAll(in.data(), out.data(), count, DataType::kInt32);
    ASSERT_TRUE(work.isOk()) << work.status().toString();
    results[r] = work->wait(30s);
  });
  bool namedCount = false;
  for (int r = 0; r < n; ++r) {
    ASSERT_FALSE(results[r].isOk()) << "rank " << r << " completed a mismatched all-to-all";
    EXPECT_TRUE(results[r].code() == StatusCode::kMismatch ||
                results[r].code() == StatusCode::kRemoteError)
        << "rank " << r << ": " << results[r].toString();
    namedCount = namedCount || results[r].message().find("count differs") != std::string::npos;
  }
  EXPECT_TRUE(namedCount) << results[0].toString();
}

// fault: a gather whose ranks name different roots | every rank fails, naming the root |
// exchange_test
TEST_P(ExchangeTest, DifferentRootsFailWithMismatch) {
  const int n = GetParam().nranks;
  if (!mismatchCase()) GTEST_SKIP() << "mismatch cases run at 3 ranks";
  if (GetParam().algorithm == Algorithm::kPairwise) GTEST_SKIP() << "gather has no pairwise";
  auto comms = make();
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  std::vector<Status> results(n);
  onEveryRank(n, [&](int r) {
    std::vector<int32_t> in(8, r), out(8 * n, kSentinel);
    Result<Work> work =
        comms[r]->gather(in.data(), out.data(), 8, DataType::kInt32, r == 1 ? 1 : 0);
    ASSERT_TRUE(work.isOk()) << work.status().toString();
    results[r] = work->wait(30s);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_FALSE(results[r].isOk()) << "rank " << r;
    EXPECT_NE(results[r].message().find("root"), std::string::npos)
        << "rank " << r << ": " << results[r].toString();
  }
}

// fault: alltoallv where a rank sends another count than its peer expects | the receiver
// fails with Mismatch naming the sender and both lengths, the sender then or at its next
// collective | exchange_test
TEST_P(ExchangeTest, DisagreeingSplitsFailWithMismatch) {
  const int n = GetParam().nranks;
  if (!mismatchCase()) GTEST_SKIP() << "mismatch cases run at 3 ranks";
  auto comms = make();
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  std::vector<Status> results(n);
  onEveryRank(n, [&](int r) {
    std::vector<size_t> sendCounts(n, 3), recvCounts(n, 3);
    if (r == 0) sendCounts[1] = 4;  // rank 1 expects 3 from rank 0
    std::vector<int32_t> in(4 * n, r), out(4 * n, kSentinel);
    Result<Work> work = comms[r]->allToAllV(in.data(), sendCounts, {}, out.data(), recvCounts, {},
                                            DataType::kInt32);
    ASSERT_TRUE(work.isOk()) << work.status().toString();
    results[r] = work->wait(30s);
  });
  ASSERT_FALSE(results[1].isOk());
  EXPECT_EQ(results[1].code(), StatusCode::kMismatch) << results[1].toString();
  EXPECT_NE(results[1].message().find("16 bytes"), std::string::npos) << results[1].toString();
  EXPECT_NE(results[1].message().find("12"), std::string::npos) << results[1].toString();
  EXPECT_NE(results[1].message().find("rank 0"), std::string::npos) << results[1].toString();
  // Rank 0 may finish before rank 1 rejects its message (its sends went out, its receives
  // matched), and rank 2 had no part in it: then their next collective fails. Every rank
  // that finished calls it, as a program would (a barrier that only rank 0 entered would
  // wait for rank 2 until the deadline instead).
  onEveryRank(n, [&](int r) {
    if (!results[r].isOk()) return;
    Result<Work> next = comms[r]->barrier();
    const Status after = next.isOk() ? next->wait(10s) : next.status();
    EXPECT_FALSE(after.isOk()) << "rank " << r << " went on after rank 1 refused a message";
  });
}

std::vector<ExchangeCase> exchangeCases() {
  std::vector<ExchangeCase> cases;
  const std::vector<int> rankCounts =
      quickMatrix() ? std::vector<int>{3} : std::vector<int>{2, 3, 4};
  for (const char* transport : {"shm", "tcp"}) {
    for (int n : rankCounts) {
      for (Algorithm algorithm : {Algorithm::kAuto, Algorithm::kPairwise, Algorithm::kLinear}) {
        // auto is pairwise or linear by size: one rank count shows it choosing.
        if (algorithm == Algorithm::kAuto && (quickMatrix() || n != 4)) continue;
        cases.push_back({transport, n, algorithm});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Exchanges, ExchangeTest, ::testing::ValuesIn(exchangeCases()),
                         [](const ::testing::TestParamInfo<ExchangeCase>& info) {
                           return info.param.transport + "_" + std::to_string(info.param.nranks) +
                                  "ranks_" + std::string(algorithmName(info.param.algorithm));
                         });

// Bad arguments are refused before anything is queued, naming the argument.
TEST(ExchangeArgs, RefusesBadArguments) {
  auto comms = makeCommunicators(2, Options{});
  ASSERT_EQ(comms.size(), 2u);
  std::vector<int32_t> buf(64);
  auto a2a = comms[0]->allToAll(buf.data(), buf.data() + 1, 8, DataType::kInt32);
  ASSERT_FALSE(a2a.isOk());
  EXPECT_NE(a2a.status().message().find("overlap other than in place"), std::string::npos)
      << a2a.status().toString();
  auto g = comms[0]->gather(buf.data(), buf.data() + 8, 4, DataType::kInt32, 2);
  ASSERT_FALSE(g.isOk());
  EXPECT_NE(g.status().message().find("root 2"), std::string::npos) << g.status().toString();
  auto v = comms[0]->allToAllV(buf.data(), {1}, {}, buf.data() + 32, {1, 1}, {}, DataType::kInt32);
  ASSERT_FALSE(v.isOk());
  EXPECT_NE(v.status().message().find("send counts and offsets need 2"), std::string::npos)
      << v.status().toString();
  v = comms[0]->allToAllV(buf.data(), {2, 2}, {}, buf.data() + 32, {2, 2}, {0, 1},
                          DataType::kInt32);
  ASSERT_FALSE(v.isOk());
  EXPECT_NE(v.status().message().find("overlap at element 1"), std::string::npos)
      << v.status().toString();
  v = comms[0]->allToAllV(buf.data(), {2, 2}, {}, buf.data() + 32, {3, 2}, {}, DataType::kInt32);
  ASSERT_FALSE(v.isOk());
  EXPECT_NE(v.status().message().find("to itself"), std::string::npos) << v.status().toString();
}

}  // namespace
}  // namespace collie
