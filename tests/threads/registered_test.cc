// Registered buffers (allocShared + registerBuffer): the single-copy shm all-reduce for
// every dtype and op on 1..4 ranks as threads, in and out of place, and mixed
// registration across ranks, which must fall back to the schedule on every rank and
// still be correct; large unregistered collectives between small one-shots keep the
// board in step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "collie/shared_memory.h"
#include "core/config/config.h"
#include "core/team/board_collectives.h"
#include "core/team/direct_share.h"
#include "support/quick_matrix.h"
#include "support/rank_threads.h"
#include "support/reference.h"
#include "transports/shm/shm_board.h"

namespace collie {
namespace {

// Above the one-shot slot the tests set (64 KiB) for every element size; odd so that
// shares and tiles end mid-unit.
constexpr size_t kCount = 65536 + 4099;

using testing::Failures;

// One rank's send and receive buffers, from allocShared (registered or not) or the heap.
struct Buffers {
  enum Kind { kHeap, kSharedRegistered, kSendOnlyRegistered };
  Buffers(Communicator& comm, Kind kind, size_t bytes) : comm(comm), kind(kind), bytes(bytes) {
    if (kind == kHeap) {
      heapSend.resize(bytes);
      heapRecv.resize(bytes);
      send = heapSend.data();
      recv = heapRecv.data();
      return;
    }
    send = static_cast<uint8_t*>(*allocShared(bytes));
    recv = static_cast<uint8_t*>(*allocShared(bytes));
    EXPECT_TRUE(comm.registerBuffer(send, bytes).isOk());
    if (kind == kSharedRegistered) {
      EXPECT_TRUE(comm.registerBuffer(recv, bytes).isOk());
    }
  }
  ~Buffers() {
    if (kind == kHeap) return;
    EXPECT_TRUE(comm.deregisterBuffer(send).isOk());
    if (kind == kSharedRegistered) {
      EXPECT_TRUE(comm.deregisterBuffer(recv).isOk());
    }
    EXPECT_TRUE(freeShared(send).isOk());
    EXPECT_TRUE(freeShared(recv).isOk());
  }
  Communicator& comm;
  Kind kind;
  size_t bytes;
  uint8_t* send = nullptr;
  uint8_t* recv = nullptr;
  std::vector<uint8_t> heapSend, heapRecv;
};

// `nranks` ranks as threads over shm, `config` on every rank, a 60 s deadline.
std::vector<std::unique_ptr<Communicator>> shmCommunicators(
    int nranks, const std::map<std::string, std::string>& config) {
  Options options;
  options.transport = "shm";
  options.timeout = std::chrono::seconds(60);
  options.config = config;
  return testing::makeCommunicators(nranks, options);
}

// Every dtype x op x {out of place, in place} with the given buffer kind per rank.
void runEveryDtypeAndOp(int nranks, const std::vector<Buffers::Kind>& kinds) {
  auto comms = shmCommunicators(nranks, {{"COLLIE_SHM_ONESHOT_MAX", "64K"}});
  ASSERT_EQ(comms.size(), static_cast<size_t>(nranks));
  Failures failures;
  testing::onEveryRank(nranks, [&](int r) {
    Communicator& comm = *comms[r];
    Buffers buffers(comm, kinds[r], kCount * 8);
    for (int d = 0; d < kNumDataTypes; ++d) {
      const DataType dtype = static_cast<DataType>(d);
      const size_t bytes = kCount * dataTypeSize(dtype);
      for (int o = 0; o < kNumReduceOps; ++o) {
        const ReduceOp op = static_cast<ReduceOp>(o);
        // Bitwise ops: integers only; premulsum needs a scalar (premul_test covers it).
        if (!isValidFor(op, dtype) || op == ReduceOp::kPreMulSum) continue;
        const std::vector<uint8_t> expected =
            testing::expectedReduction(dtype, op, nranks, 0, kCount);
        for (bool inPlace : {false, true}) {
          std::vector<uint8_t> input = testing::makeInput(dtype, op, r, kCount);
          std::memcpy(inPlace ? buffers.recv : buffers.send, input.data(), bytes);
          if (!inPlace) std::memset(buffers.recv, 0xEE, bytes);
          Result<Work> work = comm.allReduce(inPlace ? buffers.recv : buffers.send, buffers.recv,
                                             kCount, dtype, op);
          Status status = work.isOk() ? work->wait() : work.status();
          const std::string what = std::string(dataTypeName(dtype)) + " " +
                                   std::string(reduceOpName(op)) + (inPlace ? " in-place" : "") +
                                   " rank " + std::to_string(r);
          if (!status.isOk()) {
            failures.add(what + ": " + status.toString());
            return;
          }
          if (std::memcmp(buffers.recv, expected.data(), bytes) != 0) {
            failures.add(what + ": wrong result");
          }
        }
      }
    }
  });
  for (const std::string& message : failures.messages) ADD_FAILURE() << message;
}

class RegisteredTest : public ::testing::TestWithParam<int> {};

TEST_P(RegisteredTest, EveryDtypeAndOpGoesDirect) {
  const int nranks = GetParam();
  const uint64_t before = directShareCount();
  runEveryDtypeAndOp(nranks, std::vector<Buffers::Kind>(nranks, Buffers::kSharedRegistered));
  // One rank alone has no peers and no board: the engine runs it by itself.
  if (nranks > 1) {
    uint64_t pairs = 0;
    for (int d = 0; d < kNumDataTypes; ++d) {
      for (int o = 0; o < kNumReduceOps; ++o) {
        pairs += isValidFor(static_cast<ReduceOp>(o), static_cast<DataType>(d)) &&
                         static_cast<ReduceOp>(o) != ReduceOp::kPreMulSum
                     ? 1
                     : 0;
      }
    }
    EXPECT_EQ(directShareCount() - before, pairs * 2 * nranks);
  }
}

TEST_P(RegisteredTest, MixedRegistrationFallsBackOnEveryRank) {
  const int nranks = GetParam();
  if (nranks == 1) GTEST_SKIP() << "mixing needs two ranks";
  std::vector<Buffers::Kind> kinds(nranks, Buffers::kSharedRegistered);
  kinds[nranks - 1] = Buffers::kHeap;
  if (nranks > 2) kinds[1] = Buffers::kSendOnlyRegistered;
  const uint64_t before = directShareCount();
  runEveryDtypeAndOp(nranks, kinds);
  EXPECT_EQ(directShareCount(), before) << "a rank went direct without every rank's buffers";
}

INSTANTIATE_TEST_SUITE_P(Ranks, RegisteredTest, ::testing::Values(1, 2, 3, 4));

// Out of place from kDirectStreamingMinBytes the tiles go out with streaming stores:
// outputs that start off a 16-byte boundary (the plain head) and end mid-line (the
// plain tail), 2 ranks (one fan-out pass per share, reduceFanOut, where both outputs lie
// alike modulo 32: sum; tiles where not: avg) and 3 (tiles), float32 sum and avg and int8
// sum; every rank's output equals the reference and the inputs are
// untouched.
TEST(RegisteredStreaming, LargeOutOfPlaceMatchesTheReference) {
  // The sanitizer runs' quick matrix: 2 ranks of int8 (the odd tail); the head and the
  // tail paths are the same for every rank count and dtype.
  const bool quick = testing::quickMatrix();
  for (int nranks : {2, 3}) {
    for (const std::pair<DataType, ReduceOp>& dtypeOp :
         {std::pair{DataType::kFloat32, ReduceOp::kSum},
          std::pair{DataType::kFloat32, ReduceOp::kAvg},
          std::pair{DataType::kInt8, ReduceOp::kSum}}) {
      // Named, not bound: lambdas capture structured bindings only from clang 16 on.
      const DataType dtype = dtypeOp.first;
      const ReduceOp op = dtypeOp.second;
      if (quick && (nranks != 2 || dtype != DataType::kInt8)) continue;
      const size_t es = dataTypeSize(dtype);
      const size_t count = kDirectStreamingMinBytes / es + 4099;
      const size_t bytes = count * es;
      Options options;
      options.transport = "shm";
      options.timeout = std::chrono::seconds(60);
      auto comms = testing::makeCommunicators(nranks, options);
      ASSERT_EQ(comms.size(), static_cast<size_t>(nranks));
      const std::vector<uint8_t> expected = testing::expectedReduction(dtype, op, nranks, 0, count);
      const uint64_t before = directShareCount();
      Failures failures;
      testing::onEveryRank(nranks, [&](int r) {
        Communicator& comm = *comms[r];
        Buffers buffers(comm, Buffers::kSharedRegistered, bytes + 64);
        // Off a 16-byte boundary; for avg, rank 1's 16 bytes further (outputs in different
        // 32-byte lanes: the tiles, not the fan-out).
        uint8_t* recv = buffers.recv + 4 + (op == ReduceOp::kAvg && r == 1 ? 16 : 0);
        const std::vector<uint8_t> input = testing::makeInput(dtype, op, r, count);
        std::memcpy(buffers.send, input.data(), bytes);
        std::memset(buffers.recv, 0xEE, bytes + 64);
        Result<Work> work = comm.allReduce(buffers.send, recv, count, dtype, op);
        Status status = work.isOk() ? work->wait() : work.status();
        const std::string what = std::string(dataTypeName(dtype)) + " " +
                                 std::string(reduceOpName(op)) + " on " + std::to_string(nranks) +
                                 " ranks, rank " + std::to_string(r);
        if (!status.isOk()) {
          failures.add(what + ": " + status.toString());
          return;
        }
        if (std::memcmp(recv, expected.data(), bytes) != 0) failures.add(what + ": wrong result");
        if (buffers.recv[0] != 0xEE || recv[bytes] != 0xEE) {
          failures.add(what + ": wrote outside its output");
        }
        if (std::memcmp(buffers.send, input.data(), bytes) != 0) {
          failures.add(what + ": changed its input");
        }
      });
      for (const std::string& message : failures.messages) ADD_FAILURE() << message;
      EXPECT_EQ(directShareCount() - before, static_cast<uint64_t>(nranks))
          << "the direct path did not run";
    }
  }
}

// Direct before the board (an all-reduce the board could carry, above
// COLLIE_SHM_DIRECT_MIN): the first one with registered buffers runs on the board and
// learns that every rank's were registered; the next ones go direct first. One rank's
// heap buffers make that call's direct decline on every rank (then the board), and the
// ranks learn it alike: the next registered call runs on the board again, the one after
// direct. Heap buffers on every rank never try direct first. Every result is exact.
class DirectBeforeBoardTest : public ::testing::TestWithParam<int> {};

TEST_P(DirectBeforeBoardTest, LearnsFromTheLastCallOnEveryRank) {
  const int nranks = GetParam();
  constexpr size_t kFloats = 24 * 1024 + 7;  // about 96 KiB: within the 2 MiB board
  auto comms = shmCommunicators(nranks, {{"COLLIE_SHM_DIRECT_MIN", "16K"}});
  ASSERT_EQ(comms.size(), static_cast<size_t>(nranks));
  const DataType dtype = DataType::kFloat32;
  const size_t bytes = kFloats * sizeof(float);
  const std::vector<uint8_t> expected =
      testing::expectedReduction(dtype, ReduceOp::kSum, nranks, 0, kFloats);
  std::vector<std::unique_ptr<Buffers>> registered(nranks), heap(nranks);
  Failures failures;
  // One all-reduce per rank; heapRank's buffers are from the heap (-1: no rank's, -2:
  // every rank's), the others' registered.
  auto round = [&](const std::string& label, int heapRank) {
    testing::onEveryRank(nranks, [&](int r) {
      if (!registered[r]) {
        registered[r] = std::make_unique<Buffers>(*comms[r], Buffers::kSharedRegistered, bytes);
        heap[r] = std::make_unique<Buffers>(*comms[r], Buffers::kHeap, bytes);
      }
      Buffers& buffers = heapRank == -2 || r == heapRank ? *heap[r] : *registered[r];
      const std::vector<uint8_t> input = testing::makeInput(dtype, ReduceOp::kSum, r, kFloats);
      std::memcpy(buffers.send, input.data(), bytes);
      std::memset(buffers.recv, 0xEE, bytes);
      Result<Work> work =
          comms[r]->allReduce(buffers.send, buffers.recv, kFloats, dtype, ReduceOp::kSum);
      Status status = work.isOk() ? work->wait() : work.status();
      const std::string what = label + ", rank " + std::to_string(r);
      if (!status.isOk()) {
        failures.add(what + ": " + status.toString());
      } else if (std::memcmp(buffers.recv, expected.data(), bytes) != 0) {
        failures.add(what + ": wrong result");
      }
    });
  };
  struct Counts {
    uint64_t tried, direct;
  };
  auto counts = [] { return Counts{boardDirectFirstCount(), directShareCount()}; };
  auto expectSince = [&](const Counts& before, uint64_t tried, uint64_t direct,
                         const std::string& what) {
    const Counts now = counts();
    EXPECT_EQ(now.tried - before.tried, tried * nranks) << what << ": direct tried first";
    EXPECT_EQ(now.direct - before.direct, direct * nranks) << what << ": direct ran";
  };

  Counts before = counts();
  round("first registered call", -1);
  expectSince(before, 0, 0, "the first registered call runs on the board");
  before = counts();
  for (int i = 0; i < 3; ++i) round("registered call " + std::to_string(i + 2), -1);
  expectSince(before, 3, 3, "the registered calls after it");
  before = counts();
  round("last rank on the heap", nranks - 1);
  expectSince(before, 1, 0, "one rank on the heap");
  before = counts();
  round("registered again", -1);
  round("registered once more", -1);
  expectSince(before, 1, 1, "after the heap call: the board once, then direct");
  before = counts();
  for (int i = 0; i < 3; ++i) round("every rank on the heap " + std::to_string(i), -2);
  expectSince(before, 1, 0, "heap buffers: direct tried once (learnt), then never");
  testing::onEveryRank(nranks, [&](int r) {
    registered[r].reset();
    heap[r].reset();
  });
  for (const std::string& message : failures.messages) ADD_FAILURE() << message;
}

INSTANTIATE_TEST_SUITE_P(Ranks, DirectBeforeBoardTest, ::testing::Values(2, 3, 4));

// The crossover each rank offers: the knob, at least 16 KiB where ranks outnumber cores.
TEST(DirectCrossover, TheKnobAtLeast16KWhereRanksOutnumberCores) {
  for (auto [knob, bytes] : {std::pair{"2K", size_t{2048}}, std::pair{"1M", size_t{1} << 20}}) {
    Result<ShmKnobs> parsed =
        ShmKnobs::parse(Config::fromVariables({{"COLLIE_SHM_DIRECT_MIN", knob}}));
    ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
    const ShmKnobs& config = *parsed;
    EXPECT_EQ(shm::boardTeamOffer(config, 2, false).directCrossoverBytes, bytes) << knob;
    EXPECT_EQ(shm::boardTeamOffer(config, 4, true).directCrossoverBytes,
              std::max(bytes, shm::kOversubscribedDirectMin))
        << knob;
  }
}

// Ranks whose COLLIE_SHM_DIRECT_MIN differ take the largest: both predict the same time,
// and with 2K on both registered 32 KiB all-reduces go direct from the second call on;
// with 2K and 64K they stay on the board (no direct tried first); both are exact.
TEST(DirectCrossover, RanksTakeTheLargestAnyRankSet) {
  constexpr int kRanks = 2;
  constexpr size_t kFloats = 8192;  // 32 KiB
  for (const char* other : {"2K", "64K"}) {
    Options options;
    options.transport = "shm";
    options.timeout = std::chrono::seconds(30);
    auto comms = testing::makeCommunicators(kRanks, options, [&](int r, Options* mine) {
      mine->config = {{"COLLIE_SHM_DIRECT_MIN", r == 0 ? "2K" : other}, {"COLLIE_CPUS", "8"}};
    });
    ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
    // Both ranks plan with the agreed crossover: the same predicted time.
    Result<double> predicted[kRanks] = {
        comms[0]->predictMicros(CollectiveKind::kAllReduce, kFloats, DataType::kFloat32),
        comms[1]->predictMicros(CollectiveKind::kAllReduce, kFloats, DataType::kFloat32)};
    ASSERT_TRUE(predicted[0].isOk() && predicted[1].isOk());
    EXPECT_EQ(*predicted[0], *predicted[1]) << "minimums 2K and " << other;
    const std::vector<uint8_t> expected =
        testing::expectedReduction(DataType::kFloat32, ReduceOp::kSum, kRanks, 0, kFloats);
    const uint64_t before = boardDirectFirstCount();
    Failures failures;
    testing::onEveryRank(kRanks, [&](int r) {
      Buffers buffers(*comms[r], Buffers::kSharedRegistered, kFloats * sizeof(float));
      const std::vector<uint8_t> input =
          testing::makeInput(DataType::kFloat32, ReduceOp::kSum, r, kFloats);
      for (int call = 0; call < 3; ++call) {
        std::memcpy(buffers.send, input.data(), input.size());
        Result<Work> work = comms[r]->allReduce(buffers.send, buffers.recv, kFloats,
                                                DataType::kFloat32, ReduceOp::kSum);
        Status status = work.isOk() ? work->wait() : work.status();
        if (!status.isOk()) {
          failures.add(std::string(other) + ", rank " + std::to_string(r) + ": " +
                       status.toString());
          return;
        }
        if (std::memcmp(buffers.recv, expected.data(), input.size()) != 0) {
          failures.add(std::string(other) + ", rank " + std::to_string(r) + ": wrong result");
        }
      }
    });
    for (const std::string& message : failures.messages) ADD_FAILURE() << message;
    EXPECT_EQ(boardDirectFirstCount() - before, std::string(other) == "2K" ? 4u : 0u)
        << "minimums 2K and " << other;
  }
}

// Heap buffers above the slot: an all-reduce declines without waiting for the other
// ranks, a broadcast waits (its root could finish alone and reuse a board slot a slow
// peer has yet to read). Small one-shots in between; ranks outnumber cores here, so
// some rank is often descheduled mid-collective. Every result must be right.
TEST(BoardInStep, LargeUnregisteredCollectivesBetweenSmallOnes) {
  constexpr int kRanks = 4;
  constexpr size_t kLarge = 70000;  // int32 elements, above the 64 KiB slot
  Options options;
  options.transport = "shm";
  options.timeout = std::chrono::seconds(10);
  options.config["COLLIE_SHM_ONESHOT_MAX"] = "64K";
  auto comms = testing::makeCommunicators(kRanks, options);
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  Failures failures;
  testing::onEveryRank(kRanks, [&](int r) {
    std::vector<int32_t> small(16), large(kLarge), out(kLarge);
    for (int i = 0; i < 300; ++i) {
      const int root = i % kRanks;
      std::fill(small.begin(), small.end(), r + i);
      std::fill(large.begin(), large.end(), r == root ? i : -1);
      Result<Work> works[3] = {
          comms[r]->allReduce(small.data(), small.data(), small.size(), DataType::kInt32,
                              ReduceOp::kSum),
          comms[r]->broadcast(large.data(), large.data(), kLarge, DataType::kInt32, root),
          comms[r]->allReduce(large.data(), out.data(), kLarge, DataType::kInt32, ReduceOp::kSum)};
      for (Result<Work>& work : works) {
        Status status = work.isOk() ? work->wait() : work.status();
        if (!status.isOk()) {
          failures.add("rank " + std::to_string(r) + " round " + std::to_string(i) + ": " +
                       status.toString());
          return;
        }
      }
      const int32_t sum = kRanks * i + kRanks * (kRanks - 1) / 2;
      if (small[0] != sum || large[kLarge - 1] != i || out[0] != kRanks * i) {
        failures.add("rank " + std::to_string(r) + " round " + std::to_string(i) +
                     ": wrong result");
        return;
      }
    }
  });
  for (const std::string& message : failures.messages) ADD_FAILURE() << message;
}

TEST(SharedMemory, RejectsWhatItCannotShare) {
  Options options;
  auto comms = testing::makeCommunicators(1, options);
  ASSERT_EQ(comms.size(), 1u);
  std::vector<uint8_t> heap(4096);
  EXPECT_EQ(comms[0]->registerBuffer(heap.data(), heap.size()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(comms[0]->deregisterBuffer(heap.data()).code(), StatusCode::kNotFound);
  EXPECT_EQ(freeShared(heap.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(allocShared(0).isOk());
  Result<void*> shared = allocShared(10000);
  ASSERT_TRUE(shared.isOk());
  // A range running past the end of the allocation is not shareable.
  EXPECT_EQ(comms[0]->registerBuffer(*shared, 1 << 20).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(comms[0]->registerBuffer(*shared, 10000).isOk());
  EXPECT_TRUE(freeShared(*shared).isOk());  // drops its registrations too
  EXPECT_EQ(comms[0]->deregisterBuffer(*shared).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace collie
