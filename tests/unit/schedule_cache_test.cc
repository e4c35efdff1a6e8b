// ScheduleCache: bounded by the bytes of the schedules it holds, least recently used
// out first, real schedules from buildSchedule().
#include "core/engine/schedule_cache.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace collie {
namespace {

std::shared_ptr<const Schedule> ringAllReduce(size_t count, int nranks, size_t chunkBytes) {
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllReduce;
  args.count = count;
  args.dtype = DataType::kFloat32;
  PlanParams params;
  params.nranks = nranks;
  params.nchannels = 2;
  params.chunkBytes = chunkBytes;
  params.algorithm = Algorithm::kRing;
  Result<Schedule> schedule = buildSchedule(args, params);
  EXPECT_TRUE(schedule.isOk()) << schedule.status().toString();
  return std::make_shared<const Schedule>(std::move(schedule).value());
}

ScheduleKey keyOf(size_t count) { return ScheduleKey{0, count, 0, 0, 0, -1}; }

TEST(ScheduleCache, BytesGrowWithTheSteps) {
  auto small = ringAllReduce(1024, 4, 64 * 1024);
  auto large = ringAllReduce(size_t{1} << 28, 8, 512 * 1024);  // 1 GiB of float32
  const size_t smallBytes = scheduleBytes(*small);
  const size_t largeBytes = scheduleBytes(*large);
  EXPECT_GE(largeBytes, large->stepCount() * sizeof(Step));
  EXPECT_GT(largeBytes, 100 * smallBytes);
  // What a count-bounded cache of 256 such schedules could have held.
  std::printf(
      "schedule bytes: 4 KiB all-reduce on 4 ranks %zu (%zu steps); 1 GiB on 8 ranks "
      "%zu (%zu steps)\n",
      smallBytes, small->stepCount(), largeBytes, large->stepCount());
}

TEST(ScheduleCache, FindsWhatItKeptAndMarksItRecentlyUsed) {
  auto a = ringAllReduce(1000, 4, 64 * 1024);
  auto b = ringAllReduce(2000, 4, 64 * 1024);
  auto c = ringAllReduce(3000, 4, 64 * 1024);
  // Room for two of them.
  const size_t each = std::max({scheduleBytes(*a), scheduleBytes(*b), scheduleBytes(*c)});
  ScheduleCache cache(2 * each + each / 2);
  EXPECT_EQ(cache.find(keyOf(1000)), nullptr);
  cache.insert(keyOf(1000), a);
  cache.insert(keyOf(2000), b);
  EXPECT_EQ(cache.find(keyOf(1000)), a);  // a is now the most recently used
  cache.insert(keyOf(3000), c);           // evicts b, the least recently used
  EXPECT_EQ(cache.find(keyOf(2000)), nullptr);
  EXPECT_EQ(cache.find(keyOf(1000)), a);
  EXPECT_EQ(cache.find(keyOf(3000)), c);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_LE(cache.bytes(), cache.budget());
}

TEST(ScheduleCache, StaysWithinItsBudgetAcrossManySizes) {
  ScheduleCache cache(256 * 1024);
  size_t kept = 0;
  for (size_t count = 1000; count < 400000; count += 997) {
    cache.insert(keyOf(count), ringAllReduce(count, 8, 16 * 1024));
    ASSERT_LE(cache.bytes(), cache.budget()) << "after count " << count;
    kept = cache.size();
  }
  EXPECT_GT(kept, 1u);
  // The most recent one is always there.
  EXPECT_NE(cache.find(keyOf(1000 + 997 * ((400000 - 1000) / 997))), nullptr);
}

TEST(ScheduleCache, ReplacingAKeyKeepsTheAccountExact) {
  auto a = ringAllReduce(1000, 4, 64 * 1024);
  auto b = ringAllReduce(50000, 4, 4 * 1024);
  ScheduleCache cache(size_t{1} << 20);
  cache.insert(keyOf(7), a);
  cache.insert(keyOf(7), b);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.bytes(), scheduleBytes(*b));
  EXPECT_EQ(cache.find(keyOf(7)), b);
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
}

TEST(ScheduleCache, ASchedulePastTheWholeBudgetIsNotKept) {
  auto large = ringAllReduce(size_t{1} << 24, 8, 16 * 1024);
  auto small = ringAllReduce(1000, 4, 64 * 1024);
  ScheduleCache cache(scheduleBytes(*large) - 1);
  cache.insert(keyOf(1), small);
  cache.insert(keyOf(2), large);
  EXPECT_EQ(cache.find(keyOf(2)), nullptr);
  EXPECT_EQ(cache.find(keyOf(1)), small);  // and it evicted nothing for it
}

}  // namespace
}  // namespace collie
