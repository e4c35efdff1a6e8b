// Per-communicator configuration (issue 23): each communicator runs with the snapshot
// taken at its creation (defaults, environment, then Options), so communicators of one
// process can be configured differently, and a must-match knob set in code on one rank
// only fails every rank, naming it, as an environment difference does.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/rank_threads.h"
#include "support/reference.h"

namespace collie {
namespace {

using namespace std::chrono_literals;

// The flight recorder's depth: COLLIE_TRACE_DEPTH as the communicator's engine got it.
size_t recorderDepth(const Communicator& comm) {
  return nlohmann::json::parse(comm.dumpFlightRecorder())["depth"].get<size_t>();
}

// Sums of int32 inputs (exact) for a few sizes on one rank; "" or what went wrong.
std::string allReduces(Communicator& comm) {
  for (size_t count : {size_t{1}, size_t{1000}, size_t{70000}}) {
    std::vector<uint8_t> in =
        testing::makeInput(DataType::kInt32, ReduceOp::kSum, comm.rank(), count);
    std::vector<uint8_t> out(in.size());
    Result<Work> work =
        comm.allReduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum);
    Status status = work.isOk() ? work->wait(30s) : work.status();
    if (!status.isOk()) return status.toString();
    if (out !=
        testing::expectedReduction(DataType::kInt32, ReduceOp::kSum, comm.size(), 0, count)) {
      return "wrong sum at count " + std::to_string(count);
    }
  }
  return "";
}

// Two 2-rank communicators in one process, created and run side by side: one forced to
// shm without the one-shot board and a flight recorder of 4, one forced to tcp on
// loopback with a recorder of 16. Each runs with its own settings and both are exact.
TEST(PerCommunicatorConfig, TwoCommunicatorsOfOneProcessRunWithTheirOwnSettings) {
  Options shm;
  shm.transport = "shm";
  shm.timeout = 30s;
  shm.config = {{"COLLIE_SHM_ONESHOT_MAX", "0"}, {"COLLIE_TRACE_DEPTH", "4"}};
  Options tcp;
  tcp.transport = "tcp";
  tcp.timeout = 30s;
  tcp.config = {{"COLLIE_SOCKET_IFNAME", "lo"}, {"COLLIE_TRACE_DEPTH", "16"}};
  std::vector<std::unique_ptr<Communicator>> overShm, overTcp;
  testing::onEveryRank(2, [&](int job) {  // both jobs are created at the same time
    (job == 0 ? overShm : overTcp) = testing::makeCommunicators(2, job == 0 ? shm : tcp);
  });
  ASSERT_EQ(overShm.size(), 2u);
  ASSERT_EQ(overTcp.size(), 2u);
  std::vector<std::string> failures(4);
  testing::onEveryRank(
      4, [&](int t) { failures[t] = allReduces(t < 2 ? *overShm[t] : *overTcp[t - 2]); });
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(failures[t], "") << (t < 2 ? "shm" : "tcp") << " rank " << t % 2;
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(overShm[r]->transportTo(1 - r), "shm");
    EXPECT_EQ(overTcp[r]->transportTo(1 - r), "tcp");
    EXPECT_EQ(recorderDepth(*overShm[r]), 4u);
    EXPECT_EQ(recorderDepth(*overTcp[r]), 16u);
  }

  // A split keeps its parent's snapshot; its own Options override it.
  std::vector<std::unique_ptr<Communicator>> inherited(2), overridden(2);
  std::vector<Status> errors(4);
  testing::onEveryRank(2, [&](int r) {
    Result<std::unique_ptr<Communicator>> child = overShm[r]->split(0, r);
    if (child.isOk()) inherited[r] = std::move(*child);
    errors[r] = child.status();
    Options mine;
    mine.config = {{"COLLIE_TRACE_DEPTH", "2"}};
    child = overShm[r]->split(0, r, mine);
    if (child.isOk()) overridden[r] = std::move(*child);
    errors[2 + r] = child.status();
  });
  for (const Status& error : errors) ASSERT_TRUE(error.isOk()) << error.toString();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(recorderDepth(*inherited[r]), 4u);
    EXPECT_EQ(recorderDepth(*overridden[r]), 2u);
    EXPECT_EQ(overridden[r]->transportTo(1 - r), "shm");
  }
}

// fault: a must-match knob (COLLIE_SHM_ONESHOT_MAX) set in Options::config on one rank
// only | every rank fails creation with Mismatch naming the knob and both values, at
// the first exchange | per_communicator_config_test
TEST(PerCommunicatorConfig, MustMatchOverrideOnOneRankFailsEveryRankNamingTheKnob) {
  constexpr int kRanks = 3;
  testing::CreatedRanks created = testing::createCommunicators(kRanks, [](int r) {
    Options options;
    options.transport = "shm";
    options.timeout = 20s;
    if (r == 1) options.config["COLLIE_SHM_ONESHOT_MAX"] = "0";
    return options;
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(created.comms[r], nullptr) << "rank " << r << " was created";
    EXPECT_EQ(created.errors[r].code(), StatusCode::kMismatch)
        << "rank " << r << ": " << created.errors[r].toString();
    EXPECT_NE(created.errors[r].message().find("COLLIE_SHM_ONESHOT_MAX"), std::string::npos)
        << "rank " << r << ": " << created.errors[r].toString();
  }
  EXPECT_NE(created.errors[1].message().find("COLLIE_SHM_ONESHOT_MAX: this rank 0, rank 0 "
                                             "2097152"),
            std::string::npos)
      << created.errors[1].toString();
}

}  // namespace
}  // namespace collie
