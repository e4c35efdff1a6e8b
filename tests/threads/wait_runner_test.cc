// A caller that waits for its queued collective runs it on its own thread (WorkState's
// WaitRunner, core/engine/work_state.h; not where ranks outnumber CPUs), with ranks as
// threads over shm and tcp: exact
// results whichever thread ran each collective, waits taken out of order, a short
// deadline still honoured, and a communicator destroyed while a waiter runs its
// collective (an error for the waiter, no hang, no crash).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "core/engine/progress_queue.h"
#include "support/rank_threads.h"

namespace collie {
namespace {

using namespace std::chrono_literals;  // NOLINT(build/namespaces)
using testing::makeCommunicators;
using testing::onEveryRank;

constexpr int kRanks = 3;
// 1 MiB of int32 per rank: past the 256 KiB a board collective runs inline, so each
// all-reduce is queued and its Work carries the runner.
constexpr size_t kCount = 1 << 18;

std::vector<int32_t> inputOf(int rank, int round) {
  std::vector<int32_t> in(kCount);
  for (size_t i = 0; i < kCount; ++i)
    in[i] = static_cast<int32_t>((i * 7 + rank * 13 + round) % 1009);
  return in;
}

// The sum over ranks, element i, of inputOf(r, round)[i].
int32_t expected(size_t i, int round) {
  int32_t sum = 0;
  for (int r = 0; r < kRanks; ++r) sum += static_cast<int32_t>((i * 7 + r * 13 + round) % 1009);
  return sum;
}

void expectExact(const std::vector<int32_t>& out, int rank, int round) {
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(out[i], expected(i, round)) << "rank " << rank << ", round " << round << ", " << i;
  }
}

class WaitRunnerTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::vector<std::unique_ptr<Communicator>> make(std::chrono::milliseconds timeout) {
    Options options;
    options.transport = GetParam();
    options.timeout = timeout;
    // A CPU per rank, whatever this machine has: where ranks outnumber CPUs the engine
    // keeps the hand-off to its progress thread (no runner).
    options.config = {{"COLLIE_CPUS", std::to_string(kRanks)}};
    return makeCommunicators(kRanks, options);
  }
};

TEST_P(WaitRunnerTest, WaitersRunTheirCollectivesAndResultsAreExact) {
  auto comms = make(30s);
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  const uint64_t before = ProgressQueue::waiterRunCount();
  constexpr int kAtOnce = 12;
  onEveryRank(kRanks, [&](int r) {
    // Waited for at once: the waiter is next in line and usually runs it itself.
    for (int round = 0; round < kAtOnce; ++round) {
      std::vector<int32_t> in = inputOf(r, round), out(kCount, -1);
      auto work =
          comms[r]->allReduce(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum);
      ASSERT_TRUE(work.isOk()) << work.status().toString();
      Status done = work->wait();
      ASSERT_TRUE(done.isOk()) << done.toString();
      expectExact(out, r, round);
    }
    // Three posted, waited for last first: the last is not next in line, so the progress
    // thread runs the first ones while the waiter waits.
    std::vector<std::vector<int32_t>> ins, outs;
    std::vector<Work> works;
    for (int round = kAtOnce; round < kAtOnce + 3; ++round) {
      ins.push_back(inputOf(r, round));
      outs.emplace_back(kCount, -1);
    }
    for (int k = 0; k < 3; ++k) {
      auto work = comms[r]->allReduce(ins[k].data(), outs[k].data(), kCount, DataType::kInt32,
                                      ReduceOp::kSum);
      ASSERT_TRUE(work.isOk()) << work.status().toString();
      works.push_back(*work);
    }
    for (int k = 2; k >= 0; --k) {
      Status done = works[k].wait();
      ASSERT_TRUE(done.isOk()) << done.toString();
    }
    for (int k = 0; k < 3; ++k) expectExact(outs[k], r, kAtOnce + k);
  });
  // 36 waits at once; the progress thread wins the race for some when the machine is busy.
  EXPECT_GT(ProgressQueue::waiterRunCount() - before, 0u);
}

// A waiter with a deadline shorter than the collective's own never runs it: the wait
// returns Timeout by its deadline while a rank is late, and the collective then completes.
TEST_P(WaitRunnerTest, AShortDeadlineIsHonouredWhileAPeerIsLate) {
  auto comms = make(30s);
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  std::atomic<bool> released{false};
  onEveryRank(kRanks, [&](int r) {
    std::vector<int32_t> in = inputOf(r, 0), out(kCount, -1);
    if (r != 0) {
      while (!released) std::this_thread::sleep_for(1ms);
    }
    auto work =
        comms[r]->allReduce(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum);
    ASSERT_TRUE(work.isOk()) << work.status().toString();
    if (r == 0) {
      const auto start = std::chrono::steady_clock::now();
      Status early = work->wait(100ms);
      EXPECT_EQ(early.code(), StatusCode::kTimeout) << early.toString();
      EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
      released = true;
    }
    Status done = work->wait();
    ASSERT_TRUE(done.isOk()) << done.toString();
    expectExact(out, r, 0);
  });
}

// Rank 0 waits for a collective the other ranks never join, so it runs it itself; its
// communicator is destroyed from another thread meanwhile. The destruction aborts the
// collective at once (not after the 20 s timeout) and the waiter gets an error.
// fault: a communicator destroyed while a caller runs its queued collective in Work::wait |
// the collective is aborted at once and the waiter gets an error; no hang | wait_runner_test
TEST_P(WaitRunnerTest, DestroyedWhileTheWaiterRunsItsCollective) {
  auto comms = make(20s);
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  std::vector<int32_t> in = inputOf(0, 0), out(kCount, -1);
  auto work = comms[0]->allReduce(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum);
  ASSERT_TRUE(work.isOk()) << work.status().toString();
  Status waited;
  std::thread waiter([&] { waited = work->wait(); });
  std::this_thread::sleep_for(200ms);
  const auto start = std::chrono::steady_clock::now();
  comms[0].reset();
  waiter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_FALSE(waited.isOk());
  // The others go without it: their communicators are destroyed with nothing posted.
}

INSTANTIATE_TEST_SUITE_P(Transports, WaitRunnerTest, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace collie
