// The exchange schedules (core/plan/exchange.h) of every rank run together in the
// simulator with real bytes: all-to-all (pairwise, linear), all-to-all with a count and
// offset per peer, gather and scatter, on 1..16 ranks and 1-2 channels, sizes from 0.
// Every output element equals the definition's and bytes outside the blocks keep their
// sentinel; the simulator also fails a receive of another size and a deadlock.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/plan/schedule.h"
#include "core/sim/simulator.h"

namespace collie {
namespace {

constexpr int64_t kSentinel = 0x5A5A5A5A5A5A5A5A;

int64_t valueOf(int from, int to, size_t i) {
  return from * 1000000007LL + to * 100003LL + static_cast<int64_t>(i);
}

// Builds every rank's schedule of argsOf(r), runs them with the given inputs and returns
// each rank's output (as int64 elements).
std::vector<std::vector<int64_t>> simulate(int n, int channels, Algorithm algorithm,
                                           const std::function<CollectiveArgs(int)>& argsOf,
                                           const std::vector<std::vector<int64_t>>& inputs,
                                           const std::vector<size_t>& outCounts) {
  std::vector<Schedule> schedules;
  std::vector<SimulatedRank> ranks(n);
  for (int r = 0; r < n; ++r) {
    PlanParams params;
    params.rank = r;
    params.nranks = n;
    params.nchannels = channels;
    params.algorithm = algorithm;
    Result<Schedule> schedule = buildSchedule(argsOf(r), params);
    EXPECT_TRUE(schedule.isOk()) << schedule.status().toString();
    if (!schedule.isOk()) return {};
    schedules.push_back(std::move(schedule).value());
    ranks[r].input.resize(inputs[r].size() * 8);
    if (!inputs[r].empty())
      std::memcpy(ranks[r].input.data(), inputs[r].data(), inputs[r].size() * 8);
    std::vector<int64_t> out(outCounts[r], kSentinel);
    ranks[r].output.resize(out.size() * 8);
    if (!out.empty()) std::memcpy(ranks[r].output.data(), out.data(), out.size() * 8);
  }
  SimulationStats stats;
  Status status = simulateSchedules(schedules, &ranks, false, &stats);
  EXPECT_TRUE(status.isOk()) << status.toString();
  std::vector<std::vector<int64_t>> outputs(n);
  for (int r = 0; r < n; ++r) {
    outputs[r].resize(outCounts[r]);
    if (outCounts[r]) std::memcpy(outputs[r].data(), ranks[r].output.data(), outCounts[r] * 8);
  }
  return outputs;
}

struct Shape {
  int n;
  int channels;
  Algorithm algorithm;
};

std::vector<Shape> shapes() {
  std::vector<Shape> all;
  for (int n : {1, 2, 3, 4, 5, 8, 13, 16}) {
    for (int channels : {1, 2}) {
      for (Algorithm a : {Algorithm::kPairwise, Algorithm::kLinear})
        all.push_back({n, channels, a});
    }
  }
  return all;
}

TEST(ExchangeSchedule, AllToAll) {
  for (const Shape& s : shapes()) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}}) {
      SCOPED_TRACE(std::to_string(s.n) + " ranks " + std::to_string(s.channels) + " channels " +
                   std::string(algorithmName(s.algorithm)) + " count " + std::to_string(count));
      std::vector<std::vector<int64_t>> inputs(s.n);
      for (int r = 0; r < s.n; ++r) {
        for (int p = 0; p < s.n; ++p) {
          for (size_t i = 0; i < count; ++i) inputs[r].push_back(valueOf(r, p, i));
        }
      }
      auto outputs = simulate(
          s.n, s.channels, s.algorithm,
          [&](int) {
            return CollectiveArgs{
                .kind = CollectiveKind::kAllToAll, .count = count, .dtype = DataType::kInt64};
          },
          inputs, std::vector<size_t>(s.n, count * s.n));
      ASSERT_EQ(outputs.size(), static_cast<size_t>(s.n));
      for (int r = 0; r < s.n; ++r) {
        for (int p = 0; p < s.n; ++p) {
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(outputs[r][p * count + i], valueOf(p, r, i)) << "rank " << r << " from " << p;
          }
        }
      }
    }
  }
}

TEST(ExchangeSchedule, AllToAllVWithGapsAndEmptyBlocks) {
  for (const Shape& s : shapes()) {
    SCOPED_TRACE(std::to_string(s.n) + " ranks " + std::to_string(s.channels) + " channels " +
                 std::string(algorithmName(s.algorithm)));
    auto countOf = [](int from, int to) { return static_cast<size_t>((from * 7 + to * 3) % 5); };
    std::vector<std::shared_ptr<ExchangeLayout>> layouts(s.n);
    std::vector<std::vector<int64_t>> inputs(s.n);
    std::vector<size_t> outCounts(s.n);
    for (int r = 0; r < s.n; ++r) {
      auto l = std::make_shared<ExchangeLayout>();
      size_t in = 0, out = 0;
      for (int p = 0; p < s.n; ++p) {
        l->sendCounts.push_back(countOf(r, p));
        l->sendOffsets.push_back(in);
        in += countOf(r, p) + 1;
      }
      for (int p = s.n - 1; p >= 0; --p) {  // receive blocks in reverse rank order
        l->recvCounts.insert(l->recvCounts.begin(), countOf(p, r));
        l->recvOffsets.insert(l->recvOffsets.begin(), out);
        out += countOf(p, r) + 2;
      }
      inputs[r].assign(in, kSentinel);
      for (int p = 0; p < s.n; ++p) {
        for (size_t i = 0; i < l->sendCounts[p]; ++i)
          inputs[r][l->sendOffsets[p] + i] = valueOf(r, p, i);
      }
      outCounts[r] = out;
      layouts[r] = l;
    }
    auto outputs = simulate(
        s.n, s.channels, s.algorithm,
        [&](int r) {
          CollectiveArgs args{.kind = CollectiveKind::kAllToAllV, .dtype = DataType::kInt64};
          args.layout = layouts[r];
          return args;
        },
        inputs, outCounts);
    ASSERT_EQ(outputs.size(), static_cast<size_t>(s.n));
    for (int r = 0; r < s.n; ++r) {
      std::vector<int64_t> want(outCounts[r], kSentinel);
      for (int p = 0; p < s.n; ++p) {
        for (size_t i = 0; i < layouts[r]->recvCounts[p]; ++i) {
          want[layouts[r]->recvOffsets[p] + i] = valueOf(p, r, i);
        }
      }
      ASSERT_EQ(outputs[r], want) << "rank " << r;
    }
  }
}

TEST(ExchangeSchedule, GatherAndScatterEveryRoot) {
  for (const Shape& s : shapes()) {
    if (s.algorithm != Algorithm::kLinear) continue;
    for (size_t count : {size_t{0}, size_t{5}}) {
      for (int root = 0; root < s.n; ++root) {
        SCOPED_TRACE(std::to_string(s.n) + " ranks " + std::to_string(s.channels) +
                     " channels root " + std::to_string(root) + " count " + std::to_string(count));
        std::vector<std::vector<int64_t>> in(s.n);
        for (int r = 0; r < s.n; ++r) {
          for (size_t i = 0; i < count; ++i) in[r].push_back(valueOf(r, root, i));
        }
        auto gathered = simulate(
            s.n, s.channels, s.algorithm,
            [&](int) {
              return CollectiveArgs{.kind = CollectiveKind::kGather,
                                    .count = count,
                                    .dtype = DataType::kInt64,
                                    .root = root};
            },
            in, std::vector<size_t>(s.n, count * s.n));
        ASSERT_EQ(gathered.size(), static_cast<size_t>(s.n));
        for (int r = 0; r < s.n; ++r) {
          for (int p = 0; p < s.n; ++p) {
            for (size_t i = 0; i < count; ++i) {
              ASSERT_EQ(gathered[r][p * count + i], r == root ? valueOf(p, root, i) : kSentinel);
            }
          }
        }
        std::vector<std::vector<int64_t>> all(s.n);
        for (int r = 0; r < s.n; ++r) {
          for (int p = 0; p < s.n; ++p) {
            for (size_t i = 0; i < count; ++i) all[r].push_back(valueOf(r, p, i));
          }
        }
        auto scattered = simulate(
            s.n, s.channels, s.algorithm,
            [&](int) {
              return CollectiveArgs{.kind = CollectiveKind::kScatter,
                                    .count = count,
                                    .dtype = DataType::kInt64,
                                    .root = root};
            },
            all, std::vector<size_t>(s.n, count));
        ASSERT_EQ(scattered.size(), static_cast<size_t>(s.n));
        for (int r = 0; r < s.n; ++r) {
          for (size_t i = 0; i < count; ++i) ASSERT_EQ(scattered[r][i], valueOf(root, r, i));
        }
      }
    }
  }
}

TEST(ExchangeSchedule, RefusesWhatTheCollectiveHasNot) {
  PlanParams params;
  params.nranks = 3;
  params.algorithm = Algorithm::kRing;
  CollectiveArgs args{.kind = CollectiveKind::kAllToAll, .count = 4};
  Result<Schedule> s = buildSchedule(args, params);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.status().message().find("use pairwise, linear or auto"), std::string::npos);
  args.kind = CollectiveKind::kGather;
  params.algorithm = Algorithm::kPairwise;
  s = buildSchedule(args, params);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.status().message().find("use linear or auto"), std::string::npos);
  args.kind = CollectiveKind::kAllToAllV;  // without a layout
  params.algorithm = Algorithm::kAuto;
  s = buildSchedule(args, params);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.status().message().find("needs a layout"), std::string::npos);
  args.kind = CollectiveKind::kAllReduce;
  params.algorithm = Algorithm::kLinear;
  s = buildSchedule(args, params);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.status().message().find("linear allreduce is not implemented; use ring, tree"),
            std::string::npos)
      << s.status().toString();
}

}  // namespace
}  // namespace collie
