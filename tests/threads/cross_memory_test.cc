// The single-copy shm all-reduce over plain (unregistered) buffers through cross-memory
// attach (transports/shm/shm_peer_memory.h), ranks as threads: every dtype with sum and one
// other op, odd sizes that end shares and tiles mid-unit, in and out of place, 2..4
// ranks; every rank's bytes equal the exact reference. COLLIE_SHM_CMA_MAX=0 keeps the
// FIFO ring.
#include "core/team/cross_memory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "support/quick_matrix.h"
#include "support/rank_threads.h"
#include "support/reference.h"
#include "transports/shm/shm_peer_memory.h"

namespace collie {
namespace {

// Above the board slot the tests set (16 KiB) for every element size; the larger one
// spans several 256 KiB tiles.
constexpr size_t kCounts[] = {16411, 300007};

// Per dtype: sum and one other op, cycling; under TSan one of the two, alternating
// (testing::kThreadSanitized).
constexpr int kOpsPerDtype = testing::kThreadSanitized ? 1 : 2;

std::vector<ReduceOp> opsFor(int dtype) {
  // prod, max, min or avg (defined on every dtype), cycling with the dtype.
  const ReduceOp other = static_cast<ReduceOp>(1 + dtype % 4);
  if (kOpsPerDtype == 1) return {dtype % 2 == 0 ? ReduceOp::kSum : other};
  return {ReduceOp::kSum, other};
}

// Runs the sampled collectives on `nranks` thread ranks with COLLIE_SHM_CMA_MAX=`cmaMax`;
// returns how many ran per rank.
int runSampled(int nranks, const char* cmaMax) {
  Options options;
  options.transport = "shm";
  options.timeout = std::chrono::seconds(60);
  // The tuner's plan alone, from fixed FIFO constants (a probe can measure the FIFO as
  // fast as cma's model rate): no calls where the engine withholds cma to time the ring
  // (core/engine/single_copy_choice.h; AutoTimesCmaAgainstTheRing... covers those).
  options.config = {{"COLLIE_SHM_ONESHOT_MAX", "16K"},
                    {"COLLIE_SHM_CMA_MAX", cmaMax},
                    {"COLLIE_TUNE_ADAPT_MAX", "0"},
                    {"COLLIE_TUNE_ALPHA_US", "20"},
                    {"COLLIE_TUNE_BW_GBPS", "10"}};
  auto comms = testing::makeCommunicators(nranks, options);
  EXPECT_EQ(comms.size(), static_cast<size_t>(nranks));
  if (comms.size() != static_cast<size_t>(nranks)) return 0;
  std::mutex mutex;
  std::vector<std::string> failures;
  int collectives = 0;
  testing::onEveryRank(nranks, [&](int r) {
    Communicator& comm = *comms[r];
    int ran = 0;
    for (size_t count : kCounts) {
      for (int d = 0; d < kNumDataTypes; ++d) {
        const DataType dtype = static_cast<DataType>(d);
        const size_t bytes = count * dataTypeSize(dtype);
        for (ReduceOp op : opsFor(d)) {
          const std::vector<uint8_t> expected =
              testing::expectedReduction(dtype, op, nranks, 0, count);
          for (bool inPlace : {false, true}) {
            std::vector<uint8_t> send = testing::makeInput(dtype, op, r, count);
            std::vector<uint8_t> recv(bytes, 0xEE);
            if (inPlace) recv = send;
            Result<Work> work =
                comm.allReduce(inPlace ? recv.data() : send.data(), recv.data(), count, dtype, op);
            Status status = work.isOk() ? work->wait() : work.status();
            const std::string what = std::to_string(count) + " x " +
                                     std::string(dataTypeName(dtype)) + " " +
                                     std::string(reduceOpName(op)) + (inPlace ? " in-place" : "") +
                                     " rank " + std::to_string(r);
            std::lock_guard<std::mutex> lock(mutex);
            if (!status.isOk()) {
              failures.push_back(what + ": " + status.toString());
              return;
            }
            if (recv != expected) failures.push_back(what + ": wrong result");
            ++ran;
          }
        }
      }
    }
    std::lock_guard<std::mutex> lock(mutex);
    collectives = ran;
  });
  for (size_t i = 0; i < failures.size() && i < 20; ++i) ADD_FAILURE() << failures[i];
  return collectives;
}

class CrossMemoryTest : public ::testing::TestWithParam<int> {};

TEST_P(CrossMemoryTest, PlainBuffersGoSingleCopyAndMatchTheReference) {
  const int nranks = GetParam();
  const uint64_t before = crossMemoryShareCount();
  const int collectives = runSampled(nranks, "1G");
  EXPECT_EQ(collectives, static_cast<int>(std::size(kCounts)) * kNumDataTypes * kOpsPerDtype * 2);
  EXPECT_EQ(crossMemoryShareCount() - before, static_cast<uint64_t>(collectives * nranks))
      << "some all-reduces did not take the cross-memory path";
}

TEST_P(CrossMemoryTest, InPlaceOnesGoSingleCopyAboveTheLimit) {
  const int nranks = GetParam();
  const uint64_t before = crossMemoryShareCount();
  const int collectives = runSampled(nranks, "1K");  // below every sampled size
  EXPECT_EQ(collectives, static_cast<int>(std::size(kCounts)) * kNumDataTypes * kOpsPerDtype * 2);
  EXPECT_EQ(crossMemoryShareCount() - before, static_cast<uint64_t>(collectives / 2 * nranks))
      << "expected exactly the in-place half on the cross-memory path";
}

TEST_P(CrossMemoryTest, ZeroMinimumKeepsTheFifoRing) {
  const int nranks = GetParam();
  const uint64_t before = crossMemoryShareCount();
  runSampled(nranks, "0");
  EXPECT_EQ(crossMemoryShareCount(), before);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CrossMemoryTest, ::testing::Values(2, 3, 4));

TEST(CrossMemory, BadAddressOrGonePeerIsNamed) {
  uint8_t local[64];
  const auto self = static_cast<int32_t>(getpid());
  // Pid 0x7ffffff0 is beyond pid_max: no such process.
  shm::PeerMemoryAccess memory({self, self, 0x7ffffff0, self}, /*hugePageMinBytes=*/0);
  Status fault = memory.pull(3, 8, local, sizeof(local));
  EXPECT_EQ(fault.code(), StatusCode::kRemoteError);
  EXPECT_NE(fault.message().find("rank 3"), std::string::npos) << fault.toString();
  Status gone = memory.pull(2, reinterpret_cast<uint64_t>(local), local, 8);
  EXPECT_EQ(gone.code(), StatusCode::kRemoteError);
  EXPECT_NE(gone.message().find("rank 2"), std::string::npos) << gone.toString();
  // probe(): allowed on a live peer's mapped bytes (left as they were), an error naming
  // the peer when it is gone.
  std::string why;
  std::memset(local, 7, sizeof(local));
  Result<bool> allowed = memory.probe(1, reinterpret_cast<uint64_t>(local), sizeof(local),
                                      /*write=*/true, &why);
  ASSERT_TRUE(allowed.isOk()) << allowed.status().toString();
  EXPECT_TRUE(*allowed) << why;
  EXPECT_EQ(local[63], 7);
  Result<bool> probedGone =
      memory.probe(2, reinterpret_cast<uint64_t>(local), sizeof(local), /*write=*/false, &why);
  ASSERT_FALSE(probedGone.isOk());
  EXPECT_NE(probedGone.status().message().find("rank 2"), std::string::npos)
      << probedGone.status().toString();
}

}  // namespace
}  // namespace collie
