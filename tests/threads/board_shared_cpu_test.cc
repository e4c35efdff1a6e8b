// The board's wait when a peer runs on the waiter's own CPU (transports/shm/shm_board.h):
// 2 shm ranks as threads, each pinned to a CPU before its collectives. Pinned to the same
// CPU, waits see the peer there and yield from the start (the counter shows it) and the
// sums stay exact; pinned to different CPUs, no wait does.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <barrier>
#include <string>
#include <vector>

#include "core/transport/wait_policy.h"
#include "support/rank_threads.h"
#include "support/reference.h"
#include "transports/shm/shm_board.h"

namespace collie {
namespace {

using testing::Failures;

bool pinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// Rank r runs float sums of 2 elements on cpus[r], each checked against the exact
// reference (small integers): 20 first, so that both boards hold the pinned CPUs, then
// 400 during which the shared-CPU waits are counted (returned).
uint64_t runPinned(const std::vector<int>& cpus, Failures* failures) {
  Options options;
  options.transport = "shm";
  options.algorithm = Algorithm::kBoard;
  options.timeout = std::chrono::seconds(30);
  options.config = {{"COLLIE_CPUS", "2"}};  // a core per rank: the pure spin is on
  auto comms = testing::makeCommunicators(2, options);
  if (comms.size() != 2) {
    failures->add("communicators not created");
    return 0;
  }
  std::barrier phase(2);
  std::atomic<uint64_t> before{0};
  testing::onEveryRank(2, [&](int r) {
    const bool pinned = pinTo(cpus[r]);
    if (!pinned) {
      failures->add("rank " + std::to_string(r) + ": cannot pin to CPU " + std::to_string(cpus[r]));
    }
    const std::vector<uint8_t> expected =
        testing::expectedReduction(DataType::kFloat32, ReduceOp::kSum, 2, 0, 2);
    auto calls = [&](int n) {
      for (int i = 0; i < n; ++i) {
        std::vector<uint8_t> in = testing::makeInput(DataType::kFloat32, ReduceOp::kSum, r, 2);
        std::vector<uint8_t> out(in.size(), 0xee);
        Result<Work> work =
            comms[r]->allReduce(in.data(), out.data(), 2, DataType::kFloat32, ReduceOp::kSum);
        Status status = work.isOk() ? work->wait() : work.status();
        if (!status.isOk() || out != expected) {
          failures->add("rank " + std::to_string(r) + " call " + std::to_string(i) + ": " +
                        (status.isOk() ? std::string("wrong sum") : status.toString()));
          return false;
        }
      }
      return true;
    };
    const bool warm = pinned && calls(20);
    phase.arrive_and_wait();
    if (r == 0) before = shm::boardSharedCpuWaitCount();
    phase.arrive_and_wait();
    if (warm) calls(400);
  });
  return shm::boardSharedCpuWaitCount() - before;
}

TEST(BoardSharedCpu, RanksOnOneCpuYieldFromTheStart) {
  const std::vector<int> cpus = affinityCpus();
  ASSERT_FALSE(cpus.empty());
  Failures failures;
  const uint64_t waits = runPinned({cpus[0], cpus[0]}, &failures);
  for (const std::string& message : failures.messages) ADD_FAILURE() << message;
  // Two ranks on one CPU take turns: nearly every call has a rank waiting for a peer
  // that sits on its CPU.
  EXPECT_GT(waits, 100u);
}

TEST(BoardSharedCpu, RanksOnTwoCpusSpinAsBefore) {
  const std::vector<int> cpus = affinityCpus();
  if (cpus.size() < 2) GTEST_SKIP() << "one CPU: no two CPUs to pin to";
  Failures failures;
  const uint64_t waits = runPinned({cpus[0], cpus[1]}, &failures);
  for (const std::string& message : failures.messages) ADD_FAILURE() << message;
  EXPECT_EQ(waits, 0u);
}

}  // namespace
}  // namespace collie
