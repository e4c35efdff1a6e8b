// Collectives over several "hosts" in one process (issue 24): ranks as threads whose
// host ids (Options::hostId) put them on M hosts of L ranks, numbered block (host after
// host) or cyclic (round robin); shm joins a host's ranks, tcp the hosts. With the
// hierarchical algorithm forced, every collective that has two levels runs in them
// (all-reduce, reduce-scatter, all-gather, broadcast, reduce), the inter-host stage a
// ring (chain) and a tree (COLLIE_HIER_HOSTS); with auto and slow inter-host constants
// the tuner picks hier itself. Results are exact against the float64/int64 reference
// (tests/support/reference.h) and bitwise identical on every rank.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "support/quick_matrix.h"
#include "support/rank_threads.h"
#include "support/reference.h"

namespace collie {
namespace {

using testing::expectedReduction;
using testing::Failures;
using testing::makeInput;

struct Shape {
  int nhosts;
  int perHost;
  bool cyclic;
};

std::vector<std::unique_ptr<Communicator>> onHosts(const Shape& shape, Options options) {
  options.chunkBytes = 4096;  // several rounds per collective
  options.timeout = std::chrono::seconds(60);
  return testing::makeCommunicators(shape.nhosts * shape.perHost, options, [&](int r, Options* o) {
    const int host = shape.cyclic ? r % shape.nhosts : r / shape.perHost;
    o->hostId = "fake-host-" + std::to_string(host);
  });
}

void runAndCheck(Communicator& comm, CollectiveKind kind, DataType dtype, ReduceOp op, size_t count,
                 bool inPlace, Failures* failures) {
  const int n = comm.size();
  const int r = comm.rank();
  const size_t es = dataTypeSize(dtype);
  const int root = n - 2;
  std::vector<uint8_t> input = makeInput(dtype, op, r, count);
  std::vector<uint8_t> output(count * es, 0xEE);
  std::vector<uint8_t> expected;
  Result<Work> work = invalidArgument("unset");
  if (kind == CollectiveKind::kAllReduce) {
    if (inPlace) output = input;
    work = comm.allReduce(inPlace ? output.data() : input.data(), output.data(), count, dtype, op);
    expected = expectedReduction(dtype, op, n, 0, count);
  } else if (kind == CollectiveKind::kBroadcast) {
    work = comm.broadcast(input.data(), output.data(), count, dtype, root);
    expected = makeInput(dtype, op, root, count);
  } else if (kind == CollectiveKind::kReduce) {
    work = comm.reduce(input.data(), output.data(), count, dtype, op, root);
    expected = r == root ? expectedReduction(dtype, op, n, 0, count) : output;
  } else if (kind == CollectiveKind::kAllGather) {
    output.assign(count * es * n, 0xEE);
    work = comm.allGather(input.data(), output.data(), count, dtype);
    for (int owner = 0; owner < n; ++owner) {
      std::vector<uint8_t> block = makeInput(dtype, op, owner, count);
      expected.insert(expected.end(), block.begin(), block.end());
    }
  } else {
    input = makeInput(dtype, op, r, count * n);
    work = comm.reduceScatter(input.data(), output.data(), count, dtype, op);
    expected = expectedReduction(dtype, op, n, r * count, count);
  }
  const std::string what = std::string(collectiveName(kind)) + " " +
                           std::string(dataTypeName(dtype)) + " " + std::string(reduceOpName(op)) +
                           " count=" + std::to_string(count) + (inPlace ? " in-place" : "") +
                           " rank " + std::to_string(r);
  if (!work.isOk()) return failures->add(what + ": " + work.status().toString());
  Status status = work->wait(std::chrono::minutes(1));
  if (!status.isOk()) return failures->add(what + ": " + status.toString());
  if (output != expected) failures->add(what + ": wrong bytes");
}

void checkEveryCollective(const Shape& shape, const Options& options);

class HierCollectivesTest : public ::testing::TestWithParam<std::tuple<int, int, bool>> {};

TEST_P(HierCollectivesTest, EveryCollectiveIsExact) {
  const Shape shape{std::get<0>(GetParam()), std::get<1>(GetParam()), std::get<2>(GetParam())};
  for (const char* stage : {"ring", "tree"}) {
    SCOPED_TRACE(std::string("between hosts: ") + stage);
    Options options;
    options.algorithm = Algorithm::kHier;
    options.config = {{"COLLIE_HIER_HOSTS", stage}};
    checkEveryCollective(shape, options);
  }
}

void checkEveryCollective(const Shape& shape, const Options& options) {
  auto comms = onHosts(shape, options);
  const int n = shape.nhosts * shape.perHost;
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  EXPECT_EQ(comms[0]->hostCount(), shape.nhosts);
  EXPECT_EQ(comms[0]->localSize(), shape.perHost);
  const std::vector<size_t> counts = testing::quickMatrix()
                                         ? std::vector<size_t>{1, 1023}
                                         : std::vector<size_t>{0, 1, 7, 1023, 9001};
  const std::vector<std::pair<DataType, ReduceOp>> types = {{DataType::kFloat32, ReduceOp::kSum},
                                                            {DataType::kFloat64, ReduceOp::kAvg},
                                                            {DataType::kInt32, ReduceOp::kMax},
                                                            {DataType::kBFloat16, ReduceOp::kSum}};
  Failures failures;
  testing::onEveryRank(n, [&](int r) {
    for (CollectiveKind kind :
         {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather,
          CollectiveKind::kBroadcast, CollectiveKind::kReduce}) {
      for (size_t t = 0; t < types.size(); ++t) {
        for (size_t i = 0; i < counts.size(); ++i) {
          runAndCheck(*comms[r], kind, types[t].first, types[t].second, counts[i], (i + t) % 2 == 0,
                      &failures);
        }
      }
    }
  });
  for (const std::string& message : failures.messages) ADD_FAILURE() << message;
  // Every one of them ran in two levels (the flight recorder keeps the latest).
  for (int r = 0; r < n; ++r) {
    auto doc = nlohmann::json::parse(comms[r]->dumpFlightRecorder());
    int seen = 0;
    for (const auto& item : doc["collectives"]) {
      const std::string kind = item["kind"];
      // Not the tuning probe's sends and receives, nor a barrier.
      if (kind != "allreduce" && kind != "reducescatter" && kind != "allgather" &&
          kind != "broadcast" && kind != "reduce") {
        continue;
      }
      EXPECT_EQ(item["algorithm"], "hier") << "rank " << r << " " << kind;
      ++seen;
    }
    EXPECT_GT(seen, 0) << "rank " << r;
  }
}

// Random floats: every rank ends with the same bytes (each final value is computed once
// and copied), and the tuner picks hier by itself when the hosts' link is slow.
TEST_P(HierCollectivesTest, AutoPicksHierOverASlowLinkAndEveryRankAgrees) {
  const Shape shape{std::get<0>(GetParam()), std::get<1>(GetParam()), std::get<2>(GetParam())};
  Options options;
  // Both levels' constants given: a probe within a host measures the build (under TSan
  // its alpha is tens of microseconds and a flat ring came out cheaper).
  options.config = {{"COLLIE_TUNE_ALPHA_US", "2"},
                    {"COLLIE_TUNE_BW_GBPS", "10"},
                    {"COLLIE_TUNE_NET_ALPHA_US", "50"},
                    {"COLLIE_TUNE_NET_BW_GBPS", "0.1"}};
  auto comms = onHosts(shape, options);
  const int n = shape.nhosts * shape.perHost;
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  const size_t count = 100003;
  std::vector<std::vector<float>> outputs(n, std::vector<float>(count));
  testing::onEveryRank(n, [&](int r) {
    std::mt19937 rng(7 + r);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> input(count);
    for (float& v : input) v = dist(rng);
    auto work = comms[r]->allReduce(input.data(), outputs[r].data(), count, DataType::kFloat32,
                                    ReduceOp::kSum);
    ASSERT_TRUE(work.isOk()) << work.status().toString();
    ASSERT_TRUE(work->wait().isOk());
  });
  for (int r = 1; r < n; ++r) {
    ASSERT_EQ(0, std::memcmp(outputs[0].data(), outputs[r].data(), count * sizeof(float)))
        << "rank " << r << " differs from rank 0";
  }
  for (int r = 0; r < n; ++r) {
    auto doc = nlohmann::json::parse(comms[r]->dumpFlightRecorder());
    int allReduces = 0;
    for (const auto& item : doc["collectives"]) {
      if (item["kind"] != "allreduce") continue;  // not the tuning probe's sends
      EXPECT_EQ(item["algorithm"], "hier") << "rank " << r;
      ++allReduces;
    }
    EXPECT_EQ(allReduces, 1) << "rank " << r;
  }
}

std::vector<std::tuple<int, int, bool>> shapes() {
  if (testing::quickMatrix()) return {{2, 2, true}};
  return {{2, 2, false}, {2, 2, true}, {3, 2, true}};
}

INSTANTIATE_TEST_SUITE_P(Hosts, HierCollectivesTest, ::testing::ValuesIn(shapes()),
                         [](const ::testing::TestParamInfo<std::tuple<int, int, bool>>& info) {
                           return std::to_string(std::get<0>(info.param)) + "x" +
                                  std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "_cyclic" : "_block");
                         });

}  // namespace
}  // namespace collie
