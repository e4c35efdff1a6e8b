// Collectives too large to run inline are queued so that the caller's work overlaps them,
// unless the callers wait for them at once; then the engine runs them on the submitting
// thread (core/engine/wait_pattern.h). With ranks as threads over shm and tcp: a caller
// that waits at once gets them run at submit (also where ranks outnumber CPUs, where a
// waiter never runs its queued collective), a caller that overlaps (the next collective
// posted before the last one is waited for, or a helper thread waiting, as the DDP
// Reducer does) keeps the queue, a caller that turns from one to the other gets the
// queue back within a probe's interval, and the results are exact throughout.
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

namespace collie {
namespace {

using namespace std::chrono_literals;  // NOLINT(build/namespaces)
using testing::makeCommunicators;
using testing::onEveryRank;

constexpr int kRanks = 3;
// 1 MiB of int32 per rank: past the 256 KiB a board collective runs inline, so each
// all-reduce would be queued.
constexpr size_t kCount = 1 << 18;

std::vector<int32_t> inputOf(int rank, int round) {
  std::vector<int32_t> in(kCount);
  for (size_t i = 0; i < kCount; ++i)
    in[i] = static_cast<int32_t>((i * 5 + rank * 11 + round) % 997);
  return in;
}

void expectExact(const std::vector<int32_t>& out, int rank, int round) {
  for (size_t i = 0; i < kCount; ++i) {
    int32_t sum = 0;
    for (int r = 0; r < kRanks; ++r) sum += static_cast<int32_t>((i * 5 + r * 11 + round) % 997);
    ASSERT_EQ(out[i], sum) << "rank " << rank << ", round " << round << ", element " << i;
  }
}

class RunAtSubmitTest : public ::testing::TestWithParam<const char*> {
 protected:
  // `cpus`: what the ranks are told the host has (COLLIE_CPUS), whatever this machine
  // has; by default a CPU per rank.
  std::vector<std::unique_ptr<Communicator>> make(int cpus = kRanks) {
    Options options;
    options.transport = GetParam();
    options.timeout = 30s;
    options.config = {{"COLLIE_CPUS", std::to_string(cpus)}};
    return makeCommunicators(kRanks, options);
  }
};

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

TEST_P(RunAtSubmitTest, CallersThatWaitAtOnceRunTheirCollectivesAtSubmit) {
  auto comms = make();
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
#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
  // Under the sanitizers a submit and its wait are further apart than kPromptWait (TSan:
  // none ran at submit), which is what a caller that computes in between looks like.
  EXPECT_GT(ran, 0u);
#endif
}

// Where ranks outnumber CPUs a waiter never runs its queued collective (the progress
// thread, woken for it, would take turns with it), but collectives still run at submit.
TEST_P(RunAtSubmitTest, WhereRanksOutnumberCpusWaitersDoNotRunButSubmittersDo) {
  auto comms = make(/*cpus=*/1);
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  constexpr int kRounds = 40;
  const uint64_t waiterRuns = ProgressQueue::waiterRunCount();
  const uint64_t before = Engine::runAtSubmitCount();
  onEveryRank(kRanks, [&](int r) { blockingRounds(comms[r].get(), r, 0, kRounds); });
  EXPECT_EQ(ProgressQueue::waiterRunCount() - waiterRuns, 0u);
  const uint64_t ran = Engine::runAtSubmitCount() - before;
  EXPECT_LE(ran, static_cast<uint64_t>(kRanks * (kRounds - WaitPattern::kStreak)));
#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
  EXPECT_GT(ran, 0u);  // as above
#endif
}

TEST_P(RunAtSubmitTest, CallersThatOverlapKeepTheQueue) {
  auto comms = make();
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
TEST_P(RunAtSubmitTest, CollectivesWaitedForByAnotherThreadKeepTheQueue) {
  auto comms = make();
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

TEST_P(RunAtSubmitTest, ACallerThatStartsToOverlapGetsTheQueueBack) {
  auto comms = make();
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

INSTANTIATE_TEST_SUITE_P(Transports, RunAtSubmitTest, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace collie
