// A blocking send or receive allocates little in steady state: its Work, and now and
// then a node of the queue it passes through. The engine reuses finished executions and
// its batch vectors (Executor::recycle); before it did, an 8 B ping-pong made about
// 7.4 allocations per operation, and their malloc/free pairs were a fifth of its one-way
// time. Counted by replacing the global operator new in this test binary (libcollie's
// allocations go through it too), over every thread of the process, the progress
// threads included.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "support/rank_threads.h"

namespace {
std::atomic<uint64_t> gAllocations{0};
}  // namespace

void* operator new(std::size_t bytes) {
  gAllocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
// GCC cannot tell that operator new above is the replacement that malloc'd `p`.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace collie {
namespace {

using namespace std::chrono_literals;  // NOLINT(build/namespaces)

Status transfer(Communicator& comm, bool send, std::vector<int32_t>& buf, int peer) {
  Result<Work> work = send ? comm.send(buf.data(), buf.size(), DataType::kInt32, peer)
                           : comm.recv(buf.data(), buf.size(), DataType::kInt32, peer);
  return work.isOk() ? work->wait() : work.status();
}

// `rounds` of a blocking ping-pong; rank 1 adds one to what it sends back, and rank 0
// checks it.
void pingPong(Communicator& comm, int rank, int rounds, std::vector<int32_t>& buf,
              std::string* error) {
  for (int round = 0; round < rounds && error->empty(); ++round) {
    Status status;
    if (rank == 0) {
      buf.assign(buf.size(), round);
      status = transfer(comm, true, buf, 1);
      if (status.isOk()) status = transfer(comm, false, buf, 1);
      if (status.isOk() && buf.front() != round + 1) {
        *error = "round " + std::to_string(round) + " came back as " + std::to_string(buf.front());
      }
    } else {
      status = transfer(comm, false, buf, 0);
      for (int32_t& x : buf) ++x;
      if (status.isOk()) status = transfer(comm, true, buf, 0);
    }
    if (!status.isOk()) *error = status.toString();
  }
}

class PointToPointAllocationsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(PointToPointAllocationsTest, ABlockingSendOrReceiveAllocatesAtMostTwiceInSteadyState) {
  Options options;
  options.transport = GetParam();
  options.timeout = 10s;
  auto comms = testing::makeCommunicators(2, options);
  ASSERT_EQ(comms.size(), 2u);
  constexpr int kRounds = 2000;
  std::vector<std::string> errors(2);
  std::vector<std::vector<int32_t>> buffers(2, std::vector<int32_t>(2));
  std::atomic<int> warm{0};
  std::atomic<uint64_t> before{0}, after{0};
  testing::onEveryRank(2, [&](int r) {
    pingPong(*comms[r], r, 200, buffers[r], &errors[r]);
    // Both ranks are past their warm-up before the count starts: the peer's last
    // operations of it would be counted otherwise.
    warm.fetch_add(1);
    while (warm.load() < 2) std::this_thread::yield();
    if (r == 0) before = gAllocations.load();
    pingPong(*comms[r], r, kRounds, buffers[r], &errors[r]);
    if (r == 0) after = gAllocations.load();
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  // Rank 0 reads the count once its last receive returned: rank 1's last send may not
  // have returned yet, so the count covers at most every operation of the rounds.
  const double operations = 4.0 * kRounds;
  const double perOperation = static_cast<double>(after - before) / operations;
  std::printf("%s: %.2f allocations per operation\n", GetParam(), perOperation);
  EXPECT_LE(perOperation, 2.0) << (after - before) << " allocations over " << operations
                               << " blocking sends and receives over " << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Transports, PointToPointAllocationsTest, ::testing::Values("shm", "tcp"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace collie
