// One outcome per collective (issue 22, item 5): once a rank failed a collective
// (timed out, then destroyed its communicator), the late rank that calls it afterwards
// must not report success with the data the failed rank had already posted; it gets an
// error naming the failed rank and why.
//
// Two ranks as threads, COLLIE_TIMEOUT 1 s: rank 0 calls an all-reduce at once, times
// out and destroys its communicator; only then does rank 1 call the same all-reduce. Per
// path that serves the size: the board (8 B, 4 KiB, 1 MiB), cma (4 KiB, 1 MiB, 64 MiB),
// the ring over shm FIFOs (8 B, 4 KiB, 1 MiB, 64 MiB), one-shot over shm FIFOs (4 KiB),
// tcp (8 B, 4 KiB, 1 MiB, 64 MiB; ring 4 KiB) and ucx (8 B, 4 KiB, 1 MiB). The cases run
// side by side (each is a second of rank 0 waiting), so the test takes about two seconds
// (0.8 GB resident with the 64 MiB cases). COLLIE_TEST_QUICK=1 (the sanitizer runs) keeps
// one size per path and no 64 MiB case.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support/quick_matrix.h"
#include "support/rank_threads.h"

namespace collie {
namespace {

using namespace std::chrono_literals;  // NOLINT(build/namespaces)

struct Case {
  std::string name;
  std::string transport;
  Algorithm algorithm;
  std::map<std::string, std::string> knobs;
  size_t floats;
};

std::vector<Case> cases() {
  const size_t k8B = 2, k4K = 1024, k1M = 256 * 1024, k64M = 16 * 1024 * 1024;
  const std::map<std::string, std::string> bigBoard = {{"COLLIE_SHM_ONESHOT_MAX", "2M"}};
  // Without the board (no team), a small all-reduce goes one-shot over the shm FIFOs.
  const std::map<std::string, std::string> noBoard = {{"COLLIE_SHM_ONESHOT_MAX", "0"}};
  std::vector<Case> all = {
      {"board_4K", "shm", Algorithm::kBoard, {}, k4K},
      {"cma_1M", "shm", Algorithm::kCma, {}, k1M},
      {"ring_shm_4K", "shm", Algorithm::kRing, {}, k4K},
      {"tcp_4K", "tcp", Algorithm::kAuto, {}, k4K},
  };
  if (testing::quickMatrix()) return all;
  std::vector<Case> more = {
      {"board_8B", "shm", Algorithm::kBoard, {}, k8B},
      {"board_1M", "shm", Algorithm::kBoard, bigBoard, k1M},
      {"cma_4K", "shm", Algorithm::kCma, {}, k4K},
      {"ring_shm_8B", "shm", Algorithm::kRing, {}, k8B},
      {"ring_shm_1M", "shm", Algorithm::kRing, {}, k1M},
      {"oneshot_shm_4K", "shm", Algorithm::kOneShot, noBoard, k4K},
      {"tcp_8B", "tcp", Algorithm::kAuto, {}, k8B},
      {"tcp_1M", "tcp", Algorithm::kAuto, {}, k1M},
      {"tcp_ring_4K", "tcp", Algorithm::kRing, {}, k4K},
      {"ucx_8B", "ucx", Algorithm::kAuto, {}, k8B},
      {"ucx_4K", "ucx", Algorithm::kAuto, {}, k4K},
      {"ucx_1M", "ucx", Algorithm::kAuto, {}, k1M},
      {"cma_64M", "shm", Algorithm::kCma, {}, k64M},
      {"ring_shm_64M", "shm", Algorithm::kRing, {}, k64M},
      {"tcp_64M", "tcp", Algorithm::kAuto, {}, k64M},
  };
  all.insert(all.end(), more.begin(), more.end());
  return all;
}

struct Outcome {
  Status early;  // rank 0, which timed out
  Status late;   // rank 1, which called after rank 0 destroyed its communicator
  bool created = false;
};

// fault: a rank times out on an all-reduce and destroys its communicator, its peer calls the
// all-reduce afterwards (board, cma, shm FIFO ring and one-shot, tcp, ucx; 8 B-64 MiB) | the late
// rank fails naming the failed rank and its reason; none reports success (before: success on
// the board, tcp and ucx) | one_outcome_test
TEST(OneOutcomeTest, LateRankFailsACollectiveItsPeerFailed) {
  const std::vector<Case> all = cases();
  std::vector<Outcome> outcomes(all.size());
  std::vector<std::vector<std::unique_ptr<Communicator>>> comms(all.size());
  // Created one after the other (creation is collective and has its own deadline);
  // then every case runs at once.
  for (size_t i = 0; i < all.size(); ++i) {
    Options options;
    options.transport = all[i].transport;
    options.algorithm = all[i].algorithm;
    options.timeout = 1000ms;
    options.config = all[i].knobs;
    comms[i] = testing::makeCommunicators(2, options);
    outcomes[i].created = comms[i].size() == 2;
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!outcomes[i].created) continue;
    threads.emplace_back([&, i] {
      const size_t n = all[i].floats;
      std::vector<float> in0(n, 1.0f), out0(n, 0.0f), in1(n, 2.0f), out1(n, 0.0f);
      auto early =
          comms[i][0]->allReduce(in0.data(), out0.data(), n, DataType::kFloat32, ReduceOp::kSum);
      outcomes[i].early = early.isOk() ? early->wait() : early.status();
      comms[i][0].reset();  // rank 0 is done with it: destroyed
      auto late =
          comms[i][1]->allReduce(in1.data(), out1.data(), n, DataType::kFloat32, ReduceOp::kSum);
      outcomes[i].late = late.isOk() ? late->wait(10s) : late.status();
      comms[i][1].reset();
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < all.size(); ++i) {
    SCOPED_TRACE(all[i].name);
    ASSERT_TRUE(outcomes[i].created);
    EXPECT_EQ(outcomes[i].early.code(), StatusCode::kTimeout) << outcomes[i].early.toString();
    EXPECT_FALSE(outcomes[i].late.isOk())
        << "rank 1 reported success for a collective rank 0 failed";
    if (outcomes[i].late.isOk()) continue;
    const std::string& message = outcomes[i].late.message();
    EXPECT_EQ(outcomes[i].late.peer(), 0) << outcomes[i].late.toString();
    EXPECT_NE(message.find("rank 0"), std::string::npos) << outcomes[i].late.toString();
    // Why rank 0 failed it: its own error, as rank 0 left it in the failure reasons.
    EXPECT_NE(message.find(outcomes[i].early.message()), std::string::npos)
        << outcomes[i].late.toString() << "\nrank 0: " << outcomes[i].early.toString();
  }
}

}  // namespace
}  // namespace collie
