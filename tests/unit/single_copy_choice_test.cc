// SingleCopyChoice (core/engine/single_copy_choice.h): which team steps it times, the
// alternation of the first calls of a size class, the choice by lower quartiles, the rechecks
// that follow a change, outcomes recorded by what ran.
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

TEST(SingleCopyChoiceTest, AlternatesThenKeepsTheFasterAndRechecks) {
  SingleCopyChoice choice(kMax, kBoard);
  // Exploration: odd calls allow cma, even ones withhold it, until each side has its
  // untimed first run and five timed ones.
  for (int i = 1; i <= 12; ++i) EXPECT_EQ(call(choice, 100, 60), i % 2 == 1) << "call " << i;
  EXPECT_TRUE(choice.decided(kBytes, false));
  EXPECT_FALSE(choice.prefersCma(kBytes, false));
  // The schedule from now on, except every 64th call of the class, which tries cma again.
  int allowed = 0;
  for (int i = 13; i <= 128; ++i) {
    const bool cma = call(choice, 100, 60);
    EXPECT_EQ(cma, i % SingleCopyChoice::kRecheckEvery == 0) << "call " << i;
    allowed += cma;
  }
  EXPECT_EQ(allowed, 2);
  // cma turns faster: the next rechecks replace its window one by one, and once their
  // lower quartile (the second fastest of five) is below the schedule's it runs again
  // (here after two).
  int recheck = 0;
  for (int i = 129; i <= 4 * 64 && !choice.prefersCma(kBytes, false); ++i) {
    recheck += call(choice, 20, 60);
  }
  EXPECT_TRUE(choice.prefersCma(kBytes, false));
  EXPECT_EQ(recheck, 2);
  int kept = 0;
  for (int i = 0; i < 10; ++i) kept += call(choice, 20, 60);
  EXPECT_GE(kept, 9) << "at most one recheck of the schedule in 10 calls";
}

TEST(SingleCopyChoiceTest, KeepsCmaWhereItIsFasterAndClassesAreApart) {
  SingleCopyChoice choice(kMax, kBoard);
  for (int i = 0; i < 12; ++i) call(choice, 50, 90);
  EXPECT_TRUE(choice.prefersCma(kBytes, false));
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(call(choice, 50, 90));
  // 768 KiB shares 1 MiB's class; 1 MiB + 1 byte and in place are classes of their own.
  EXPECT_TRUE(choice.decided(768 << 10, false));
  EXPECT_FALSE(choice.decided(kBytes + 1, false));
  EXPECT_FALSE(choice.decided(kBytes, true));
  for (int i = 1; i <= 12; ++i) EXPECT_EQ(call(choice, 90, 50, kBytes, true), i % 2 == 1);
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
