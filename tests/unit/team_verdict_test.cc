// TeamVerdict (transports/shm/shm_verdict.h): one outcome per team collective, decided by
// the first compare-and-swap on one shared word.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "transports/shm/shm_verdict.h"

namespace collie::shm {
namespace {

TEST(TeamVerdictTest, SuccessFirstMakesTheFailingRankComplete) {
  std::atomic<uint64_t> word{0};
  TeamVerdict rank0(&word, 0), rank1(&word, 1);
  EXPECT_TRUE(rank1.decideOk(1).isOk());
  // Rank 0 timed out meanwhile: the collective succeeded, so it completes it.
  EXPECT_TRUE(rank0.decideFailed(1, timeoutError("late")));
  EXPECT_TRUE(rank0.decideOk(1).isOk());
  EXPECT_TRUE(rank0.failedAlready(1).isOk());
}

TEST(TeamVerdictTest, FailureFirstFailsTheLateRankNamingTheFailedRank) {
  std::atomic<uint64_t> word{0};
  TeamVerdict rank0(&word, 0), rank3(&word, 3);
  EXPECT_TRUE(rank0.decideOk(1).isOk());
  EXPECT_FALSE(rank0.decideFailed(2, timeoutError("rank 3 did not join")));
  Status late = rank3.decideOk(2);
  ASSERT_FALSE(late.isOk());
  EXPECT_EQ(late.code(), StatusCode::kRemoteError);
  EXPECT_EQ(late.peer(), 0);
  EXPECT_NE(late.message().find("rank 0 failed this team collective (Timeout)"), std::string::npos)
      << late.toString();
  EXPECT_EQ(rank3.failedAlready(2).peer(), 0);
  // A second failure does not overturn it, nor does it complete anything.
  EXPECT_FALSE(rank3.decideFailed(2, abortedError("aborted")));
  EXPECT_EQ(rank3.decideOk(2).peer(), 0);
}

TEST(TeamVerdictTest, ALaterSequenceMeansThisOneSucceeded) {
  std::atomic<uint64_t> word{0};
  TeamVerdict rank0(&word, 0), rank1(&word, 1);
  EXPECT_TRUE(rank1.decideOk(7).isOk());
  // Rank 1 went on and failed 8 while rank 0 still decides 7: 7 had succeeded.
  EXPECT_FALSE(rank1.decideFailed(8, timeoutError("slow")));
  EXPECT_TRUE(rank0.decideOk(7).isOk());
  EXPECT_TRUE(rank0.decideFailed(7, timeoutError("late")));
  EXPECT_FALSE(rank0.decideOk(8).isOk());
}

TEST(TeamVerdictTest, SequencesWrapAfterFortyBits) {
  std::atomic<uint64_t> word{0};
  TeamVerdict rank0(&word, 0), rank1(&word, 1);
  const uint64_t last = (uint64_t{1} << 40) - 1;
  EXPECT_TRUE(rank0.decideOk(last).isOk());
  EXPECT_TRUE(rank1.decideOk(last).isOk());
  // last + 1 wraps to 0 in the word: still undecided, then failed for everyone.
  EXPECT_FALSE(rank0.decideFailed(last + 1, timeoutError("wrapped")));
  EXPECT_EQ(rank1.decideOk(last + 1).peer(), 0);
  // and last is still known to have succeeded.
  EXPECT_TRUE(rank1.decideFailed(last, timeoutError("old")));
}

// Ranks as threads race to decide each sequence, some succeeding, some failing: every
// rank ends with the same outcome, and a rank that tried to fail a success completes it.
TEST(TeamVerdictTest, RacingRanksAgreeOnEveryCollective) {
  constexpr int kRanks = 4;
  constexpr uint64_t kCollectives = 2000;
  std::atomic<uint64_t> word{0};
  std::vector<std::vector<uint8_t>> succeeded(kRanks, std::vector<uint8_t>(kCollectives + 1));
  std::vector<std::thread> threads;
  // A barrier per sequence: every rank decided s - 1 before any decides s, as on the
  // board (no rank starts s before every rank published s - 1, which it does after it
  // decided s - 1).
  std::atomic<uint64_t> started{0};
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      TeamVerdict verdict(&word, r);
      std::mt19937 rng(1234 + r);
      for (uint64_t s = 1; s <= kCollectives; ++s) {
        started.fetch_add(1);
        while (started.load() < s * kRanks) std::this_thread::yield();
        const bool fails = rng() % 8 == 0;
        succeeded[r][s] =
            fails ? verdict.decideFailed(s, timeoutError("t")) : verdict.decideOk(s).isOk();
      }
    });
  }
  for (auto& t : threads) t.join();
  int failed = 0;
  for (uint64_t s = 1; s <= kCollectives; ++s) {
    for (int r = 1; r < kRanks; ++r)
      ASSERT_EQ(succeeded[r][s], succeeded[0][s]) << "sequence " << s;
    failed += succeeded[0][s] == 0;
  }
  // Both outcomes occurred (each collective fails when a failing rank swaps first).
  EXPECT_GT(failed, 0);
  EXPECT_LT(failed, static_cast<int>(kCollectives));
}

}  // namespace
}  // namespace collie::shm
