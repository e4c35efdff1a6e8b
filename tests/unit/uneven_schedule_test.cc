// The ring schedules with a count per rank (kAllGatherV, kReduceScatterV; core/plan/ring.h)
// of every rank run together in the simulator with real bytes: 1..8 ranks, 1-2 channels,
// chunks small enough for several rounds, counts uneven, zero and all zero. Every output
// element equals the definition's (int64 sums are exact), bytes past the block keep their
// sentinel, and the simulator fails a receive of another size and a deadlock. Also: the
// v kinds plan messages on channel 0 even when every count is zero (so ranks that
// disagree on counts meet a fingerprint), and bad block counts are refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/plan/schedule.h"
#include "core/sim/simulator.h"

namespace collie {
namespace {

constexpr int64_t kSentinel = 0x5A5A5A5A5A5A5A5A;

int64_t valueOf(int rank, size_t i) { return rank * 1000003LL + static_cast<int64_t>(i) * 7 - 5; }

CollectiveArgs argsOf(CollectiveKind kind, const std::vector<size_t>& counts) {
  CollectiveArgs args;
  args.kind = kind;
  args.dtype = DataType::kInt64;
  args.op = ReduceOp::kSum;
  args.blocks = BlockCounts::packed(counts);
  args.count = args.blocks->total;
  return args;
}

PlanParams paramsOf(int rank, int n, int channels = 1, size_t chunkBytes = 512 << 10) {
  PlanParams params;
  params.rank = rank;
  params.nranks = n;
  params.nchannels = channels;
  params.chunkBytes = chunkBytes;
  return params;
}

// Runs every rank's schedule; inputs[r] and the output sizes are in int64 elements.
std::vector<std::vector<int64_t>> simulate(const CollectiveArgs& args, int n, int channels,
                                           size_t chunkBytes,
                                           const std::vector<std::vector<int64_t>>& inputs,
                                           const std::vector<size_t>& outCounts,
                                           HostLayoutPtr hosts = nullptr) {
  std::vector<Schedule> schedules;
  std::vector<SimulatedRank> ranks(n);
  for (int r = 0; r < n; ++r) {
    PlanParams params = paramsOf(r, n, channels, chunkBytes);
    params.hosts = hosts;
    Result<Schedule> schedule = buildSchedule(args, params);
    EXPECT_TRUE(schedule.isOk()) << schedule.status().toString();
    if (!schedule.isOk()) return {};
    schedules.push_back(std::move(schedule).value());
    ranks[r].input.resize(inputs[r].size() * 8);
    if (!inputs[r].empty())
      std::memcpy(ranks[r].input.data(), inputs[r].data(), inputs[r].size() * 8);
    // One sentinel element past the output, to catch a write beyond the block.
    std::vector<int64_t> out(outCounts[r] + 1, kSentinel);
    ranks[r].output.resize(out.size() * 8);
    std::memcpy(ranks[r].output.data(), out.data(), out.size() * 8);
  }
  SimulationStats stats;
  Status status = simulateSchedules(schedules, &ranks, false, &stats);
  EXPECT_TRUE(status.isOk()) << status.toString();
  std::vector<std::vector<int64_t>> outputs(n);
  for (int r = 0; r < n; ++r) {
    outputs[r].resize(outCounts[r] + 1);
    std::memcpy(outputs[r].data(), ranks[r].output.data(), outputs[r].size() * 8);
  }
  return outputs;
}

// Count patterns for n ranks: uneven with zeros, one rank with everything, all zero,
// and equal (the v kinds must agree with the equal-block collectives).
std::vector<std::vector<size_t>> patterns(int n) {
  std::vector<size_t> uneven(n), one(n, 0), zero(n, 0), equal(n, 5);
  for (int p = 0; p < n; ++p) uneven[p] = (p * 7 + 3) % 11;  // 3, 10, 6, 2, 9, 5, 1, 8
  if (n > 1) uneven[1] = 0;
  one[n - 1] = 37;
  return {uneven, one, zero, equal};
}

struct Shape {
  int n;
  int channels;
  size_t chunkBytes;
  bool cyclicHosts = false;  // ranks dealt over 2 hosts cyclically: positions != ranks
};

// Two hosts, rank r on host r % 2 (as a cyclic launcher numbers them), for n >= 4.
HostLayoutPtr hostsOf(const Shape& s) {
  if (!s.cyclicHosts) return nullptr;
  std::vector<int> hostOfRank;
  for (int r = 0; r < s.n; ++r) hostOfRank.push_back(r % 2);
  return std::make_shared<const HostLayout>(HostLayout::make(hostOfRank));
}

std::vector<Shape> shapes() {
  std::vector<Shape> all;
  for (int n : {1, 2, 3, 4, 5, 8}) {
    for (int channels : {1, 2}) {
      for (size_t chunk : {size_t{16}, size_t{1} << 20}) all.push_back({n, channels, chunk});
    }
    if (n >= 4) all.push_back({n, 2, 16, true});
  }
  return all;
}

std::string describe(const Shape& s, const std::vector<size_t>& counts) {
  std::string text = std::to_string(s.n) + " ranks, " + std::to_string(s.channels) +
                     " channels, chunk " + std::to_string(s.chunkBytes) +
                     (s.cyclicHosts ? ", 2 hosts cyclic" : "") + ", counts";
  for (size_t c : counts) text += " " + std::to_string(c);
  return text;
}

TEST(UnevenSchedule, AllGatherV) {
  for (const Shape& s : shapes()) {
    for (const std::vector<size_t>& counts : patterns(s.n)) {
      SCOPED_TRACE(describe(s, counts));
      const CollectiveArgs args = argsOf(CollectiveKind::kAllGatherV, counts);
      std::vector<std::vector<int64_t>> inputs(s.n);
      std::vector<int64_t> expected;
      for (int r = 0; r < s.n; ++r) {
        for (size_t i = 0; i < counts[r]; ++i) inputs[r].push_back(valueOf(r, i));
        expected.insert(expected.end(), inputs[r].begin(), inputs[r].end());
      }
      expected.push_back(kSentinel);
      const auto outputs = simulate(args, s.n, s.channels, s.chunkBytes, inputs,
                                    std::vector<size_t>(s.n, args.count));
      ASSERT_EQ(outputs.size(), static_cast<size_t>(s.n));
      for (int r = 0; r < s.n; ++r) EXPECT_EQ(outputs[r], expected) << "rank " << r;
    }
  }
}

TEST(UnevenSchedule, ReduceScatterV) {
  for (const Shape& s : shapes()) {
    for (const std::vector<size_t>& counts : patterns(s.n)) {
      SCOPED_TRACE(describe(s, counts));
      const CollectiveArgs args = argsOf(CollectiveKind::kReduceScatterV, counts);
      std::vector<std::vector<int64_t>> inputs(s.n);
      std::vector<int64_t> sum(args.count, 0);
      for (int r = 0; r < s.n; ++r) {
        for (size_t i = 0; i < args.count; ++i) {
          inputs[r].push_back(valueOf(r, i));
          sum[i] += valueOf(r, i);
        }
      }
      const auto outputs =
          simulate(args, s.n, s.channels, s.chunkBytes, inputs, counts, hostsOf(s));
      ASSERT_EQ(outputs.size(), static_cast<size_t>(s.n));
      for (int r = 0; r < s.n; ++r) {
        std::vector<int64_t> expected(sum.begin() + args.blocks->offsets[r],
                                      sum.begin() + args.blocks->offsets[r] + counts[r]);
        expected.push_back(kSentinel);
        EXPECT_EQ(outputs[r], expected) << "rank " << r;
      }
    }
  }
}

// Every rank sends to and receives from both ring neighbours on channel 0, also when
// every count is zero: a rank whose counts differ meets another fingerprint at once.
TEST(UnevenSchedule, ZeroCountsStillMeetTheNeighbours) {
  for (CollectiveKind kind : {CollectiveKind::kAllGatherV, CollectiveKind::kReduceScatterV}) {
    const CollectiveArgs args = argsOf(kind, {0, 0, 0});
    for (int r = 0; r < 3; ++r) {
      Result<Schedule> schedule = buildSchedule(args, paramsOf(r, 3, 2));
      ASSERT_TRUE(schedule.isOk()) << schedule.status().toString();
      bool sends = false, receives = false;
      for (const Step& step : schedule.value().channels[0]) {
        sends |= step.sendPeer == (r + 1) % 3;
        receives |= step.recvPeer == (r + 2) % 3;
      }
      EXPECT_TRUE(sends && receives) << collectiveName(kind) << " rank " << r;
      EXPECT_TRUE(schedule.value().channels[1].empty());
    }
  }
}

// The streamed generators (streamSchedule, as collie sim runs thousands of ranks) give
// the same messages: sizes match and nothing deadlocks, with and without hosts.
TEST(UnevenSchedule, StreamedRingsMatchUp) {
  for (CollectiveKind kind : {CollectiveKind::kAllGatherV, CollectiveKind::kReduceScatterV}) {
    for (const Shape& s : shapes()) {
      std::vector<size_t> counts = patterns(s.n)[0];
      SCOPED_TRACE(std::string(collectiveName(kind)) + " " + describe(s, counts));
      PlanParams params = paramsOf(0, s.n, s.channels, s.chunkBytes);
      params.hosts = hostsOf(s);
      SimulationStats stats;
      Status status = simulateCollective(argsOf(kind, counts), params, nullptr, false, &stats);
      EXPECT_TRUE(status.isOk()) << status.toString();
    }
  }
}

TEST(UnevenSchedule, RefusesBadBlockCounts) {
  CollectiveArgs args = argsOf(CollectiveKind::kAllGatherV, {1, 2});
  Result<Schedule> wrongSize = buildSchedule(args, paramsOf(0, 3));
  ASSERT_FALSE(wrongSize.isOk());
  EXPECT_NE(wrongSize.status().message().find("needs 3 block counts"), std::string::npos)
      << wrongSize.status().toString();
  args.blocks = nullptr;
  EXPECT_FALSE(buildSchedule(args, paramsOf(0, 2)).isOk());
  CollectiveArgs plain{.kind = CollectiveKind::kAllGather, .count = 3};
  plain.blocks = BlockCounts::packed({1, 2});
  Result<Schedule> extra = buildSchedule(plain, paramsOf(0, 2));
  ASSERT_FALSE(extra.isOk());
  EXPECT_NE(extra.status().message().find("takes no block counts"), std::string::npos);
}

}  // namespace
}  // namespace collie
