// SingleCopyChoice (core/engine/single_copy_choice.h): which team steps it times, the
// exploration blocks of a size class, calls timed only after their own side's, the choice by
// lower quartiles, the rechecks that follow a change, outcomes recorded by what ran.
#include "core/engine/single_copy_choice.h"

#include <gtest/gtest.h>

namespace collie {
namespace {

constexpr size_t kBoard = 256 << 10;
constexpr size_t kMax = 8 << 20;
constexpr size_t kBytes = 1 << 20;
const TeamAlgorithms kSet = teamBit(Algorithm::kDirect) | teamBit(Algorithm::kCma);

bool allowsCma(const SingleCopyChoice::Trial& trial) {
  return teamHas(trial.algorithms, Algorithm::kCma);
}

// Runs one call of (kBytes, out of place): cma takes `cmaUs` where allowed, the schedule
// `stepsUs` otherwise. Returns whether cma was allowed.
bool call(SingleCopyChoice& choice, double cmaUs, double stepsUs, size_t bytes = kBytes,
          bool inPlace = false) {
  const SingleCopyChoice::Trial trial =
      choice.begin(CollectiveKind::kAllReduce, bytes, inPlace, kSet, true);
  EXPECT_TRUE(teamHas(trial.algorithms, Algorithm::kDirect)) << "direct is never withheld";
  const bool cma = allowsCma(trial);
  choice.end(trial, cma ? Algorithm::kCma : Algorithm::kAuto, cma ? cmaUs : stepsUs);
  return cma;
}

TEST(SingleCopyChoiceTest, LeavesAloneWhatItDoesNotChoose) {
  SingleCopyChoice choice(kMax, kBoard);
  const TeamAlgorithms withBoard = kSet | teamBit(Algorithm::kBoard);
  struct Case {
    CollectiveKind kind;
    size_t bytes;
    TeamAlgorithms set;
    bool fallback;
  } cases[] = {
      {CollectiveKind::kAllReduce, kBytes, withBoard, true},  // the board: sets must match
      {CollectiveKind::kAllReduce, kBytes, teamBit(Algorithm::kDirect), true},  // no cma
      {CollectiveKind::kAllToAll, kBytes, teamBit(Algorithm::kCma), true},      // not all-reduce
      {CollectiveKind::kAllReduce, kBytes, kSet, false},   // forced: nothing behind it
      {CollectiveKind::kAllReduce, kBoard, kSet, true},    // the board's range
      {CollectiveKind::kAllReduce, kMax + 1, kSet, true},  // past COLLIE_TUNE_ADAPT_MAX
  };
  for (const Case& c : cases) {
    for (int i = 0; i < 4; ++i) {
      const SingleCopyChoice::Trial trial = choice.begin(c.kind, c.bytes, false, c.set, c.fallback);
      EXPECT_EQ(trial.algorithms, c.set);
      EXPECT_EQ(trial.slot, -1);
    }
  }
  SingleCopyChoice off(0, kBoard);  // COLLIE_TUNE_ADAPT_MAX=0
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(call(off, 100, 1));
}

TEST(SingleCopyChoiceTest, ExploresInBlocksThenKeepsTheFasterAndRechecks) {
  SingleCopyChoice choice(kMax, kBoard);
  constexpr uint64_t kBlock = SingleCopyChoice::kBlock;
  // Exploration: a block withholding cma, then a block allowing it; each block's first
  // call is untimed, the others fill the side's window.
  for (uint64_t i = 1; i <= 2 * kBlock; ++i) {
    EXPECT_FALSE(choice.decided(kBytes, false)) << "call " << i;
    EXPECT_EQ(call(choice, 100, 60), i > kBlock) << "call " << i;
  }
  EXPECT_TRUE(choice.decided(kBytes, false));
  EXPECT_FALSE(choice.prefersCma(kBytes, false));
  // The schedule from now on, except kRecheckCalls calls in a row every kRecheckEvery
  // calls of the class, which try cma again.
  constexpr uint64_t kEvery = SingleCopyChoice::kRecheckEvery;
  int allowed = 0;
  for (uint64_t i = 2 * kBlock + 1; i <= 2 * kEvery + 8; ++i) {
    const bool cma = call(choice, 100, 60);
    EXPECT_EQ(cma, i % kEvery < SingleCopyChoice::kRecheckCalls) << "call " << i;
    allowed += cma;
  }
  EXPECT_EQ(allowed, 2 * SingleCopyChoice::kRecheckCalls);
  // cma turns faster: the next recheck times one call of it (the first of the two pays
  // for the switch), and that call against the schedule's lower quartile hands the class
  // back to cma.
  int recheck = 0;
  for (uint64_t i = 0; i < 4 * kEvery && !choice.prefersCma(kBytes, false); ++i) {
    recheck += call(choice, 20, 60);
  }
  EXPECT_TRUE(choice.prefersCma(kBytes, false));
  EXPECT_EQ(recheck, SingleCopyChoice::kRecheckCalls);
  int kept = 0;
  for (int i = 0; i < 10; ++i) kept += call(choice, 20, 60);
  EXPECT_GE(kept, 8) << "at most one recheck (two calls) of the schedule in 10 calls";
}

TEST(SingleCopyChoiceTest, TimesOnlyCallsThatFollowTheirOwnSide) {
  // The first call after a switch is slow (the other side's footprint in the caches); it
  // must not count. Here it takes 1000 us on either side, and the steady state says cma.
  SingleCopyChoice choice(kMax, kBoard);
  bool previous = false;
  SingleCopyChoice::Trial trial;
  auto next = [&](uint64_t i) {
    trial = choice.begin(CollectiveKind::kAllReduce, kBytes, false, kSet, true);
    const bool cma = allowsCma(trial);
    const bool first = i == 1 || cma != previous;
    choice.end(trial, cma ? Algorithm::kCma : Algorithm::kAuto, first ? 1000 : cma ? 50 : 60);
    previous = cma;
  };
  uint64_t i = 1;
  for (; i <= 2 * SingleCopyChoice::kBlock; ++i) next(i);
  EXPECT_TRUE(choice.decided(kBytes, false));
  EXPECT_TRUE(choice.prefersCma(kBytes, false));
  EXPECT_NE(choice.describe(trial).find("cma 50.0 us, schedule 60.0 us (lower quartiles)"),
            std::string::npos)
      << choice.describe(trial);
  // The recheck: its first call (1000 us) untimed, its second judged alone.
  for (; i < SingleCopyChoice::kRecheckEvery + SingleCopyChoice::kRecheckCalls; ++i) next(i);
  EXPECT_TRUE(choice.prefersCma(kBytes, false));
  EXPECT_NE(choice.describe(trial).find("cma 50.0 us, schedule 60.0 us (a recheck) -> cma"),
            std::string::npos)
      << choice.describe(trial);
}

TEST(SingleCopyChoiceTest, ABurstOnTheChosenSideWaitsForARecheck) {
  // Decided for cma; then cma's calls slow down 3x (a burst of load). The schedule's
  // figures are from before the burst, so the class is judged again only when a recheck
  // timed the schedule: here it is as slow as cma, and cma stays; where the schedule's
  // recheck is clearly faster, it takes over.
  SingleCopyChoice choice(kMax, kBoard);
  for (uint64_t i = 0; i < 2 * SingleCopyChoice::kBlock; ++i) call(choice, 50, 60);
  ASSERT_TRUE(choice.prefersCma(kBytes, false));
  for (uint64_t i = 2 * SingleCopyChoice::kBlock; i < SingleCopyChoice::kRecheckEvery - 1; ++i) {
    EXPECT_TRUE(call(choice, 150, 60));
    EXPECT_TRUE(choice.prefersCma(kBytes, false)) << "call " << i + 1;
  }
  for (int i = 0; i < 20; ++i) call(choice, 150, 180);
  EXPECT_TRUE(choice.prefersCma(kBytes, false));
  for (uint64_t i = 0; i < SingleCopyChoice::kRecheckEvery; ++i) call(choice, 150, 60);
  EXPECT_FALSE(choice.prefersCma(kBytes, false));
}

TEST(SingleCopyChoiceTest, KeepsCmaWhereItIsFasterAndClassesAreApart) {
  SingleCopyChoice choice(kMax, kBoard);
  for (int i = 0; i < 12; ++i) call(choice, 50, 90);
  EXPECT_TRUE(choice.decided(kBytes, false));
  EXPECT_TRUE(choice.prefersCma(kBytes, false));
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(call(choice, 50, 90));
  // 768 KiB shares 1 MiB's class; 1 MiB + 1 byte and in place are classes of their own.
  EXPECT_TRUE(choice.decided(768 << 10, false));
  EXPECT_FALSE(choice.decided(kBytes + 1, false));
  EXPECT_FALSE(choice.decided(kBytes, true));
  for (int i = 1; i <= 12; ++i) EXPECT_EQ(call(choice, 90, 50, kBytes, true), i > 6);
  EXPECT_FALSE(choice.prefersCma(kBytes, true));
  EXPECT_TRUE(choice.prefersCma(kBytes, false));
}

TEST(SingleCopyChoiceTest, TheScheduleMustBeClearlyFasterToTakeOver) {
  // Within kMargin the tuner's choice (cma) stands; beyond it the schedule runs.
  SingleCopyChoice close(kMax, kBoard);
  for (int i = 0; i < 12; ++i) call(close, 100, 95);
  EXPECT_TRUE(close.decided(kBytes, false));
  EXPECT_TRUE(close.prefersCma(kBytes, false));
  SingleCopyChoice clear(kMax, kBoard);
  for (int i = 0; i < 12; ++i) call(clear, 100, 85);
  EXPECT_FALSE(clear.prefersCma(kBytes, false));
}

TEST(SingleCopyChoiceTest, RecordsWhatRanNotWhatItAllowed) {
  SingleCopyChoice choice(kMax, kBoard);
  // cma allowed but declined by a peer (or the team): the schedule ran and is timed as
  // such; cma never runs, so after the exploration's bound the tuner's set stands.
  for (uint64_t i = 1; i <= SingleCopyChoice::kMaxExploreCalls + 4; ++i) {
    const SingleCopyChoice::Trial trial =
        choice.begin(CollectiveKind::kAllReduce, kBytes, false, kSet, true);
    if (i > SingleCopyChoice::kMaxExploreCalls) {
      EXPECT_TRUE(allowsCma(trial));
      EXPECT_EQ(trial.slot, -1);
    }
    choice.end(trial, Algorithm::kAuto, 70);
  }
  EXPECT_FALSE(choice.decided(kBytes, false));
  // Direct (registered buffers) is not this choice: nothing recorded.
  SingleCopyChoice direct(kMax, kBoard);
  for (int i = 0; i < 20; ++i) {
    const SingleCopyChoice::Trial trial =
        direct.begin(CollectiveKind::kAllReduce, kBytes, false, kSet, true);
    EXPECT_FALSE(direct.end(trial, Algorithm::kDirect, 5));
  }
  EXPECT_FALSE(direct.decided(kBytes, false));
}

}  // namespace
}  // namespace collie
