// The ring program of the device path (DeviceRingProgram, kernels/cuda/
// ring_program_kernel.cuh) on the emulated device runtime, ranks as threads: ring
// all-reduce, reduce-scatter and all-gather and chain broadcast and reduce beyond the
// board in two launches per collective (the fingerprint check and the program), bytes
// equal to the exact references, every rank identical; 2..6 ranks; uneven counts; 16
// blocks of many pieces each (the FIFOs wrap); the step kernels when it is off or the
// schedule is not ring-shaped (tree); ring programs, board kernels and step kernels back
// to back without waiting (the FIFO counts carry over); Mismatch and Timeout on every
// rank with the output untouched; a bad slice size refuses to start. Nothing here runs
// on a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device_case_runner.h"
#include "kernels/cuda/emulation/emulated_runtime.h"
#include "support/quick_matrix.h"

namespace collie {
namespace {

using testing::Case;
using testing::DeviceBuffer;
using testing::expectedReduction;
using testing::Failures;
using testing::makeInput;

constexpr auto kTimeout = std::chrono::seconds(30);

// 4 KiB slices (the default is 128 KiB), so that cases of tens of KB take several pieces
// per block and wrap the four-slot FIFOs; the board off unless given.
Options ringOptions(const std::string& sliceBytes = "4K", const std::string& boardBytes = "0") {
  Options options = testing::emulatedDeviceOptions();
  options.config["COLLIE_DEVICE_RING_SLICE_BYTES"] = sliceBytes;
  options.config["COLLIE_DEVICE_BOARD_BYTES"] = boardBytes;
  return options;
}

uint64_t runCases(int nranks, Algorithm algorithm, const std::vector<Case>& cases,
                  const Options& options = ringOptions()) {
  return testing::runCases(nranks, algorithm, cases, options, kTimeout);
}

const CollectiveKind kRingKinds[] = {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                                     CollectiveKind::kAllGather, CollectiveKind::kBroadcast,
                                     CollectiveKind::kReduce};

std::vector<Case> ringCases(std::initializer_list<size_t> counts) {
  return testing::casesOf(kRingKinds, counts);
}

// The check and the program: two launches per collective and rank, whatever the size.
TEST(DeviceRingProgram, EveryKindInTwoLaunches) {
  const std::vector<Case> cases = ringCases({1, 1021, 9'000});
  for (int nranks : testing::rankCounts({3, 2, 4})) {
    SCOPED_TRACE(std::to_string(nranks) + " ranks");
    EXPECT_EQ(runCases(nranks, Algorithm::kAuto, cases), 2 * cases.size() * nranks);
  }
}

// Five and six ranks: 9 and 11 steps a program, segments of uneven sizes.
TEST(DeviceRingProgram, MoreRanks) {
  const std::vector<Case> cases = ringCases({7, 3'001});
  for (int nranks : testing::rankCounts({5, 6})) {
    SCOPED_TRACE(std::to_string(nranks) + " ranks");
    EXPECT_EQ(runCases(nranks, Algorithm::kRing, cases), 2 * cases.size() * nranks);
  }
}

// 16 blocks, each with tens of pieces per step through its FIFO of four slots.
TEST(DeviceRingProgram, SixteenBlocksOfManyPieces) {
  const std::vector<Case> cases = {
      {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 600'000, false},
      {CollectiveKind::kAllReduce, DataType::kInt64, ReduceOp::kMin, 300'001, true},
      {CollectiveKind::kReduceScatter, DataType::kFloat16, ReduceOp::kSum, 400'000, false},
      {CollectiveKind::kAllGather, DataType::kUint8, ReduceOp::kSum, 1'000'003, true},
      {CollectiveKind::kBroadcast, DataType::kInt32, ReduceOp::kSum, 500'000, false}};
  for (int nranks : testing::rankCounts({2, 3})) {
    SCOPED_TRACE(std::to_string(nranks) + " ranks");
    EXPECT_EQ(runCases(nranks, Algorithm::kAuto, cases), 2 * cases.size() * nranks);
  }
}

// With the ring program off, or a schedule that is not ring-shaped (tree), the step
// kernels run: more launches, the same bytes.
TEST(DeviceRingProgram, OtherwiseStepKernelsRun) {
  const std::vector<Case> cases = {
      {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 20'000, false},
      {CollectiveKind::kReduceScatter, DataType::kInt32, ReduceOp::kMax, 6'000, true},
      {CollectiveKind::kBroadcast, DataType::kBFloat16, ReduceOp::kSum, 21'000, false}};
  const int n = 3;
  EXPECT_EQ(runCases(n, Algorithm::kAuto, cases), 2 * cases.size() * n);
  EXPECT_GT(runCases(n, Algorithm::kAuto, cases, ringOptions("0")), 2 * cases.size() * n);
  const std::vector<Case> tree = {cases[0]};
  EXPECT_GT(runCases(n, Algorithm::kTree, tree), 2 * tree.size() * n);
}

// Ring programs, board kernels and point-to-point step kernels back to back, waited for
// only at the end: in-place all-reduces on one buffer (each reads the previous one's
// output), broadcasts from every root in turn, small all-reduces on the board and sends
// around the ring, so the FIFOs' counts carry over from collective to collective while
// peers may be one collective behind.
TEST(DeviceRingProgram, BackToBackWithoutWaiting) {
  constexpr int kRanks = 3;
  constexpr int kRepeats = 6;
  constexpr size_t kSmall = 1'000;   // 4 KB: the board
  constexpr size_t kLarge = 30'000;  // 120 KB: the ring program
  auto comm =
      testing::deviceComms(kRanks, Algorithm::kAuto, kTimeout, false, ringOptions("4K", "16K"));
  ASSERT_EQ(comm.size(), static_cast<size_t>(kRanks));
  Failures failures;
  testing::onEveryRank(kRanks, [&](int r) {
    DeviceBuffer small(kSmall * sizeof(int32_t));
    DeviceBuffer large(kLarge * sizeof(int32_t));
    std::vector<std::unique_ptr<DeviceBuffer>> broadcast;
    for (int i = 0; i < kRepeats; ++i) {
      broadcast.push_back(std::make_unique<DeviceBuffer>(kLarge * sizeof(int32_t)));
    }
    DeviceBuffer toNext(kLarge * sizeof(int32_t)), fromPrev(kLarge * sizeof(int32_t));
    small.write(makeInput(DataType::kInt32, ReduceOp::kSum, r, kSmall));
    large.write(makeInput(DataType::kInt32, ReduceOp::kSum, r, kLarge));
    toNext.write(makeInput(DataType::kInt32, ReduceOp::kSum, r, kLarge));
    for (int i = 0; i < kRepeats; ++i) {
      broadcast[i]->write(makeInput(DataType::kInt32, ReduceOp::kSum, r + 10 * i, kLarge));
    }
    std::vector<Work> works;
    auto keep = [&](Result<Work> work) {
      if (work.isOk()) works.push_back(*work);
      return work.isOk();
    };
    const int next = (r + 1) % kRanks, prev = (r + kRanks - 1) % kRanks;
    for (int i = 0; i < kRepeats; ++i) {
      const bool ok = keep(comm[r]->allReduce(large.get(), large.get(), kLarge, DataType::kInt32,
                                              ReduceOp::kSum)) &&
                      keep(comm[r]->broadcast(broadcast[i]->get(), broadcast[i]->get(), kLarge,
                                              DataType::kInt32, i % kRanks)) &&
                      keep(comm[r]->allReduce(small.get(), small.get(), kSmall, DataType::kInt32,
                                              ReduceOp::kSum));
      if (!ok) return failures.add("rank " + std::to_string(r) + ": a submission failed");
    }
    std::vector<PointToPoint> ring = {
        {true, toNext.get(), kLarge, DataType::kInt32, next, std::nullopt},
        {false, fromPrev.get(), kLarge, DataType::kInt32, prev, std::nullopt}};
    if (!keep(comm[r]->sendRecv(ring))) return failures.add("the send/recv group failed");
    for (Work& w : works) {
      Status s = w.wait(std::chrono::seconds(60));
      if (!s.isOk()) return failures.add(s.toString());
    }
    int64_t scale = 1;
    for (int i = 1; i < kRepeats; ++i) scale *= kRanks;
    for (auto [buffer, count] : {std::pair{&small, kSmall}, std::pair{&large, kLarge}}) {
      std::vector<uint8_t> once =
          expectedReduction(DataType::kInt32, ReduceOp::kSum, kRanks, 0, count);
      const int32_t* want = reinterpret_cast<const int32_t*>(once.data());
      const int32_t* got = reinterpret_cast<const int32_t*>(buffer->get());
      for (size_t i = 0; i < count; ++i) {
        if (got[i] != static_cast<int32_t>(want[i] * scale)) {
          return failures.add("rank " + std::to_string(r) + ": all-reduce of " +
                              std::to_string(count) + ", element " + std::to_string(i) + " is " +
                              std::to_string(got[i]));
        }
      }
    }
    for (int i = 0; i < kRepeats; ++i) {
      if (broadcast[i]->read(0, kLarge * sizeof(int32_t)) !=
          makeInput(DataType::kInt32, ReduceOp::kSum, i % kRanks + 10 * i, kLarge)) {
        failures.add("rank " + std::to_string(r) + ": wrong broadcast " + std::to_string(i));
      }
    }
    if (fromPrev.read(0, kLarge * sizeof(int32_t)) !=
        makeInput(DataType::kInt32, ReduceOp::kSum, prev, kLarge)) {
      failures.add("rank " + std::to_string(r) + ": wrong message from rank " +
                   std::to_string(prev));
    }
  });
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
}

// Rank 1 reduces another count: every rank fails with Mismatch (the check kernel before
// the program), ranks 0 and 2 naming rank 1, and no output byte is written.
TEST(DeviceRingProgram, MismatchFailsEveryRankBeforeWriting) {
  constexpr int kRanks = 3;
  auto comm = testing::deviceComms(kRanks, Algorithm::kAuto, kTimeout, false, ringOptions());
  ASSERT_EQ(comm.size(), static_cast<size_t>(kRanks));
  std::vector<Status> status(kRanks);
  std::vector<int> written(kRanks, 0);  // not vector<bool>: ranks write at once
  const auto start = std::chrono::steady_clock::now();
  testing::onEveryRank(kRanks, [&](int r) {
    const size_t count = r == 1 ? 30'000 : 40'000;
    const size_t bytes = count * sizeof(float);
    DeviceBuffer input(bytes), output(bytes);
    input.write(std::vector<uint8_t>(bytes, 0x11));
    output.write(std::vector<uint8_t>(bytes, 0xEE));
    Result<Work> work =
        comm[r]->allReduce(input.get(), output.get(), count, DataType::kFloat32, ReduceOp::kSum);
    status[r] = work.isOk() ? work->wait(std::chrono::seconds(30)) : work.status();
    written[r] = output.read(0, bytes) != std::vector<uint8_t>(bytes, 0xEE);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "no hang";
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(status[r].code(), StatusCode::kMismatch)
        << "rank " << r << ": " << status[r].toString();
    if (r != 1) {
      EXPECT_EQ(status[r].peer(), 1) << status[r].toString();
    }
    EXPECT_FALSE(written[r]) << "rank " << r << " wrote output despite the mismatch";
  }
}

// Rank 1 never issues the collective: rank 0 fails with Timeout naming rank 1.
TEST(DeviceRingProgram, PeerThatNeverArrivesTimesOutNamingIt) {
  auto comm = testing::deviceComms(2, Algorithm::kAuto, std::chrono::milliseconds(800), false,
                                   ringOptions());
  ASSERT_EQ(comm.size(), 2u);
  constexpr size_t kCount = 50'000;
  DeviceBuffer input(kCount * sizeof(float)), output(kCount * sizeof(float));
  testing::expectAllReduceTimesOutNamingRank1(*comm[0], input.get(), output.get(), kCount);
}

// A slice that is not a multiple of 4 KiB refuses to start.
TEST(DeviceRingProgram, BadSliceSizeRefusesToStart) {
  Options options = ringOptions("5000");
  options.store = makeInMemoryStore();
  Result<std::unique_ptr<Communicator>> comm =
      Communicator::create(testing::testUniqueId(), 0, 1, options);
  ASSERT_FALSE(comm.isOk());
  EXPECT_NE(comm.status().message().find("RING_SLICE"), std::string::npos)
      << comm.status().toString();
}

}  // namespace
}  // namespace collie
