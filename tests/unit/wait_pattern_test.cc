// WaitPattern (core/engine/wait_pattern.h), the policy alone: which waits count as
// waited at once, when collectives run at submit, when a probe is queued and when the
// streak ends.
#include "core/engine/wait_pattern.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace collie {
namespace {

constexpr int64_t kSecondNs = 1'000'000'000;

// Queues one collective and has its submitter wait for it at once.
void queueAndWaitAtOnce(WaitPattern& p) {
  const uint64_t index = p.queued();
  p.waitedBySubmitter(index, WaitPattern::nowNs());
}

TEST(WaitPatternTest, RunsAtSubmitAfterAStreakOfPromptWaits) {
  WaitPattern p;
  for (uint32_t k = 0; k < WaitPattern::kStreak; ++k) {
    EXPECT_FALSE(p.runAtSubmit()) << "before " << k << " waits at once";
    queueAndWaitAtOnce(p);
  }
  EXPECT_TRUE(p.runAtSubmit());
  EXPECT_TRUE(p.runAtSubmit());  // no probe within kProbeEvery of the last queued one
}

TEST(WaitPatternTest, AWaitAfterComputingIsNotAWaitAtOnce) {
  WaitPattern p;
  for (uint32_t k = 0; k < 2 * WaitPattern::kStreak; ++k) {
    EXPECT_FALSE(p.runAtSubmit());
    const uint64_t index = p.queued();
    p.waitedBySubmitter(index, WaitPattern::nowNs() - kSecondNs);  // queued a second ago
  }
  EXPECT_FALSE(p.runAtSubmit());
}

TEST(WaitPatternTest, AWaitForAnOlderCollectiveIsNotAWaitAtOnce) {
  WaitPattern p;
  uint64_t previous = p.queued();
  for (uint32_t k = 0; k < 2 * WaitPattern::kStreak; ++k) {
    EXPECT_FALSE(p.runAtSubmit());
    const uint64_t index = p.queued();
    p.waitedBySubmitter(previous, WaitPattern::nowNs());  // posted the next one first
    previous = index;
  }
  EXPECT_FALSE(p.runAtSubmit());
}

TEST(WaitPatternTest, WaitingTwiceCountsOnce) {
  WaitPattern p;
  const uint64_t index = p.queued();
  for (uint32_t k = 0; k < WaitPattern::kStreak; ++k) {
    p.waitedBySubmitter(index, WaitPattern::nowNs());
  }
  EXPECT_FALSE(p.runAtSubmit());
}

TEST(WaitPatternTest, AQueuedCollectiveNotWaitedAtOnceEndsTheStreak) {
  WaitPattern p;
  for (uint32_t k = 0; k < WaitPattern::kStreak; ++k) queueAndWaitAtOnce(p);
  ASSERT_TRUE(p.runAtSubmit());
  (void)p.queued();  // say the engine was busy: queued, and not waited at once
  EXPECT_FALSE(p.runAtSubmit());
  // The streak starts again from nothing.
  for (uint32_t k = 0; k < WaitPattern::kStreak; ++k) {
    EXPECT_FALSE(p.runAtSubmit());
    queueAndWaitAtOnce(p);
  }
  EXPECT_TRUE(p.runAtSubmit());
}

TEST(WaitPatternTest, ProbesOnceKProbeEveryHasPassed) {
  WaitPattern p;
  for (uint32_t k = 0; k < WaitPattern::kStreak; ++k) queueAndWaitAtOnce(p);
  ASSERT_TRUE(p.runAtSubmit());
  std::this_thread::sleep_for(WaitPattern::kProbeEvery + std::chrono::milliseconds(1));
  EXPECT_FALSE(p.runAtSubmit()) << "a probe is due";
  queueAndWaitAtOnce(p);  // the probe: still waited at once
  EXPECT_TRUE(p.runAtSubmit());
  std::this_thread::sleep_for(WaitPattern::kProbeEvery + std::chrono::milliseconds(1));
  EXPECT_FALSE(p.runAtSubmit()) << "a probe is due";
  (void)p.queued();  // the probe: not waited at once
  EXPECT_FALSE(p.runAtSubmit());
}

}  // namespace
}  // namespace collie
