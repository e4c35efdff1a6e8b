// Planner: a schedule is built once per call and then shared from the cache (another
// collective in between does not make the tuner decide it again);
// new tuned constants or a new plan channel count drop the cache; the plan channel
// count bounds the schedules (clamped, and ignored when the channel count is fixed);
// a forced algorithm is what runs; bad arguments fail before anything is cached; a
// tiny cache budget keeps nothing; and concurrent planning stays consistent.
#include "core/engine/planner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace collie {
namespace {

EngineConfig configOf(int nranks, int nchannels) {
  EngineConfig config;
  config.rank = 1;
  config.nranks = nranks;
  config.nchannels = nchannels;
  config.chunkBytes = 4096;
  return config;
}

CollectiveArgs allReduce(size_t count) {
  CollectiveArgs args;
  args.count = count;
  return args;
}

TEST(PlannerTest, BuildsOnceThenSharesFromTheCache) {
  Planner planner(configOf(4, 2), TeamOffer{});
  auto first = planner.plan(allReduce(1000));
  ASSERT_TRUE(first.isOk()) << first.status().toString();
  EXPECT_EQ((*first)->rank, 1);
  EXPECT_EQ((*first)->nranks, 4);
  EXPECT_EQ((*first)->args.count, 1000u);
  auto again = planner.plan(allReduce(1000));
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(first->get(), again->get());
  auto other = planner.plan(allReduce(2000));
  ASSERT_TRUE(other.isOk());
  EXPECT_NE(first->get(), other->get());
  EXPECT_EQ(planner.cachedSchedules(), 2u);
}

TEST(PlannerTest, AnotherCollectiveBetweenRepeatsKeepsTheSchedule) {
  Planner planner(configOf(4, 2), TeamOffer{});
  auto first = planner.plan(allReduce(1 << 20));
  ASSERT_TRUE(first.isOk());
  CollectiveArgs barrier;
  barrier.kind = CollectiveKind::kBarrier;
  ASSERT_TRUE(planner.plan(barrier).isOk());
  EXPECT_EQ(planner.tunerDecisions(), 2u);
  auto again = planner.plan(allReduce(1 << 20));
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(first->get(), again->get());
  // The repeated call took its schedule from the cache without asking the tuner.
  EXPECT_EQ(planner.tunerDecisions(), 2u);
  // What the cache hands back is what a planner that never saw the call decides.
  Planner fresh(configOf(4, 2), TeamOffer{});
  auto decided = fresh.plan(allReduce(1 << 20));
  ASSERT_TRUE(decided.isOk());
  EXPECT_EQ((*again)->algorithm, (*decided)->algorithm);
  EXPECT_EQ((*again)->fallback, (*decided)->fallback);
  EXPECT_EQ((*again)->channels.size(), (*decided)->channels.size());
  EXPECT_EQ((*again)->stepCount(), (*decided)->stepCount());
  EXPECT_EQ(scheduleToJson(**again), scheduleToJson(**decided));
}

TEST(PlannerTest, NewTuneConstantsDropTheCache) {
  Planner planner(configOf(4, 2), TeamOffer{});
  auto before = planner.plan(allReduce(1000));
  ASSERT_TRUE(before.isOk());
  TuneConstants constants;
  constants.alphaUs = 3.5;
  constants.bwGBps = 12;
  constants.source = "probe";
  planner.setTuneConstants(constants);
  EXPECT_EQ(planner.cachedSchedules(), 0u);
  EXPECT_EQ(planner.tuneConstants().alphaUs, 3.5);
  EXPECT_EQ(planner.tuneConstants().source, "probe");
  auto after = planner.plan(allReduce(1000));
  ASSERT_TRUE(after.isOk());
  EXPECT_NE(before->get(), after->get());
  EXPECT_EQ(planner.cachedSchedules(), 1u);
}

TEST(PlannerTest, PlanChannelsBoundTheSchedulesUnlessFixed) {
  const CollectiveArgs big = allReduce(1 << 20);  // 4 MiB: a chunk for every channel
  Planner planner(configOf(4, 4), TeamOffer{});
  auto free = planner.plan(big);
  ASSERT_TRUE(free.isOk());
  EXPECT_LE((*free)->channels.size(), 4u);
  planner.setPlanChannels(0);  // clamped to 1
  EXPECT_EQ(planner.cachedSchedules(), 0u);
  auto one = planner.plan(big);
  ASSERT_TRUE(one.isOk());
  EXPECT_EQ((*one)->channels.size(), 1u);
  planner.setPlanChannels(2);
  auto two = planner.plan(big);
  ASSERT_TRUE(two.isOk());
  EXPECT_LE((*two)->channels.size(), 2u);
  EXPECT_GE((*two)->channels.size(), 1u);

  EngineConfig fixed = configOf(4, 4);
  fixed.channelsFixed = true;
  Planner fixedPlanner(fixed, TeamOffer{});
  fixedPlanner.setPlanChannels(1);  // ignored: COLLIE_NCHANNELS wins
  auto four = fixedPlanner.plan(big);
  ASSERT_TRUE(four.isOk());
  EXPECT_EQ((*four)->channels.size(), 4u);
}

TEST(PlannerTest, ForcedAlgorithmRuns) {
  EngineConfig config = configOf(4, 1);
  config.algorithm = Algorithm::kTree;
  Planner planner(config, TeamOffer{});
  for (size_t count : {size_t{16}, size_t{1} << 20}) {
    auto schedule = planner.plan(allReduce(count));
    ASSERT_TRUE(schedule.isOk()) << schedule.status().toString();
    EXPECT_EQ((*schedule)->algorithm, Algorithm::kTree) << count;
  }
}

TEST(PlannerTest, BadArgumentsFailAndCacheNothing) {
  Planner planner(configOf(4, 1), TeamOffer{});
  CollectiveArgs args;
  args.kind = CollectiveKind::kBroadcast;
  args.count = 10;
  args.root = 9;  // not a rank
  auto schedule = planner.plan(args);
  EXPECT_FALSE(schedule.isOk());
  EXPECT_EQ(planner.cachedSchedules(), 0u);
}

TEST(PlannerTest, TinyBudgetKeepsNothing) {
  EngineConfig config = configOf(4, 1);
  config.scheduleCacheBytes = 1;
  Planner planner(config, TeamOffer{});
  auto a = planner.plan(allReduce(1000));
  auto b = planner.plan(allReduce(1000));
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_NE(a->get(), b->get());
  EXPECT_EQ((*a)->channels.size(), (*b)->channels.size());
  EXPECT_EQ(planner.cachedSchedules(), 0u);
}

TEST(PlannerTest, ConcurrentPlanningStaysConsistent) {
  Planner planner(configOf(4, 2), TeamOffer{});
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::thread tuner([&] {
    for (int i = 0; !stop; ++i) {
      TuneConstants constants;
      constants.alphaUs = 1 + i % 7;
      planner.setTuneConstants(constants);
      planner.setPlanChannels(1 + i % 2);
    }
  });
  std::vector<std::thread> planners;
  for (int t = 0; t < 3; ++t) {
    planners.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        const size_t count = 1 + (i * 7 + t) % 50 * 1000;
        auto schedule = planner.plan(allReduce(count));
        if (!schedule.isOk() || (*schedule)->args.count != count ||
            (*schedule)->channels.size() > 2) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& t : planners) t.join();
  stop = true;
  tuner.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace collie
