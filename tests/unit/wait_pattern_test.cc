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
  const uint64_t index = p.queued(ThreadMark::steadyNowNs());
  p.waitedBySubmitter(index, ThreadMark::now());
}

// Whether p runs the next collective at submit, as it must right after a streak whose
// last collective was queued after `before`: true, unless this thread lost the CPU for
// kProbeEvery since then (a loaded host, other tests beside this one), when a probe is
// due and false is right too.
using SteadyTime = std::chrono::steady_clock::time_point;
bool runsAtSubmitUnlessProbeDue(WaitPattern& p, SteadyTime before) {
  if (p.runAtSubmit()) return true;
  return std::chrono::steady_clock::now() - before >= WaitPattern::kProbeEvery;
}

// A streak of kStreak collectives waited at once; returns when the last was queued (at
// the latest).
SteadyTime streakOfPromptWaits(WaitPattern& p) {
  SteadyTime before;
  for (uint32_t k = 0; k < WaitPattern::kStreak; ++k) {
    before = std::chrono::steady_clock::now();
    queueAndWaitAtOnce(p);
  }
  return before;
}

// Spins until this thread has used `ns` more of CPU time.
void computeFor(int64_t ns) {
  const ThreadMark start = ThreadMark::now();
  ThreadMark now = start;
  while (now.cpuNs - start.cpuNs < ns && now.steadyNs - start.steadyNs < 10 * kSecondNs) {
    now = ThreadMark::now();
  }
}

TEST(WaitPatternTest, RunsAtSubmitAfterAStreakOfPromptWaits) {
  WaitPattern p;
  SteadyTime before;
  for (uint32_t k = 0; k < WaitPattern::kStreak; ++k) {
    EXPECT_FALSE(p.runAtSubmit()) << "before " << k << " waits at once";
    before = std::chrono::steady_clock::now();
    queueAndWaitAtOnce(p);
  }
  EXPECT_TRUE(runsAtSubmitUnlessProbeDue(p, before));
  // No probe within kProbeEvery of the last queued one.
  EXPECT_TRUE(runsAtSubmitUnlessProbeDue(p, before));
}

TEST(WaitPatternTest, AWaitAfterComputingIsNotAWaitAtOnce) {
  WaitPattern p;
  for (uint32_t k = 0; k < 2 * WaitPattern::kStreak; ++k) {
    EXPECT_FALSE(p.runAtSubmit());
    const uint64_t index = p.queued(ThreadMark::steadyNowNs());
    const ThreadMark submitted = ThreadMark::now();
    computeFor(1'000'000);
    p.waitedBySubmitter(index, submitted);
  }
  EXPECT_FALSE(p.runAtSubmit());
}

TEST(WaitPatternTest, AWaitAfterBlockingIsNotAWaitAtOnce) {
  WaitPattern p;
  for (uint32_t k = 0; k < 2 * WaitPattern::kStreak; ++k) {
    EXPECT_FALSE(p.runAtSubmit());
    const uint64_t index = p.queued(ThreadMark::steadyNowNs());
    const ThreadMark submitted = ThreadMark::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    p.waitedBySubmitter(index, submitted);
  }
  EXPECT_FALSE(p.runAtSubmit());
}

// A submitter preempted between its submit and its wait (no CPU of its own used, never
// blocked) still waited at once.
TEST(WaitPatternTest, APreemptedSubmitterWaitsAtOnce) {
  WaitPattern p;
  SteadyTime before;
  for (uint32_t k = 0; k < WaitPattern::kStreak; ++k) {
    EXPECT_FALSE(p.runAtSubmit());
    before = std::chrono::steady_clock::now();
    const uint64_t index = p.queued(ThreadMark::steadyNowNs());
    ThreadMark submitted = ThreadMark::now();
    submitted.steadyNs -= kSecondNs;  // a second ago, with no CPU used or blocking since
    p.waitedBySubmitter(index, submitted);
  }
  EXPECT_TRUE(runsAtSubmitUnlessProbeDue(p, before));
}

TEST(WaitPatternTest, PromptWaitsByTimeCpuAndBlocking) {
  const int64_t prompt = std::chrono::nanoseconds(WaitPattern::kPromptWait).count();
  const ThreadMark submitted{1'000'000'000, 5'000'000, 7};
  const auto after = [&](int64_t wallNs, int64_t cpuNs, int64_t blocked) {
    return ThreadMark{submitted.steadyNs + wallNs, submitted.cpuNs + cpuNs,
                      submitted.voluntarySwitches + blocked};
  };
  EXPECT_TRUE(WaitPattern::isPromptWait(submitted, after(prompt, prompt, 0)));
  // Within kPromptWait the wall clock alone decides (the usage is not read there).
  EXPECT_TRUE(WaitPattern::isPromptWait(submitted, after(prompt / 2, 0, 3)));
  // Preempted: later, but no CPU of its own and no blocking.
  EXPECT_TRUE(WaitPattern::isPromptWait(submitted, after(50 * prompt, prompt, 0)));
  EXPECT_FALSE(WaitPattern::isPromptWait(submitted, after(50 * prompt, prompt + 1000, 0)))
      << "computed first";
  EXPECT_FALSE(WaitPattern::isPromptWait(submitted, after(50 * prompt, 0, 1))) << "blocked first";
  ThreadMark unknown = after(50 * prompt, 0, 0);
  unknown.cpuNs = -1;
  EXPECT_FALSE(WaitPattern::isPromptWait(submitted, unknown)) << "usage unreadable";
}

// ThreadMark reads this thread's own usage: sleeping is a voluntary switch, spinning is
// CPU time.
TEST(ThreadMarkTest, ReadsTheThreadsCpuTimeAndBlocking) {
  const ThreadMark start = ThreadMark::now();
  ASSERT_GE(start.cpuNs, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const ThreadMark slept = ThreadMark::now();
  EXPECT_GT(slept.voluntarySwitches, start.voluntarySwitches);
  EXPECT_GE(slept.steadyNs - start.steadyNs, 2'000'000);
  EXPECT_LT(slept.cpuNs - start.cpuNs, 1'000'000) << "sleeping used a millisecond of CPU";
  computeFor(2'000'000);
  EXPECT_GE(ThreadMark::now().cpuNs - slept.cpuNs, 2'000'000)
      << "10 s of spinning used under 2 ms of CPU";
}

TEST(WaitPatternTest, AWaitForAnOlderCollectiveIsNotAWaitAtOnce) {
  WaitPattern p;
  uint64_t previous = p.queued(ThreadMark::steadyNowNs());
  for (uint32_t k = 0; k < 2 * WaitPattern::kStreak; ++k) {
    EXPECT_FALSE(p.runAtSubmit());
    const uint64_t index = p.queued(ThreadMark::steadyNowNs());
    p.waitedBySubmitter(previous, ThreadMark::now());  // posted the next one first
    previous = index;
  }
  EXPECT_FALSE(p.runAtSubmit());
}

TEST(WaitPatternTest, WaitingTwiceCountsOnce) {
  WaitPattern p;
  const uint64_t index = p.queued(ThreadMark::steadyNowNs());
  for (uint32_t k = 0; k < WaitPattern::kStreak; ++k) {
    p.waitedBySubmitter(index, ThreadMark::now());
  }
  EXPECT_FALSE(p.runAtSubmit());
}

TEST(WaitPatternTest, AQueuedCollectiveNotWaitedAtOnceEndsTheStreak) {
  WaitPattern p;
  SteadyTime before = streakOfPromptWaits(p);
  ASSERT_TRUE(runsAtSubmitUnlessProbeDue(p, before));
  (void)p.queued(
      ThreadMark::steadyNowNs());  // say the engine was busy: queued, and not waited at once
  EXPECT_FALSE(p.runAtSubmit());
  // The streak starts again from nothing.
  for (uint32_t k = 0; k < WaitPattern::kStreak; ++k) {
    EXPECT_FALSE(p.runAtSubmit());
    before = std::chrono::steady_clock::now();
    queueAndWaitAtOnce(p);
  }
  EXPECT_TRUE(runsAtSubmitUnlessProbeDue(p, before));
}

TEST(WaitPatternTest, ProbesOnceKProbeEveryHasPassed) {
  WaitPattern p;
  ASSERT_TRUE(runsAtSubmitUnlessProbeDue(p, streakOfPromptWaits(p)));
  std::this_thread::sleep_for(WaitPattern::kProbeEvery + std::chrono::milliseconds(1));
  EXPECT_FALSE(p.runAtSubmit()) << "a probe is due";
  const SteadyTime before = std::chrono::steady_clock::now();
  queueAndWaitAtOnce(p);  // the probe: still waited at once
  EXPECT_TRUE(runsAtSubmitUnlessProbeDue(p, before));
  std::this_thread::sleep_for(WaitPattern::kProbeEvery + std::chrono::milliseconds(1));
  EXPECT_FALSE(p.runAtSubmit()) << "a probe is due";
  (void)p.queued(ThreadMark::steadyNowNs());  // the probe: not waited at once
  EXPECT_FALSE(p.runAtSubmit());
}

// Waits at once until p grants the streak; returns how many it took. Each submit is
// marked with the thread's usage (ThreadMark::now()), so that a wait this thread was
// preempted in the middle of still counts as prompt: with the clock alone (as a
// point-to-point submitter marks), one preemption inside a wait starts the count again,
// and on a loaded host (CI runs other tests' ranks beside this one) a streak of
// 2^20 was never reached. The rule for clock-only marks has its own test
// (PromptWaitsByTimeCpuAndBlocking).
uint64_t promptWaitsUntilGranted(WaitPattern& p) {
  uint64_t waits = 0;
  while (!p.waitsAtOnce() && waits < 8ull * p.maxStreak()) {
    const uint64_t index = p.queued(ThreadMark::steadyNowNs());
    const ThreadMark submitted = ThreadMark::now();
    p.waitedBySubmitter(index, submitted);
    ++waits;
  }
  return waits;
}

// A pattern with backOff (the point-to-point one) asks for twice the streak after each
// miss that ended a streak it had granted, so that a caller whose runs of prompt waits
// are short stops being granted; one without keeps kStreak.
TEST(WaitPatternTest, WithBackOffAMissedGrantDoublesTheStreakAskedFor) {
  WaitPattern p(/*backOff=*/true);
  uint32_t asked = WaitPattern::kStreak;
  for (int miss = 0; miss < 4; ++miss) {
    ASSERT_EQ(p.streak(), asked);
    EXPECT_GE(promptWaitsUntilGranted(p), asked);
    ASSERT_TRUE(p.waitsAtOnce());
    (void)p.queued(ThreadMark::steadyNowNs());  // granted, and not waited at once
    EXPECT_FALSE(p.waitsAtOnce());
    asked *= 2;
  }
  EXPECT_EQ(p.streak(), asked);
  // A miss where nothing was granted asks for no more.
  queueAndWaitAtOnce(p);
  (void)p.queued(ThreadMark::steadyNowNs());
  EXPECT_FALSE(p.waitsAtOnce());
  EXPECT_EQ(p.streak(), asked);
}

// The cap is given here as 96 (kStreak << 5) so that the test takes a few thousand waits;
// the engine's pattern is made with the default, kMaxStreak.
TEST(WaitPatternTest, WithBackOffTheStreakAskedForStopsAtItsMax) {
  constexpr uint32_t kMax = WaitPattern::kStreak << 5;
  EXPECT_EQ(WaitPattern(/*backOff=*/true).maxStreak(), WaitPattern::kMaxStreak);
  WaitPattern p(/*backOff=*/true, kMax);
  while (p.streak() < kMax) {
    const uint32_t asked = p.streak();
    ASSERT_GE(promptWaitsUntilGranted(p), asked);
    ASSERT_TRUE(p.waitsAtOnce());
    (void)p.queued(ThreadMark::steadyNowNs());
    ASSERT_FALSE(p.waitsAtOnce());
    ASSERT_GT(p.streak(), asked);
  }
  EXPECT_EQ(p.streak(), kMax);
  EXPECT_GE(promptWaitsUntilGranted(p), kMax);
  (void)p.queued(ThreadMark::steadyNowNs());
  EXPECT_FALSE(p.waitsAtOnce());
  EXPECT_EQ(p.streak(), kMax);
}

TEST(WaitPatternTest, WithoutBackOffAMissAsksForKStreakAgain) {
  WaitPattern p;
  for (int miss = 0; miss < 3; ++miss) {
    for (uint32_t k = 0; k < WaitPattern::kStreak; ++k) queueAndWaitAtOnce(p);
    EXPECT_TRUE(p.waitsAtOnce());
    (void)p.queued(ThreadMark::steadyNowNs());
    EXPECT_FALSE(p.waitsAtOnce());
    EXPECT_EQ(p.streak(), WaitPattern::kStreak);
  }
}

}  // namespace
}  // namespace collie
