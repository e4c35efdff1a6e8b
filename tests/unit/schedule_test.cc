// Schedules checked with no transport: every rank's schedule of a collective is run
// by the simulator, which moves real bytes between virtual ranks, and each rank's
// output is compared with the exact expected result.
#include "core/plan/schedule.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <set>
#include <tuple>
#include <vector>

#include "core/plan/team_step.h"
#include "core/sim/simulator.h"

namespace collie {
namespace {

int64_t inputValue(int rank, size_t index) {
  return static_cast<int64_t>((rank * 131 + index * 7) % 23) - 11;
}

int64_t combine(ReduceOp op, int64_t a, int64_t b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
    case ReduceOp::kPreMulSum:  // the kernels reduce it as sum (factor applied before)
      return a + b;
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kBand:
      return a & b;
    case ReduceOp::kBor:
      return a | b;
    case ReduceOp::kBxor:
      return a ^ b;
  }
  return 0;
}

// The reduction over ranks of element `index` of every rank's input.
int64_t reduced(ReduceOp op, int nranks, size_t index) {
  int64_t value = inputValue(0, index);
  for (int r = 1; r < nranks; ++r) value = combine(op, value, inputValue(r, index));
  if (op == ReduceOp::kAvg) value /= nranks;  // int64 division truncates like the kernel
  return value;
}

struct Case {
  CollectiveKind kind;
  ReduceOp op;
};

// Builds every rank's schedule, simulates it and checks every rank's bytes.
// With `hosts`, the ranks are on several hosts (core/plan/layout.h).
void checkEveryRank(int nranks, CollectiveKind kind, size_t count, int nchannels, bool inPlace,
                    Algorithm algorithm, HostLayoutPtr hosts = nullptr, bool hostTree = false) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
    const int root = nranks > 2 ? 2 : 0;
    CollectiveArgs args;
    args.kind = kind;
    args.count = count;
    args.dtype = DataType::kInt64;
    args.op = op;
    args.root = root;
    std::vector<Schedule> schedules;
    for (int r = 0; r < nranks; ++r) {
      PlanParams params;
      params.rank = r;
      params.nranks = nranks;
      params.nchannels = nchannels;
      params.chunkBytes = 48;  // 6 elements: many rounds even for small counts
      params.algorithm = algorithm;
      params.hosts = hosts;
      params.hostTree = hostTree;
      Result<Schedule> schedule = buildSchedule(args, params);
      ASSERT_TRUE(schedule.isOk()) << schedule.status().toString();
      schedules.push_back(std::move(schedule).value());
    }
    const size_t inCount = inputBytes(args, nranks) / 8;
    const size_t outCount = outputBytes(args, nranks) / 8;
    std::vector<SimulatedRank> ranks(nranks);
    const int64_t sentinel = 0x5A5A5A5A5A5A5A5A;
    for (int r = 0; r < nranks; ++r) {
      std::vector<int64_t> input(inCount), output(outCount, sentinel);
      for (size_t i = 0; i < inCount; ++i) input[i] = inputValue(r, i);
      if (inPlace && kind != CollectiveKind::kReduceScatter) {
        // The input lives inside the output buffer.
        size_t offset = kind == CollectiveKind::kAllGather ? r * count : 0;
        for (size_t i = 0; i < inCount; ++i) output[offset + i] = input[i];
      }
      ranks[r].input.resize(inCount * 8);
      ranks[r].output.resize(outCount * 8);
      if (inCount) std::memcpy(ranks[r].input.data(), input.data(), inCount * 8);
      if (outCount) std::memcpy(ranks[r].output.data(), output.data(), outCount * 8);
    }
    SimulationStats stats;
    Status status = simulateSchedules(schedules, &ranks, inPlace, &stats);
    ASSERT_TRUE(status.isOk()) << status.toString();
    for (int r = 0; r < nranks; ++r) {
      std::vector<int64_t> out(outCount);
      if (inPlace && kind == CollectiveKind::kReduceScatter) {
        if (outCount) std::memcpy(out.data(), ranks[r].input.data() + r * count * 8, outCount * 8);
      } else if (outCount) {
        std::memcpy(out.data(), ranks[r].output.data(), outCount * 8);
      }
      for (size_t i = 0; i < outCount; ++i) {
        int64_t expected;
        switch (kind) {
          case CollectiveKind::kAllReduce:
            expected = reduced(op, nranks, i);
            break;
          case CollectiveKind::kReduceScatter:
            expected = reduced(op, nranks, r * count + i);
            break;
          case CollectiveKind::kAllGather:
            expected = inputValue(i / count, i % count);
            break;
          case CollectiveKind::kBroadcast:
            expected = inputValue(root, i);
            break;
          case CollectiveKind::kReduce:
            expected = r == root ? reduced(op, nranks, i) : (inPlace ? inputValue(r, i) : sentinel);
            break;
          default:
            FAIL();
        }
        ASSERT_EQ(out[i], expected)
            << "rank " << r << " element " << i << " op " << reduceOpName(op);
      }
    }
    if (kind == CollectiveKind::kAllGather || kind == CollectiveKind::kBroadcast) break;
  }
}

class ScheduleTest
    : public ::testing::TestWithParam<std::tuple<int, CollectiveKind, size_t, int, bool>> {};

TEST_P(ScheduleTest, EveryRankGetsTheExactResult) {
  auto [nranks, kind, count, nchannels, inPlace] = GetParam();
  checkEveryRank(nranks, kind, count, nchannels, inPlace, Algorithm::kAuto);
}

class TreeScheduleTest
    : public ::testing::TestWithParam<std::tuple<int, CollectiveKind, size_t, int, bool>> {};

TEST_P(TreeScheduleTest, EveryRankGetsTheExactResult) {
  auto [nranks, kind, count, nchannels, inPlace] = GetParam();
  checkEveryRank(nranks, kind, count, nchannels, inPlace, Algorithm::kTree);
}

INSTANTIATE_TEST_SUITE_P(
    Tree, TreeScheduleTest,
    ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 16, 17, 31, 64),
                       ::testing::Values(CollectiveKind::kAllReduce, CollectiveKind::kBroadcast,
                                         CollectiveKind::kReduce),
                       ::testing::Values(0, 1, 7, 100, 1023), ::testing::Values(1, 3),
                       ::testing::Bool()));

INSTANTIATE_TEST_SUITE_P(
    Collectives, ScheduleTest,
    ::testing::Combine(::testing::Range(1, 17),
                       ::testing::Values(CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                                         CollectiveKind::kAllGather, CollectiveKind::kBroadcast,
                                         CollectiveKind::kReduce),
                       ::testing::Values(0, 1, 7, 100, 1023), ::testing::Values(1, 3),
                       ::testing::Bool()));

TEST(ScheduleTest, PointToPointAndBarrierMatchUp) {
  for (int nranks : {2, 3, 5, 8, 16}) {
    std::vector<Schedule> schedules;
    for (int r = 0; r < nranks; ++r) {
      PlanParams params;
      params.rank = r;
      params.nranks = nranks;
      CollectiveArgs args;
      args.kind = CollectiveKind::kBarrier;
      schedules.push_back(*buildSchedule(args, params));
    }
    std::vector<SimulatedRank> ranks(nranks);
    Status status = simulateSchedules(schedules, &ranks, false, nullptr);
    EXPECT_TRUE(status.isOk()) << status.toString();
  }
  std::vector<Schedule> schedules;
  for (int r = 0; r < 2; ++r) {
    PlanParams params;
    params.rank = r;
    params.nranks = 2;
    params.nchannels = 2;
    CollectiveArgs args;
    args.kind = r == 0 ? CollectiveKind::kSend : CollectiveKind::kRecv;
    args.count = 1001;
    args.dtype = DataType::kUint8;
    args.peer = 1 - r;
    schedules.push_back(*buildSchedule(args, params));
  }
  std::vector<SimulatedRank> ranks(2);
  ranks[0].input.assign(1001, 0);
  std::iota(ranks[0].input.begin(), ranks[0].input.end(), 0);
  ranks[1].output.assign(1001, 0);
  ASSERT_TRUE(simulateSchedules(schedules, &ranks, false, nullptr).isOk());
  EXPECT_EQ(ranks[1].output, ranks[0].input);
}

TEST(ScheduleTest, RejectsBadArguments) {
  PlanParams params;
  params.nranks = 4;
  params.rank = 4;
  CollectiveArgs args;
  EXPECT_EQ(buildSchedule(args, params).status().code(), StatusCode::kInvalidArgument);
  params.rank = 0;
  args.kind = CollectiveKind::kBroadcast;
  args.root = 4;
  Status status = buildSchedule(args, params).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("root 4"), std::string::npos) << status.message();
  // A send's peer is `peer`, not `root`: a valid root does not make it valid, and the
  // message names the peer.
  args.kind = CollectiveKind::kSend;
  args.root = 1;
  args.peer = 0;  // this rank
  status = buildSchedule(args, params).status();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("peer 0"), std::string::npos) << status.message();
  args.peer = -1;  // unset
  EXPECT_EQ(buildSchedule(args, params).status().code(), StatusCode::kInvalidArgument);
  args.peer = 2;
  EXPECT_TRUE(buildSchedule(args, params).isOk());
}

TEST(ScheduleTest, RingAllReduceTakesTwoNMinusTwoStepsPerRound) {
  PlanParams params;
  params.nranks = 5;
  params.rank = 3;
  params.chunkBytes = 1 << 20;
  CollectiveArgs args;
  args.count = 1000;
  args.dtype = DataType::kFloat32;
  Schedule schedule = *buildSchedule(args, params);
  // One Send, n - 1 receive-reduce steps, n - 1 all-gather receives.
  EXPECT_EQ(schedule.stepCount(), 1u + 4u + 4u);
  EXPECT_NE(scheduleToJson(schedule).find("RecvReduceSend"), std::string::npos);
}

// The ring's fold order (core/plan/fold_order.h) read back from its steps: the one Send
// of a round's reduce-scatter on each rank carries the segment that rank starts. Every
// element lies in exactly one, and ringFoldRun() names that rank and where the segment
// ends, across channels, rounds, uneven segments and segments emptier than the ranks.
TEST(ScheduleTest, RingFoldRunsAreTheSegmentsEachRankStarts) {
  for (int n : {2, 3, 4, 5}) {
    for (int channels : {1, 2, 3}) {
      for (size_t chunkElems : {size_t{1}, size_t{3}, size_t{64}}) {
        for (size_t count : {size_t{1}, size_t{7}, size_t{100}, size_t{1001}}) {
          SCOPED_TRACE(std::to_string(n) + " ranks, " + std::to_string(channels) +
                       " channels, chunk " + std::to_string(chunkElems) + ", count " +
                       std::to_string(count));
          std::vector<int> starter(count, -1);
          std::vector<size_t> segmentEnd(count, 0);
          FoldOrder fold;
          for (int r = 0; r < n; ++r) {
            PlanParams params;
            params.nranks = n;
            params.rank = r;
            params.nchannels = channels;
            params.chunkBytes = chunkElems * 4;
            params.algorithm = Algorithm::kRing;
            CollectiveArgs args;
            args.count = count;
            args.dtype = DataType::kFloat32;
            Schedule schedule = *buildSchedule(args, params);
            fold = schedule.fold;
            for (const std::vector<Step>& steps : schedule.channels) {
              for (const Step& step : steps) {
                if (step.kind != StepKind::kSend) continue;
                const size_t begin = step.src.offset / 4;
                for (size_t e = begin; e < begin + step.bytes / 4; ++e) {
                  EXPECT_EQ(starter[e], -1) << "element " << e << " started twice";
                  starter[e] = r;
                  segmentEnd[e] = begin + step.bytes / 4;
                }
              }
            }
          }
          ASSERT_TRUE(fold.isRing());
          ASSERT_EQ(fold.ringChunkElems, chunkElems);
          ASSERT_EQ(fold.ringChannels, channels);
          for (size_t e = 0; e < count; ++e) {
            const FoldRun run = ringFoldRun(fold, count, n, e);
            ASSERT_EQ(run.first, starter[e]) << "element " << e;
            ASSERT_EQ(run.end, segmentEnd[e]) << "element " << e;
          }
        }
      }
    }
  }
}

// Behind a team step the ring's order is the schedule's; a tree's, and a ring planned in
// host order (several hosts), are not described: rank order for the team.
TEST(ScheduleTest, ARingBehindATeamStepGivesItsFoldOrder) {
  PlanParams params;
  params.nranks = 4;
  params.rank = 1;
  params.nchannels = 2;
  params.chunkBytes = 1 << 16;
  params.teamStep = true;
  params.team = teamBit(Algorithm::kCma);
  CollectiveArgs args;
  args.count = 1 << 20;
  args.dtype = DataType::kFloat32;
  params.algorithm = Algorithm::kRing;
  Schedule ring = *buildSchedule(args, params);
  EXPECT_EQ(ring.fallback, Algorithm::kRing);
  EXPECT_TRUE(ring.fold.isRing());
  EXPECT_EQ(ring.fold.ringChunkElems, size_t{1} << 14);
  EXPECT_EQ(ring.fold.ringChannels, 2);
  params.algorithm = Algorithm::kTree;
  EXPECT_FALSE(buildSchedule(args, params)->fold.isRing());
  params.algorithm = Algorithm::kRing;
  params.teamStep = false;
  params.hosts = std::make_shared<const HostLayout>(HostLayout::make({0, 1, 0, 1}));
  EXPECT_FALSE(buildSchedule(args, params)->fold.isRing());
}

// Ranks on several hosts (core/plan/layout.h): `nhosts` hosts of `perHost` ranks,
// numbered host after host (block) or round robin (cyclic); perHost 0: uneven (rank r
// on host r % nhosts of r * r % 3 + ...), for the orders that need no uniform hosts.
HostLayoutPtr hostsOf(int nhosts, int perHost, bool cyclic) {
  std::vector<int> hostOfRank;
  const int n = nhosts * perHost;
  for (int r = 0; r < n; ++r) hostOfRank.push_back(cyclic ? r % nhosts : r / perHost);
  return std::make_shared<const HostLayout>(HostLayout::make(hostOfRank));
}

// Bytes each host sends to other hosts, and the directed rank pairs that carry them.
struct CrossHost {
  std::vector<uint64_t> bytesOfHost;
  std::set<std::pair<int, int>> links;
};

CrossHost crossHost(const std::vector<Schedule>& schedules, const HostLayout& hosts) {
  CrossHost out;
  out.bytesOfHost.assign(hosts.nhosts, 0);
  for (const Schedule& schedule : schedules) {
    for (const auto& steps : schedule.channels) {
      for (const Step& step : steps) {
        if (step.sendPeer < 0 || hosts.hostOf[step.sendPeer] == hosts.hostOf[schedule.rank]) {
          continue;
        }
        out.bytesOfHost[hosts.hostOf[schedule.rank]] += step.bytes;
        out.links.emplace(schedule.rank, step.sendPeer);
      }
    }
  }
  return out;
}

std::vector<Schedule> schedulesOf(const CollectiveArgs& args, int nranks, Algorithm algorithm,
                                  HostLayoutPtr hosts) {
  std::vector<Schedule> schedules;
  for (int r = 0; r < nranks; ++r) {
    PlanParams params;
    params.rank = r;
    params.nranks = nranks;
    params.chunkBytes = 48;
    params.algorithm = algorithm;
    params.hosts = hosts;
    schedules.push_back(*buildSchedule(args, params));
  }
  return schedules;
}

class HostOrderTest
    : public ::testing::TestWithParam<std::tuple<std::pair<int, int>, bool, CollectiveKind>> {};

// Every collective, in rank order and host order (block and cyclic numbering) and
// hierarchical, its inter-host stage a ring or chain and a tree: exact results on every
// rank.
TEST_P(HostOrderTest, EveryRankGetsTheExactResult) {
  auto [shape, cyclic, kind] = GetParam();
  auto [nhosts, perHost] = shape;
  const HostLayoutPtr hosts = hostsOf(nhosts, perHost, cyclic);
  std::vector<std::pair<Algorithm, bool>> algorithms = {{Algorithm::kAuto, false}};
  if (kind != CollectiveKind::kReduceScatter && kind != CollectiveKind::kAllGather) {
    algorithms.push_back({Algorithm::kTree, false});
  }
  if (perHost > 1) {
    algorithms.push_back({Algorithm::kHier, false});
    algorithms.push_back({Algorithm::kHier, true});
  }
  for (auto [algorithm, hostTree] : algorithms) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{100}}) {
      for (bool inPlace : {false, true}) {
        SCOPED_TRACE(std::string(algorithmName(algorithm)) + (hostTree ? "+tree" : "") + " count " +
                     std::to_string(count) + (inPlace ? " in place" : ""));
        checkEveryRank(nhosts * perHost, kind, count, 3, inPlace, algorithm, hosts, hostTree);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Hosts, HostOrderTest,
    ::testing::Combine(::testing::Values(std::make_pair(2, 2), std::make_pair(3, 2),
                                         std::make_pair(2, 3), std::make_pair(4, 2),
                                         std::make_pair(5, 3), std::make_pair(3, 1)),
                       ::testing::Bool(),
                       ::testing::Values(CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                                         CollectiveKind::kAllGather, CollectiveKind::kBroadcast,
                                         CollectiveKind::kReduce)));

// In cyclic numbering a ring in rank order crosses between hosts at every edge; in host
// order only once per host, as in block numbering.
TEST(HostOrderTest, RingCrossesBetweenHostsOncePerHost) {
  CollectiveArgs args;
  args.count = 6 * 8 * 4;
  args.dtype = DataType::kInt64;
  const HostLayoutPtr cyclic = hostsOf(4, 2, true);
  EXPECT_EQ(crossHost(schedulesOf(args, 8, Algorithm::kRing, nullptr), *cyclic).links.size(), 8u);
  const CrossHost ordered = crossHost(schedulesOf(args, 8, Algorithm::kRing, cyclic), *cyclic);
  EXPECT_EQ(ordered.links.size(), 4u);
  for (const auto& [from, to] : ordered.links) {
    EXPECT_EQ(cyclic->hostOf[to], (cyclic->hostOf[from] + 1) % 4) << from << "->" << to;
  }
}

// Hierarchical all-reduce: each host sends 2 (M - 1) / M of the data to other hosts (a
// flat ring sends 2 (N - 1) / N), and only between ranks of equal local rank.
TEST(HostOrderTest, HierSendsTwoMMinusOneOverMBetweenHosts) {
  for (bool cyclic : {false, true}) {
    for (const std::pair<int, int>& shape :
         {std::make_pair(2, 2), std::make_pair(4, 2), std::make_pair(3, 3)}) {
      // Named, not bound: lambdas capture structured bindings only from clang 16 on.
      const int nhosts = shape.first;
      const int perHost = shape.second;
      const int n = nhosts * perHost;
      CollectiveArgs args;
      args.count = 6 * n * 5;  // five whole rounds of 6-element pieces
      args.dtype = DataType::kInt64;
      const HostLayoutPtr hosts = hostsOf(nhosts, perHost, cyclic);
      const CrossHost hier = crossHost(schedulesOf(args, n, Algorithm::kHier, hosts), *hosts);
      const uint64_t bytes = args.count * 8;
      for (int h = 0; h < nhosts; ++h) {
        EXPECT_EQ(hier.bytesOfHost[h], 2 * (nhosts - 1) * bytes / nhosts) << "host " << h;
      }
      for (const auto& [from, to] : hier.links) {
        const auto local = [&](int r) { return hosts->position[r] % perHost; };
        EXPECT_EQ(local(from), local(to)) << from << "->" << to;
      }
      const CrossHost ring = crossHost(schedulesOf(args, n, Algorithm::kRing, hosts), *hosts);
      EXPECT_EQ(ring.bytesOfHost[0], 2 * (n - 1) * bytes / n);
    }
  }
}

TEST(HostOrderTest, HierNeedsHostsOfEqualSize) {
  CollectiveArgs args;
  args.count = 10;
  PlanParams params;
  params.nranks = 5;
  params.algorithm = Algorithm::kHier;
  params.hosts = std::make_shared<const HostLayout>(HostLayout::make({0, 0, 0, 1, 1}));
  Status status = buildSchedule(args, params).status();
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("uneven"), std::string::npos) << status.message();
  params.hosts = nullptr;
  status = buildSchedule(args, params).status();
  EXPECT_NE(status.message().find("1 host"), std::string::npos) << status.message();
  args.kind = CollectiveKind::kBroadcast;
  status = buildSchedule(args, params).status();
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("hier broadcast needs ranks on several hosts"), std::string::npos)
      << status.message();
  params.hosts = hostsOf(2, 2, false);
  params.nranks = 4;
  for (CollectiveKind kind : {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
                              CollectiveKind::kBroadcast, CollectiveKind::kReduce}) {
    args.kind = kind;
    Result<Schedule> schedule = buildSchedule(args, params);
    ASSERT_TRUE(schedule.isOk()) << schedule.status().toString();
    EXPECT_EQ(schedule->algorithm, Algorithm::kHier);
  }
}

// The other hierarchical collectives carry the least a host's link can: all-gather and
// reduce-scatter (M - 1) / M of the full vector out of every host, only between ranks of
// equal local rank; broadcast and reduce with a chain between hosts the buffer once
// (into each host but the root's, out of each but the last), with a tree at most twice.
TEST(HostOrderTest, HierCollectivesCarryTheLeastBetweenHosts) {
  for (bool cyclic : {false, true}) {
    for (const std::pair<int, int>& shape :
         {std::make_pair(2, 2), std::make_pair(4, 2), std::make_pair(3, 3)}) {
      // Named, not bound: lambdas capture structured bindings only from clang 16 on.
      const int nhosts = shape.first;
      const int perHost = shape.second;
      const int n = nhosts * perHost;
      const HostLayoutPtr hosts = hostsOf(nhosts, perHost, cyclic);
      CollectiveArgs args;
      args.count = 6 * 7;  // several rounds of 6-element chunks
      args.dtype = DataType::kInt64;
      args.root = n - 1;
      const uint64_t bytes = args.count * 8;
      for (CollectiveKind kind : {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter}) {
        args.kind = kind;
        const CrossHost hier = crossHost(schedulesOf(args, n, Algorithm::kHier, hosts), *hosts);
        for (int h = 0; h < nhosts; ++h) {
          EXPECT_EQ(hier.bytesOfHost[h], (nhosts - 1) * bytes * n / nhosts)
              << collectiveName(kind) << " host " << h;
        }
        for (const auto& [from, to] : hier.links) {
          EXPECT_EQ(hosts->position[from] % perHost, hosts->position[to] % perHost);
        }
      }
      for (CollectiveKind kind : {CollectiveKind::kBroadcast, CollectiveKind::kReduce}) {
        args.kind = kind;
        const CrossHost hier = crossHost(schedulesOf(args, n, Algorithm::kHier, hosts), *hosts);
        uint64_t total = 0;
        for (int h = 0; h < nhosts; ++h) {
          EXPECT_LE(hier.bytesOfHost[h], bytes) << collectiveName(kind) << " host " << h;
          total += hier.bytesOfHost[h];
        }
        // Barrier messages aside (a root agreement: 0-byte steps), M - 1 buffers cross.
        EXPECT_EQ(total, (nhosts - 1) * bytes) << collectiveName(kind);
      }
    }
  }
}

}  // namespace
}  // namespace collie
