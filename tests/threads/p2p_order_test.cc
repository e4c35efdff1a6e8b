// Point-to-point operations posted one call at a time, receives before sends (as
// torch.distributed's batch_isend_irecv does): a posted receive must never hold back a
// send queued behind it (issue 26). Every rank posts all its receives (or all its sends)
// first, then the rest, then waits; over shm and tcp, 2..8 ranks, ring neighbours and
// every peer; over ucx (where built) the receives-first case at 3 and 8 ranks, every
// peer, outside the sanitizer runs (the engine's part is the same as over shm and tcp).
// One rank has no peer to exchange with, so the matrix starts at 2.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/transport/transport.h"
#include "support/quick_matrix.h"
#include "support/rank_threads.h"

namespace collie {
namespace {

using namespace std::chrono_literals;  // NOLINT(build/namespaces)

constexpr size_t kCount = 4099;

enum class Pattern { kRing, kEveryPeer };
enum class Order { kReceivesFirst, kSendsFirst };

int32_t value(int from, int to, size_t i) {
  return static_cast<int32_t>(from * 1000003 + to * 1009 + static_cast<int>(i));
}

class PointToPointOrderTest
    : public ::testing::TestWithParam<std::tuple<const char*, int, Pattern, Order>> {};

TEST_P(PointToPointOrderTest, PostedReceivesNeverHoldBackSends) {
  const char* const transport = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  const Pattern pattern = std::get<2>(GetParam());
  const Order order = std::get<3>(GetParam());
  if (TransportRegistry::instance().find(transport) == nullptr) {
    GTEST_SKIP() << transport << " is not built";
  }
  if (std::string(transport) == "ucx" && testing::quickMatrix()) {
    GTEST_SKIP() << "ucx runs in the unsanitized suite only";
  }
  Options options;
  options.transport = transport;
  options.timeout = 5s;  // a deadlock fails in 5 s, not COLLIE_TIMEOUT's 300
  auto comms = testing::makeCommunicators(n, options);
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  std::vector<std::string> errors(n);
  testing::onEveryRank(n, [&, pattern = pattern, order = order](int r) {
    Communicator& comm = *comms[r];
    std::vector<int> peers;
    if (pattern == Pattern::kRing) {
      peers = {(r + n - 1) % n, (r + 1) % n};  // both the same rank when n == 2
    } else {
      for (int p = 0; p < n; ++p) {
        if (p != r) peers.push_back(p);
      }
    }
    std::vector<std::vector<int32_t>> in(peers.size(), std::vector<int32_t>(kCount));
    std::vector<std::vector<int32_t>> out(peers.size(), std::vector<int32_t>(kCount, -1));
    for (size_t k = 0; k < peers.size(); ++k) {
      for (size_t i = 0; i < kCount; ++i) in[k][i] = value(r, peers[k], i);
    }
    std::vector<Work> works;
    auto post = [&](bool receives) {
      for (size_t k = 0; k < peers.size(); ++k) {
        Result<Work> work = receives ? comm.recv(out[k].data(), kCount, DataType::kInt32, peers[k])
                                     : comm.send(in[k].data(), kCount, DataType::kInt32, peers[k]);
        if (!work.isOk()) {
          errors[r] += work.status().toString() + "; ";
          return;
        }
        works.push_back(*work);
      }
    };
    post(order == Order::kReceivesFirst);
    post(order != Order::kReceivesFirst);
    for (Work& work : works) {
      Status st = work.wait();
      if (!st.isOk()) errors[r] += st.toString() + "; ";
    }
    // The k-th receive from a peer matches that peer's k-th send to this rank: in the
    // ring of 2, "from prev" gets the peer's send "to next" (this rank), and so on.
    for (size_t k = 0; k < peers.size() && errors[r].empty(); ++k) {
      for (size_t i = 0; i < kCount; ++i) {
        if (out[k][i] != value(peers[k], r, i)) {
          errors[r] += "receive " + std::to_string(k) + " from rank " + std::to_string(peers[k]) +
                       ": element " + std::to_string(i) + " is " + std::to_string(out[k][i]);
          break;
        }
      }
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

std::string testName(
    const ::testing::TestParamInfo<std::tuple<const char*, int, Pattern, Order>>& info) {
  return std::string(std::get<0>(info.param)) + "_" + std::to_string(std::get<1>(info.param)) +
         (std::get<2>(info.param) == Pattern::kRing ? "_ring" : "_every_peer") +
         (std::get<3>(info.param) == Order::kReceivesFirst ? "_receives_first" : "_sends_first");
}

INSTANTIATE_TEST_SUITE_P(
    Matrix, PointToPointOrderTest,
    ::testing::Combine(::testing::Values("shm", "tcp"), ::testing::Values(2, 3, 5, 8),
                       ::testing::Values(Pattern::kRing, Pattern::kEveryPeer),
                       ::testing::Values(Order::kReceivesFirst, Order::kSendsFirst)),
    testName);
INSTANTIATE_TEST_SUITE_P(Ucx, PointToPointOrderTest,
                         ::testing::Combine(::testing::Values("ucx"), ::testing::Values(3, 8),
                                            ::testing::Values(Pattern::kEveryPeer),
                                            ::testing::Values(Order::kReceivesFirst)),
                         testName);

}  // namespace
}  // namespace collie
