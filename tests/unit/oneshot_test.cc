// The one-shot all-reduce (2 ranks): its schedules run by the simulator give both
// ranks the exact, bit-identical result (operands in rank order, also for min over
// signed zeros), in place too; the tuner picks it for small 2-rank all-reduces only.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/plan/schedule.h"
#include "core/sim/simulator.h"
#include "core/tune/tuner.h"

namespace collie {
namespace {

std::vector<Schedule> oneShotSchedules(const CollectiveArgs& args) {
  std::vector<Schedule> out;
  for (int r = 0; r < 2; ++r) {
    PlanParams params;
    params.rank = r;
    params.nranks = 2;
    params.algorithm = Algorithm::kOneShot;
    Result<Schedule> schedule = buildSchedule(args, params);
    EXPECT_TRUE(schedule.isOk()) << schedule.status().toString();
    out.push_back(std::move(schedule).value());
  }
  return out;
}

// float inputs whose reductions are order-sensitive in their bits: signed zeros for
// min/max, and sums that round.
float value(int rank, size_t i) {
  if (i % 5 == 0) return rank == 0 ? 0.0f : -0.0f;
  return (rank == 0 ? 1.0f : 3e-8f) * static_cast<float>(i % 97) + (rank ? 0.1f : 1e7f);
}

TEST(OneShotTest, BothRanksGetTheSameExactBits) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
    for (bool inPlace : {false, true}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{1000}}) {
        CollectiveArgs args;
        args.count = count;
        args.dtype = DataType::kFloat32;
        args.op = op;
        std::vector<Schedule> schedules = oneShotSchedules(args);
        EXPECT_EQ(schedules[0].algorithm, Algorithm::kOneShot);
        std::vector<SimulatedRank> ranks(2);
        for (int r = 0; r < 2; ++r) {
          std::vector<float> in(count);
          for (size_t i = 0; i < count; ++i) in[i] = value(r, i);
          ranks[r].input.resize(count * 4);
          ranks[r].output.assign(count * 4, 0x5a);
          if (count) std::memcpy(ranks[r].input.data(), in.data(), count * 4);
          if (inPlace) ranks[r].output = ranks[r].input;
        }
        SimulationStats stats;
        Status status = simulateSchedules(schedules, &ranks, inPlace, &stats);
        ASSERT_TRUE(status.isOk()) << status.toString();
        EXPECT_EQ(stats.messages, 2u);  // one message each way
        for (size_t i = 0; i < count; ++i) {
          const float a = value(0, i), b = value(1, i);
          float want = op == ReduceOp::kMin   ? (a < b ? a : b)
                       : op == ReduceOp::kMax ? (a > b ? a : b)
                                              : a + b;
          if (op == ReduceOp::kAvg) want /= 2;
          for (int r = 0; r < 2; ++r) {
            float got;
            std::memcpy(&got, ranks[r].output.data() + i * 4, 4);
            uint32_t gotBits, wantBits;
            std::memcpy(&gotBits, &got, 4);
            std::memcpy(&wantBits, &want, 4);
            ASSERT_EQ(gotBits, wantBits) << "rank " << r << " element " << i << " op "
                                         << reduceOpName(op) << (inPlace ? " in place" : "");
          }
        }
        ASSERT_EQ(std::memcmp(ranks[0].output.data(), ranks[1].output.data(), count * 4), 0);
      }
    }
  }
}

TEST(OneShotTest, OnlyForAllReduceOnTwoRanks) {
  CollectiveArgs args;
  args.count = 16;
  PlanParams params;
  params.nranks = 3;
  params.algorithm = Algorithm::kOneShot;
  EXPECT_EQ(buildSchedule(args, params).status().code(), StatusCode::kUnsupported);
  params.nranks = 2;
  args.kind = CollectiveKind::kAllGather;
  EXPECT_EQ(buildSchedule(args, params).status().code(), StatusCode::kUnsupported);
}

TEST(OneShotTest, TunerPicksItForSmallTwoRankAllReduces) {
  TuneConstants constants;  // alpha 20 us, 2 GB/s
  TuneLimits limits;
  for (size_t bytes : {size_t{8}, size_t{4096}, kOneShotMaxBytes}) {
    EXPECT_EQ(decide(CollectiveKind::kAllReduce, bytes, 2, limits, constants).algorithm,
              Algorithm::kOneShot)
        << bytes;
    EXPECT_EQ(decide(CollectiveKind::kAllReduce, bytes, 2, limits, constants).nchannels, 1);
    EXPECT_NE(decide(CollectiveKind::kAllReduce, bytes, 3, limits, constants).algorithm,
              Algorithm::kOneShot);
  }
  EXPECT_NE(
      decide(CollectiveKind::kAllReduce, 2 * kOneShotMaxBytes, 2, limits, constants).algorithm,
      Algorithm::kOneShot);
  // Forced where it does not apply: the tuner chooses among the others.
  limits.forced = Algorithm::kOneShot;
  EXPECT_NE(decide(CollectiveKind::kAllReduce, 64, 4, limits, constants).algorithm,
            Algorithm::kOneShot);
  EXPECT_EQ(decide(CollectiveKind::kAllReduce, 1 << 20, 2, limits, constants).algorithm,
            Algorithm::kOneShot);
  EXPECT_LT(
      predictMicros(CollectiveKind::kAllReduce, Algorithm::kOneShot, 4096, 2, 1, 4096, constants),
      predictMicros(CollectiveKind::kAllReduce, Algorithm::kRing, 4096, 2, 1, 4096, constants));
}

}  // namespace
}  // namespace collie
