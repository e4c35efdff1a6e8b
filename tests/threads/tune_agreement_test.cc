// Every rank must plan a collective alike, or some wait for messages that never come.
// Ranks as threads over shm: with a fresh probe (no cache) all ranks run rank 0's plan
// for every size, and a rank configured with other limits fails creation, naming them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/engine/tune_probe.h"
#include "core/transport/transport.h"
#include "support/rank_threads.h"
#include "support/reference.h"

namespace collie {
namespace {

using namespace std::chrono_literals;

// (kind, bytes, algorithm) of every all-reduce in a rank's flight recorder.
std::vector<std::string> plans(const Communicator& comm) {
  std::vector<std::string> out;
  auto doc = nlohmann::json::parse(comm.dumpFlightRecorder());
  for (const auto& item : doc["collectives"]) {
    if (item["kind"] != "allreduce") continue;  // ranks 0 and 1 also logged the probe
    out.push_back(item["kind"].get<std::string>() + " " +
                  std::to_string(item["bytes"].get<size_t>()) + " " +
                  item["algorithm"].get<std::string>());
  }
  return out;
}

// Eight ranks: tree for small all-reduces, ring (for most constants) for large ones, so
// ranks that tuned with different constants would disagree somewhere in between.
TEST(TuneAgreement, EveryRankRunsRankZerosPlan) {
  constexpr int kRanks = 8;
  Options options;
  options.transport = "shm";
  options.timeout = 60s;
  options.config = {{"COLLIE_TUNE_CACHE", "off"},      // every creation probes
                    {"COLLIE_SHM_ONESHOT_MAX", "0"}};  // the engine's plans, not the board
  auto comms = testing::makeCommunicators(kRanks, options);
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  const std::vector<size_t> counts = {2, 64, 4096, 65536, 262144, 1 << 20};
  std::vector<std::string> failures(kRanks);
  testing::onEveryRank(kRanks, [&](int r) {
    for (size_t count : counts) {
      std::vector<uint8_t> in = testing::makeInput(DataType::kInt32, ReduceOp::kSum, r, count);
      std::vector<uint8_t> out(in.size());
      Result<Work> work =
          comms[r]->allReduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum);
      Status status = work.isOk() ? work->wait(60s) : work.status();
      if (!status.isOk()) {
        failures[r] = status.toString();
        return;
      }
      if (out != testing::expectedReduction(DataType::kInt32, ReduceOp::kSum, kRanks, 0, count)) {
        failures[r] = "wrong result at count " + std::to_string(count);
        return;
      }
    }
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
  const std::vector<std::string> reference = plans(*comms[0]);
  ASSERT_GE(reference.size(), counts.size());
  for (int r = 1; r < kRanks; ++r) EXPECT_EQ(plans(*comms[r]), reference) << "rank " << r;
  // Within the clamped constants, 8 bytes on 8 ranks always runs on the tree.
  bool sawTree = false;
  for (const std::string& plan : reference) sawTree = sawTree || plan == "allreduce 8 tree";
  EXPECT_TRUE(sawTree);
}

// A rank that would plan differently fails creation on every rank, at the first
// exchange (core/comm/join_agreement.h), naming the field and both values.
TEST(TuneAgreement, RankWithOtherLimitsFailsEveryRank) {
  constexpr int kRanks = 4;
  testing::CreatedRanks created = testing::createCommunicators(kRanks, [](int r) {
    Options options;
    options.transport = "shm";
    options.timeout = 20s;
    options.config["COLLIE_TUNE_CACHE"] = "off";
    if (r == 2) options.algorithm = Algorithm::kRing;
    return options;
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_FALSE(created.errors[r].isOk()) << "rank " << r << " was created";
    EXPECT_NE(created.errors[r].message().find("algorithm (COLLIE_ALGO)"), std::string::npos)
        << created.errors[r].toString();
  }
  const Status& failed = created.errors[2];
  EXPECT_EQ(failed.code(), StatusCode::kMismatch) << failed.toString();
  EXPECT_NE(failed.message().find("algorithm (COLLIE_ALGO): this rank ring, rank "),
            std::string::npos)
      << failed.message();
  EXPECT_NE(failed.message().find(" auto"), std::string::npos) << failed.message();
}

// Hier's inter-host stage changes the schedule's peers: ranks must agree on it too.
TEST(TuneAgreement, RankWithOtherHierStageFailsEveryRank) {
  constexpr int kRanks = 3;
  testing::CreatedRanks created = testing::createCommunicators(kRanks, [](int r) {
    Options options;
    options.transport = "shm";
    options.timeout = 20s;
    options.config["COLLIE_TUNE_CACHE"] = "off";
    if (r == 1) options.config["COLLIE_HIER_HOSTS"] = "tree";
    return options;
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_FALSE(created.errors[r].isOk()) << "rank " << r << " was created";
    EXPECT_NE(created.errors[r].message().find("COLLIE_HIER_HOSTS"), std::string::npos)
        << created.errors[r].toString();
  }
  EXPECT_NE(created.errors[1].message().find("COLLIE_HIER_HOSTS"), std::string::npos)
      << created.errors[1].message();
}

// A transport that serves no peer and only reports how many channels pay on its wire.
class ChannelCapTransport final : public Transport {
 public:
  explicit ChannelCapTransport(int useful) : useful_(useful) {}
  const char* name() const override { return "channel-cap"; }
  TransportCaps caps() const override {
    TransportCaps caps;
    caps.usefulChannels = useful_;
    return caps;
  }
  bool canConnect(int, const std::string&) const override { return false; }
  Result<std::vector<std::unique_ptr<Connection>>> connect(const std::vector<int>&) override {
    return unsupported("serves no peer");
  }
  void waitForActivity(std::chrono::microseconds) override {}

 private:
  int useful_;
};

// Each rank's engine with the given per-transport channel limits; the channel count
// every rank plans with after agreeOnPlanChannels().
std::vector<int> agreedChannels(const std::vector<std::vector<int>>& usefulPerRank,
                                bool channelsFixed) {
  const int nranks = static_cast<int>(usefulPerRank.size());
  std::shared_ptr<Store> store = makeInMemoryStore();
  std::vector<int> agreed(nranks, -1);
  testing::onEveryRank(nranks, [&](int r) {
    EngineConfig config;
    config.rank = r;
    config.nranks = nranks;
    config.nchannels = 4;
    config.channelsFixed = channelsFixed;
    TransportSet set;
    for (int useful : usefulPerRank[r]) {
      set.transports.push_back(std::make_unique<ChannelCapTransport>(useful));
    }
    Engine engine(config, std::move(set), nullptr);
    Result<int> channels = agreeOnPlanChannels(engine, *store, "channels-job", Clock::now() + 20s);
    agreed[r] = channels.isOk() ? *channels : -100;
  });
  return agreed;
}

TEST(TuneAgreement, EveryRankPlansWithRankZerosUsefulChannels) {
  // Rank 0's transports limit it to 1; rank 1's own would allow 2, rank 2's all 4.
  EXPECT_EQ(agreedChannels({{0, 1}, {2}, {}}, false), (std::vector<int>{1, 1, 1}));
  // Rank 0 has no limit (its least nonzero limit rules; 0 means none): all 4 channels,
  // even on rank 1 whose transport would have said 1.
  EXPECT_EQ(agreedChannels({{0}, {1}, {3, 0}}, false), (std::vector<int>{4, 4, 4}));
  // A limit above the configured count is no limit.
  EXPECT_EQ(agreedChannels({{8}, {8}}, false), (std::vector<int>{4, 4}));
  // COLLIE_NCHANNELS (channelsFixed) wins over every transport.
  EXPECT_EQ(agreedChannels({{1}, {1}}, true), (std::vector<int>{4, 4}));
}

// Ranks that count different CPUs (one pinned to a single CPU, or a COLLIE_CPUS quota)
// hold different wait policies, but must still plan alike: whether the host's ranks
// outnumber its cores moves shm's board-versus-single-copy crossover, which the board
// agrees on when it connects (the largest crossover wins). A mixed communicator plans
// on every rank what a communicator whose ranks all count one CPU plans.
std::vector<std::string> plansWithCpus(const std::function<const char*(int)>& cpusOf) {
  constexpr int kRanks = 2;
  auto comms = testing::makeCommunicators(kRanks, Options{}, [&](int r, Options* options) {
    options->transport = "shm";
    options->timeout = 30s;
    options->config = {
        {"COLLIE_TUNE_CACHE", "off"}, {"COLLIE_CPUS", cpusOf(r)}, {"COLLIE_SHM_CMA_MIN", "64K"}};
  });
  if (comms.size() != static_cast<size_t>(kRanks)) return {"creation failed"};
  // 128 KiB per rank: between COLLIE_SHM_CMA_MIN (64 KiB) and the board's 2 MiB slot.
  const std::vector<size_t> counts = {2, 4096, 32768};
  std::vector<std::string> failures(kRanks);
  testing::onEveryRank(kRanks, [&](int r) {
    for (size_t count : counts) {
      std::vector<uint8_t> in = testing::makeInput(DataType::kInt32, ReduceOp::kSum, r, count);
      std::vector<uint8_t> out(in.size());
      Result<Work> work =
          comms[r]->allReduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum);
      Status status = work.isOk() ? work->wait(30s) : work.status();
      if (!status.isOk()) failures[r] = status.toString();
      if (out != testing::expectedReduction(DataType::kInt32, ReduceOp::kSum, kRanks, 0, count)) {
        failures[r] += " wrong result at count " + std::to_string(count);
      }
    }
  });
  std::vector<std::string> out;
  for (int r = 0; r < kRanks; ++r) {
    if (!failures[r].empty()) out.push_back("rank " + std::to_string(r) + ": " + failures[r]);
  }
  if (!out.empty()) return out;
  const std::vector<std::string> reference = plans(*comms[0]);
  for (int r = 1; r < kRanks; ++r) {
    if (plans(*comms[r]) != reference) return {"rank " + std::to_string(r) + " planned otherwise"};
  }
  return reference;
}

TEST(TuneAgreement, RanksCountingOtherCpusPlanAlike) {
  const std::vector<std::string> oversubscribed = plansWithCpus([](int) { return "1"; });
  const std::vector<std::string> cores = plansWithCpus([](int) { return "64"; });
  ASSERT_EQ(oversubscribed.size(), 3u) << ::testing::PrintToString(oversubscribed);
  ASSERT_EQ(cores.size(), 3u) << ::testing::PrintToString(cores);
  // The crossover moves: at 128 KiB the board where ranks outnumber cores, a single-copy
  // all-reduce first with a core per rank.
  EXPECT_NE(oversubscribed[2], cores[2]);
  EXPECT_EQ(plansWithCpus([](int r) { return r == 0 ? "1" : "64"; }), oversubscribed);
  EXPECT_EQ(plansWithCpus([](int r) { return r == 0 ? "64" : "1"; }), oversubscribed);
}

}  // namespace
}  // namespace collie
