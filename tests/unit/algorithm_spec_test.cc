// The algorithm registry (core/plan/algorithm_spec.h): the built-in specs, the registry's
// refusals, and a toy algorithm declared in this file only, which the tuner chooses, the
// planner plans and the simulator runs without any other source naming it.
#include "core/plan/algorithm_spec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/plan/partition.h"
#include "core/sim/simulator.h"
#include "core/tune/tuner.h"

namespace collie {
namespace {

// A toy all-gather: every rank sends its block straight to every other rank, on one
// channel, all sends first (the simulator's FIFOs are unbounded), then the receives.
constexpr Algorithm kToy = static_cast<Algorithm>(200);

class ToyDirectAllGather final : public AlgorithmSpec {
 public:
  ToyDirectAllGather()
      : AlgorithmSpec(
            {.id = kToy, .name = "toy-direct", .kinds = kindsOf({CollectiveKind::kAllGather})}) {}
  size_t bytesPerChannel(CollectiveKind kind, size_t chunkBytes) const override {
    (void)kind, (void)chunkBytes;
    return 0;  // one channel
  }
  // One latency and the blocks over n - 1 links at once: cheaper than the ring's n - 1
  // rounds by far on small sizes.
  double predict(const CostQuery& q, bool* hostTree) const override {
    (void)hostTree;
    return q.pacing().alphaUs + static_cast<double>(q.bytes) / bytesPerUs(q.pacing());
  }
  Status plan(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
              Schedule* schedule) const override {
    (void)chunkElems;
    const int n = params.nranks;
    const int r = params.rank;
    const uint64_t block = args.count * dataTypeSize(args.dtype);
    auto& steps = schedule->channels[0];
    steps.push_back(makeStep(StepKind::kCopy, -1, -1, Slice{BufferId::kInput, 0},
                             Slice{BufferId::kOutput, r * block}, block));
    for (int s = 1; s < n; ++s) {
      steps.push_back(
          makeStep(StepKind::kSend, mod(r + s, n), -1, Slice{BufferId::kInput, 0}, Slice{}, block));
    }
    for (int s = 1; s < n; ++s) {
      const int owner = mod(r - s, n);
      steps.push_back(makeStep(StepKind::kRecv, -1, owner, Slice{},
                               Slice{BufferId::kOutput, owner * block}, block));
    }
    return Status();
  }
};

TEST(AlgorithmRegistry, TheBuiltInSpecsCarryTheirPublicNamesAndEachKindHasOneRobustDefault) {
  // Every Algorithm value has its spec, team algorithms marked as such.
  const AlgorithmRegistry& registry = AlgorithmRegistry::instance();
  std::set<std::string> names;
  for (const AlgorithmSpec* spec : registry.all()) {
    if (spec->id() == kToy) continue;
    EXPECT_EQ(std::string(spec->name()), std::string(algorithmName(spec->id())));
    EXPECT_EQ(parseAlgorithm(spec->name()), spec->id()) << spec->name();
    names.insert(spec->name());
  }
  EXPECT_EQ(names, (std::set<std::string>{"ring", "tree", "chain", "oneshot", "hier", "pairwise",
                                          "linear", "board", "direct", "cma"}));
  for (Algorithm algo : kAllAlgorithms) {
    if (algo == Algorithm::kAuto) continue;
    ASSERT_NE(registry.find(algo), nullptr) << algorithmName(algo);
    EXPECT_EQ(registry.find(algo)->isTeam(), isTeamAlgorithm(algo)) << algorithmName(algo);
  }
  for (CollectiveKind kind :
       {CollectiveKind::kAllReduce, CollectiveKind::kBroadcast, CollectiveKind::kReduce,
        CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllToAll,
        CollectiveKind::kAllToAllV, CollectiveKind::kGather, CollectiveKind::kScatter,
        CollectiveKind::kAllGatherV, CollectiveKind::kReduceScatterV}) {
    int defaults = 0;
    for (const AlgorithmSpec* spec : registry.all()) defaults += spec->robustDefaultFor(kind);
    EXPECT_EQ(defaults, 1) << collectiveName(kind);
    EXPECT_TRUE(registry.robustDefault(kind).implements(kind)) << collectiveName(kind);
  }
  EXPECT_EQ(registry.robustDefault(CollectiveKind::kBarrier).id(), Algorithm::kRing);
}

// What a spec implements is data: the kinds its identity lists, nothing else (a value
// past the last kind included), and the same set a predicate gives.
TEST(AlgorithmIdentity, ImplementsExactlyTheKindsItLists) {
  constexpr CollectiveKinds listed =
      kindsOf({CollectiveKind::kAllReduce, CollectiveKind::kBroadcast, CollectiveKind::kReduce});
  static_assert(listed == kindsWhere([](CollectiveKind kind) {
                  return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kBroadcast ||
                         kind == CollectiveKind::kReduce;
                }));
  const AlgorithmSpec& tree = *AlgorithmRegistry::instance().find(Algorithm::kTree);
  for (unsigned k = 0; k < 64; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    EXPECT_EQ(tree.implements(kind), k < 32 && (listed >> k & 1) != 0) << k;
  }
  EXPECT_EQ(kindsWhere(isExchange),
            kindsOf({CollectiveKind::kAllToAll, CollectiveKind::kGather, CollectiveKind::kScatter,
                     CollectiveKind::kAllToAllV}));
}

TEST(AlgorithmRegistry, RefusesARepeatedIdOrNameAndTheIdsOfAutoAndTheTeam) {
  class Named final : public AlgorithmSpec {
   public:
    Named(Algorithm id, const char* name) : AlgorithmSpec({.id = id, .name = name}) {}
    double predict(const CostQuery&, bool*) const override { return 0; }
    Status plan(const CollectiveArgs&, const PlanParams&, size_t, Schedule*) const override {
      return Status();
    }
  };
  AlgorithmRegistry& registry = AlgorithmRegistry::instance();
  const size_t before = registry.all().size();
  EXPECT_FALSE(registry.add(std::make_unique<Named>(Algorithm::kRing, "ring2")).isOk());
  EXPECT_FALSE(registry.add(std::make_unique<Named>(static_cast<Algorithm>(201), "tree")).isOk());
  EXPECT_FALSE(registry.add(std::make_unique<Named>(Algorithm::kAuto, "auto2")).isOk());
  EXPECT_FALSE(registry.add(std::make_unique<Named>(Algorithm::kBoard, "board2")).isOk());
  EXPECT_EQ(registry.all().size(), before);
}

// The toy, registered here and nowhere else, is weighed by the tuner for the kind it
// implements, chosen where the model says it is cheaper, planned by buildSchedule, and
// runs in the simulator with every rank's output exact; other kinds never see it.
TEST(AlgorithmRegistry, AToyAlgorithmInATestFileIsChosenPlannedAndSimulated) {
  ASSERT_TRUE(AlgorithmRegistry::instance().add(std::make_unique<ToyDirectAllGather>()).isOk());
  TuneConstants constants;
  constants.alphaUs = 10;
  constants.bwGBps = 5;
  const int n = 4;
  const size_t count = 1000;  // uint32 elements per rank
  const TuneDecision decision =
      decide(CollectiveKind::kAllGather, count * 4, n, TuneLimits{}, constants);
  ASSERT_EQ(decision.algorithm, kToy) << decisionText(decision);
  EXPECT_EQ(decision.nchannels, 1);
  EXPECT_NE(decisionText(decision).find("toy-direct"), std::string::npos);
  EXPECT_TRUE(algorithmSupports(kToy, CollectiveKind::kAllGather));
  EXPECT_FALSE(algorithmSupports(kToy, CollectiveKind::kAllReduce));
  // Other kinds never see it.
  EXPECT_EQ(decide(CollectiveKind::kAllReduce, count * 4, n, TuneLimits{}, constants).algorithm,
            Algorithm::kRing);
  // Forced, it runs alone; forced for a kind it lacks, the tuner's choice runs.
  TuneLimits forced;
  forced.forced = kToy;
  EXPECT_EQ(decide(CollectiveKind::kAllGather, 64 << 20, n, forced, constants).algorithm, kToy);
  EXPECT_EQ(decide(CollectiveKind::kBroadcast, 4096, n, forced, constants).algorithm,
            decide(CollectiveKind::kBroadcast, 4096, n, TuneLimits{}, constants).algorithm);

  CollectiveArgs args;
  args.kind = CollectiveKind::kAllGather;
  args.dtype = DataType::kUint32;
  args.count = count;
  PlanParams params;
  params.nranks = n;
  params.nchannels = decision.nchannels;
  params.chunkBytes = decision.chunkBytes;
  params.algorithm = decision.steps;
  std::vector<Schedule> schedules;
  for (int r = 0; r < n; ++r) {
    params.rank = r;
    Result<Schedule> schedule = buildSchedule(args, params);
    ASSERT_TRUE(schedule.isOk()) << schedule.status().toString();
    EXPECT_EQ(schedule->algorithm, kToy);
    schedules.push_back(std::move(schedule).value());
  }
  std::vector<SimulatedRank> ranks(n);
  for (int r = 0; r < n; ++r) {
    std::vector<uint32_t> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<uint32_t>(r * 1000003 + i);
    ranks[r].input.resize(count * 4);
    std::memcpy(ranks[r].input.data(), in.data(), count * 4);
    ranks[r].output.assign(n * count * 4, 0x5a);
  }
  SimulationStats stats;
  Status status = simulateSchedules(schedules, &ranks, false, &stats);
  ASSERT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(stats.messages, static_cast<uint64_t>(n * (n - 1)));
  for (int r = 0; r < n; ++r) {
    for (int owner = 0; owner < n; ++owner) {
      EXPECT_EQ(std::memcmp(ranks[r].output.data() + owner * count * 4, ranks[owner].input.data(),
                            count * 4),
                0)
          << "rank " << r << " block " << owner;
    }
  }
  // The lazy path the engine and `collie sim` take plans it too.
  params.rank = 0;
  SimulationStats lazy;
  EXPECT_TRUE(simulateCollective(args, params, nullptr, false, &lazy).isOk());
  EXPECT_EQ(lazy.messages, static_cast<uint64_t>(n * (n - 1)));
}

}  // namespace
}  // namespace collie
