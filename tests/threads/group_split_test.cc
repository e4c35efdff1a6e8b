// Communicator::sendRecv (grouped point-to-point), split() and asyncError(), with
// ranks as threads over real transports.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "support/rank_threads.h"

namespace collie {
namespace {

using testing::makeCommunicators;
using testing::onEveryRank;

int32_t valueOf(int from, int to, size_t i) {
  return from * 1000003 + to * 7919 + static_cast<int>(i);
}

class GroupTest : public ::testing::TestWithParam<std::string> {};

// Every rank sends a message larger than any transport buffer to every other rank and
// receives one from each, sends listed first: one-op-at-a-time would deadlock.
TEST_P(GroupTest, AllToAllLargeMessagesDoNotDeadlock) {
  const int n = 3;
  const size_t count = size_t{3} << 20;  // 12 MiB per message
  Options options;
  options.transport = GetParam();
  options.timeout = std::chrono::seconds(20);
  auto comms = makeCommunicators(n, options);
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  std::vector<Status> results(n);
  std::vector<std::vector<std::vector<int32_t>>> received(n);
  onEveryRank(n, [&](int rank) {
    std::vector<std::vector<int32_t>> sends(n, std::vector<int32_t>(count));
    received[rank].assign(n, std::vector<int32_t>(count, 0));
    std::vector<PointToPoint> ops;
    for (int peer = 0; peer < n; ++peer) {
      if (peer == rank) continue;
      for (size_t i = 0; i < count; ++i) sends[peer][i] = valueOf(rank, peer, i);
      ops.push_back({true, sends[peer].data(), count, DataType::kInt32, peer, std::nullopt});
    }
    for (int peer = 0; peer < n; ++peer) {
      if (peer != rank)
        ops.push_back(
            {false, received[rank][peer].data(), count, DataType::kInt32, peer, std::nullopt});
    }
    Result<Work> work = comms[rank]->sendRecv(ops);
    results[rank] = work.isOk() ? work->wait() : work.status();
  });
  for (int rank = 0; rank < n; ++rank) {
    ASSERT_TRUE(results[rank].isOk()) << "rank " << rank << ": " << results[rank].toString();
    for (int peer = 0; peer < n; ++peer) {
      if (peer == rank) continue;
      for (size_t i = 0; i < count; i += 4093) {
        ASSERT_EQ(received[rank][peer][i], valueOf(peer, rank, i))
            << rank << "<-" << peer << " [" << i << "]";
      }
      ASSERT_EQ(received[rank][peer][count - 1], valueOf(peer, rank, count - 1));
    }
  }
}

// A grouped send matches a plain recv on the peer (same per-peer sequence numbers).
TEST_P(GroupTest, GroupedMatchesUngrouped) {
  Options options;
  options.transport = GetParam();
  auto comms = makeCommunicators(2, options);
  ASSERT_EQ(comms.size(), 2u);
  std::vector<int32_t> a(1000, 7), b(1000, 0), c(10, 9), d(10, 0);
  Status s0, s1;
  onEveryRank(2, [&](int rank) {
    if (rank == 0) {
      auto w = comms[0]->sendRecv({{true, a.data(), a.size(), DataType::kInt32, 1, std::nullopt},
                                   {true, c.data(), c.size(), DataType::kInt32, 1, std::nullopt}});
      s0 = w.isOk() ? w->wait() : w.status();
    } else {
      auto w1 = comms[1]->recv(b.data(), b.size(), DataType::kInt32, 0);
      auto w2 = comms[1]->recv(d.data(), d.size(), DataType::kInt32, 0);
      s1 = w1.isOk() ? w1->wait() : w1.status();
      if (s1.isOk()) s1 = w2.isOk() ? w2->wait() : w2.status();
    }
  });
  ASSERT_TRUE(s0.isOk()) << s0.toString();
  ASSERT_TRUE(s1.isOk()) << s1.toString();
  EXPECT_EQ(b, a);
  EXPECT_EQ(d, c);
}

INSTANTIATE_TEST_SUITE_P(Transports, GroupTest, ::testing::Values("shm", "tcp"));

TEST(SplitTest, ColorsAndKeysOrderTheNewRanks) {
  const int n = 5;
  auto comms = makeCommunicators(n, Options{});
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  std::vector<std::unique_ptr<Communicator>> children(n);
  std::vector<Status> errors(n);
  std::vector<int64_t> sums(n, -1);
  onEveryRank(n, [&](int rank) {
    int color = rank == 4 ? -1 : rank % 2;  // rank 4 joins none
    auto child = comms[rank]->split(color, -rank);
    if (!child.isOk()) {
      errors[rank] = child.status();
      return;
    }
    children[rank] = std::move(*child);
    if (!children[rank]) return;
    int64_t mine = rank;
    auto work = children[rank]->allReduce(&mine, &sums[rank], 1, DataType::kInt64, ReduceOp::kSum);
    errors[rank] = work.isOk() ? work->wait() : work.status();
  });
  for (int rank = 0; rank < n; ++rank) ASSERT_TRUE(errors[rank].isOk()) << errors[rank].toString();
  EXPECT_EQ(children[4], nullptr);
  // Even: ranks 2, 0 (descending); odd: 3, 1.
  EXPECT_EQ(children[2]->rank(), 0);
  EXPECT_EQ(children[0]->rank(), 1);
  EXPECT_EQ(children[3]->rank(), 0);
  EXPECT_EQ(children[1]->rank(), 1);
  EXPECT_EQ(children[0]->size(), 2);
  EXPECT_EQ(sums[0], 2);
  EXPECT_EQ(sums[2], 2);
  EXPECT_EQ(sums[1], 4);
  EXPECT_EQ(sums[3], 4);
}

TEST(AsyncErrorTest, OkUntilAbortedThenSticky) {
  auto comms = makeCommunicators(2, Options{});
  ASSERT_EQ(comms.size(), 2u);
  EXPECT_TRUE(comms[0]->asyncError().isOk());
  comms[0]->abort();
  EXPECT_EQ(comms[0]->asyncError().code(), StatusCode::kAborted);
  float x = 1;
  auto work = comms[0]->allReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
  Status status = work.isOk() ? work->wait() : work.status();
  EXPECT_EQ(status.code(), StatusCode::kAborted);
  EXPECT_TRUE(comms[1]->asyncError().isOk());
}

}  // namespace
}  // namespace collie
