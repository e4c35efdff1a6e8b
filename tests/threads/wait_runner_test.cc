// A caller that waits for its queued collective runs it on its own thread (WorkState's
// WaitRunner, core/engine/work_state.h; not where ranks outnumber CPUs), with ranks as
// threads over shm and tcp: exact results whichever thread ran each collective, waits
// taken out of order, a short deadline still honoured, and a communicator destroyed while
// a waiter runs its collective (an error for the waiter, no hang, no crash).
//
// And what the engine learns from those waits (core/engine/wait_pattern.h): a caller that
// waits at once gets its larger collectives run at submit (also where ranks outnumber
// CPUs), a caller that overlaps (the next collective posted before the last one is waited
// for, or a helper thread waiting, as the DDP Reducer does) keeps the queue, a caller
// that turns from one to the other gets the queue back within a probe's interval, and
// the results are exact throughout.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "core/engine/engine.h"
#include "core/engine/progress_queue.h"
#include "core/engine/wait_pattern.h"
#include "support/rank_threads.h"
#include "support/sanitizers.h"

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
  // `cpus`: what the ranks are told the host has (COLLIE_CPUS), whatever this machine
  // has; by default a CPU per rank (where ranks outnumber CPUs a waiter never runs its
  // queued collective).
  std::vector<std::unique_ptr<Communicator>> make(std::chrono::milliseconds timeout,
                                                  int cpus = kRanks) {
    Options options;
    options.transport = GetParam();
    options.timeout = timeout;
    options.config = {{"COLLIE_CPUS", std::to_string(cpus)}};
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

// Run at submit (core/engine/wait_pattern.h).

// Each rank: `rounds` all-reduces, each waited for at once by its submitter.
void blockingRounds(Communicator* comm, int rank, int first, int rounds) {
  for (int round = first; round < first + rounds; ++round) {
    std::vector<int32_t> in = inputOf(rank, round), out(kCount, -1);
    auto work = comm->allReduce(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum);
    ASSERT_TRUE(work.isOk()) << work.status().toString();
    Status done = work->wait();
    ASSERT_TRUE(done.isOk()) << done.toString();
    expectExact(out, rank, round);
  }
}

// Each rank: `rounds` all-reduces, each posted before the one before it is waited for.
// `finishFirst`: each one is let finish (polled with test(), as a caller that computes
// meanwhile would find it done) and then `compute` passes before the next is posted, so
// that the engine is idle.
void overlappedRounds(Communicator* comm, int rank, int first, int rounds, bool finishFirst,
                      std::chrono::microseconds compute = 0us) {
  std::vector<std::vector<int32_t>> ins, outs;
  for (int round = first; round < first + rounds; ++round) {
    ins.push_back(inputOf(rank, round));
    outs.emplace_back(kCount, -1);
  }
  std::vector<Work> works;
  for (int k = 0; k < rounds; ++k) {
    auto work =
        comm->allReduce(ins[k].data(), outs[k].data(), kCount, DataType::kInt32, ReduceOp::kSum);
    ASSERT_TRUE(work.isOk()) << work.status().toString();
    works.push_back(*work);
    while (finishFirst && !works.back().test()) std::this_thread::sleep_for(50us);
    if (compute > 0us) std::this_thread::sleep_for(compute);
    if (k > 0) {
      Status done = works[k - 1].wait();
      ASSERT_TRUE(done.isOk()) << done.toString();
    }
  }
  Status done = works.back().wait();
  ASSERT_TRUE(done.isOk()) << done.toString();
  for (int k = 0; k < rounds; ++k) expectExact(outs[k], rank, first + k);
}

TEST_P(WaitRunnerTest, CallersThatWaitAtOnceRunTheirCollectivesAtSubmit) {
  auto comms = make(30s);
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  constexpr int kRounds = 40;
  const uint64_t before = Engine::runAtSubmitCount();
  onEveryRank(kRanks, [&](int r) { blockingRounds(comms[r].get(), r, 0, kRounds); });
  // Per rank: the first kStreak are queued to learn, then one per kProbeEvery is queued to
  // check. The rest run at submit unless the engine was busy or the rank's thread was
  // descheduled for longer than kPromptWait between a queued one and its wait (which
  // ends the streak): how many depends on the scheduler, so only some are asserted
  // (idle here 73-84 of 111; with another copy of this test beside it 17-54).
  const uint64_t ran = Engine::runAtSubmitCount() - before;
  EXPECT_LE(ran, static_cast<uint64_t>(kRanks * (kRounds - WaitPattern::kStreak)));
#if !COLLIE_TEST_TSAN && !COLLIE_TEST_ASAN
  // Under the sanitizers a submit and its wait are further apart than kPromptWait (TSan:
  // none ran at submit), which is what a caller that computes in between looks like.
  EXPECT_GT(ran, 0u);
#endif
}

// Where ranks outnumber CPUs a waiter never runs its queued collective (the progress
// thread, woken for it, would take turns with it), but collectives still run at submit.
TEST_P(WaitRunnerTest, WhereRanksOutnumberCpusWaitersDoNotRunButSubmittersDo) {
  auto comms = make(30s, /*cpus=*/1);
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  constexpr int kRounds = 40;
  const uint64_t waiterRuns = ProgressQueue::waiterRunCount();
  const uint64_t before = Engine::runAtSubmitCount();
  onEveryRank(kRanks, [&](int r) { blockingRounds(comms[r].get(), r, 0, kRounds); });
  EXPECT_EQ(ProgressQueue::waiterRunCount() - waiterRuns, 0u);
  const uint64_t ran = Engine::runAtSubmitCount() - before;
  EXPECT_LE(ran, static_cast<uint64_t>(kRanks * (kRounds - WaitPattern::kStreak)));
#if !COLLIE_TEST_TSAN && !COLLIE_TEST_ASAN
  EXPECT_GT(ran, 0u);  // as above
#endif
}

TEST_P(WaitRunnerTest, CallersThatOverlapKeepTheQueue) {
  auto comms = make(30s);
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  const uint64_t before = Engine::runAtSubmitCount();
  onEveryRank(kRanks, [&](int r) {
    overlappedRounds(comms[r].get(), r, 0, 24, /*finishFirst=*/false);
    overlappedRounds(comms[r].get(), r, 24, 24, /*finishFirst=*/true);
  });
  EXPECT_EQ(Engine::runAtSubmitCount() - before, 0u);
}

// The DDP Reducer's way: the submitter posts, a helper thread waits for each collective
// at once and the submitter goes on only when told it is done.
TEST_P(WaitRunnerTest, CollectivesWaitedForByAnotherThreadKeepTheQueue) {
  auto comms = make(30s);
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  const uint64_t before = Engine::runAtSubmitCount();
  onEveryRank(kRanks, [&](int r) {
    for (int round = 0; round < 20; ++round) {
      std::vector<int32_t> in = inputOf(r, round), out(kCount, -1);
      auto work =
          comms[r]->allReduce(in.data(), out.data(), kCount, DataType::kInt32, ReduceOp::kSum);
      ASSERT_TRUE(work.isOk()) << work.status().toString();
      Status done;
      std::thread helper([&] { done = work->wait(); });
      helper.join();
      ASSERT_TRUE(done.isOk()) << done.toString();
      expectExact(out, r, round);
    }
  });
  EXPECT_EQ(Engine::runAtSubmitCount() - before, 0u);
}

TEST_P(WaitRunnerTest, ACallerThatStartsToOverlapGetsTheQueueBack) {
  auto comms = make(30s);
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  onEveryRank(kRanks, [&](int r) { blockingRounds(comms[r].get(), r, 0, 20); });
  // Then each collective is let finish and "computed" beside for 1 ms before the next is
  // posted: the engine is idle each time, only the pattern keeps them queued. Within
  // the first 24 (over 24 ms) a probe comes and is not waited at once; from then on
  // every one is queued.
  onEveryRank(kRanks, [&](int r) {
    overlappedRounds(comms[r].get(), r, 20, 24, /*finishFirst=*/true, 1ms);
  });
  const uint64_t before = Engine::runAtSubmitCount();
  onEveryRank(kRanks, [&](int r) {
    overlappedRounds(comms[r].get(), r, 44, 24, /*finishFirst=*/true, 1ms);
  });
  static_assert(WaitPattern::kProbeEvery < 24ms);
  EXPECT_EQ(Engine::runAtSubmitCount() - before, 0u);
}

INSTANTIATE_TEST_SUITE_P(Transports, WaitRunnerTest, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace collie
