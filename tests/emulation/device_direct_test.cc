// The direct kernel of the device path (DeviceDirectStep, kernels/cuda/direct_kernel.cuh)
// and the device windows it runs on (Communicator::registerDeviceWindow), on the
// emulated device runtime, ranks as threads: all-reduce, reduce-scatter and all-gather
// whose buffers lie in registered windows run in one launch per collective (no check
// kernel), bytes equal to the exact references, every rank identical, on 2..8 ranks
// (one pass up to 4, several beyond), in place and not, up to kDeviceMaxDirectBlocks
// blocks; all-to-all on windows in one launch too; 9 ranks and unregistered buffers
// take the ring program; direct, board and ring kernels
// back to back without waiting; a rank whose buffers lie outside its window fails every rank with
// Mismatch before any output byte; registrations refused alike on every rank (another size, host
// memory, an overlap), naming the rank; a peer that never arrives is named by a
// Timeout; a closed window takes the ring again. Nothing here runs on a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "device_case_runner.h"
#include "kernels/cuda/emulation/emulated_runtime.h"
#include "support/quick_matrix.h"

namespace collie {
namespace {

using testing::Case;
using testing::DeviceBuffer;
using testing::Failures;
using testing::Placement;

constexpr auto kTimeout = std::chrono::seconds(30);

// The board off, so that small cases also leave it; 4 KiB ring slices for the cases
// that take the ring program.
Options directOptions() {
  Options options = testing::emulatedDeviceOptions();
  options.config["COLLIE_DEVICE_BOARD_BYTES"] = "0";
  options.config["COLLIE_DEVICE_RING_SLICE_BYTES"] = "4K";
  return options;
}

const CollectiveKind kDirectKinds[] = {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                                       CollectiveKind::kAllGather};

// Every rank's window: one allocation, registered whole; the cases' input at its start
// and their output in its second half (offsets alike on every rank).
class Windows {
 public:
  Windows(int nranks, size_t bytes) : bytes_(bytes) {
    for (int r = 0; r < nranks; ++r) pools_.push_back(std::make_unique<DeviceBuffer>(bytes));
  }
  uint8_t* pool(int r) const { return pools_[r]->get(); }
  Placement registerOn(int r, Communicator& comm, Failures* failures) const {
    Status status = comm.registerDeviceWindow(pool(r), bytes_);
    if (!status.isOk()) failures->add("rank " + std::to_string(r) + ": " + status.toString());
    return Placement{pool(r), pool(r) + bytes_ / 2};
  }

 private:
  size_t bytes_;
  std::vector<std::unique_ptr<DeviceBuffer>> pools_;
};

uint64_t runDirectCases(int nranks, const std::vector<Case>& cases, size_t windowBytes,
                        const Options& options = directOptions()) {
  Windows windows(nranks, windowBytes);
  Failures failures;
  const uint64_t launched = testing::runCases(
      nranks, Algorithm::kAuto, cases, options, kTimeout,
      [&](int r, Communicator& comm) { return windows.registerOn(r, comm, &failures); });
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
  return launched;
}

// One launch per collective and rank: the direct kernel runs its own check.
TEST(DeviceDirect, EveryKindInOneLaunch) {
  const std::vector<Case> cases = testing::casesOf(kDirectKinds, {1, 1021, 9'000});
  for (int nranks : testing::rankCounts({2, 3, 4, 5, 8})) {
    SCOPED_TRACE(std::to_string(nranks) + " ranks");
    EXPECT_EQ(runDirectCases(nranks, cases, 2 << 20), cases.size() * nranks);
  }
}

// Shares of several blocks each, up to kDeviceMaxDirectBlocks (64 of 64 KiB: a 4 MiB
// share), with uneven counts.
TEST(DeviceDirect, ManyBlocks) {
  const std::vector<Case> cases = {
      {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 9'000'001, false},
      {CollectiveKind::kAllReduce, DataType::kInt64, ReduceOp::kMin, 300'001, true},
      {CollectiveKind::kReduceScatter, DataType::kFloat16, ReduceOp::kSum, 400'003, false},
      {CollectiveKind::kAllGather, DataType::kUint8, ReduceOp::kSum, 1'000'003, true}};
  for (int nranks : testing::rankCounts({2, 4, 7})) {
    SCOPED_TRACE(std::to_string(nranks) + " ranks");
    EXPECT_EQ(runDirectCases(nranks, cases, 80 << 20), cases.size() * nranks);
  }
}

// All-to-all whose inputs lie in windows: one launch per rank (each pulls its block
// of every input), 2-8 ranks, five dtypes, up to 300,001 elements a block (19 blocks of
// the kernel); the collective is never in place (the API refuses it).
TEST(DeviceDirect, AllToAllInOneLaunch) {
  std::vector<Case> cases;
  for (auto [dtype, op] : testing::kTypedCases) {
    for (size_t count : {1, 1021, 9'000}) {
      cases.push_back({CollectiveKind::kAllToAll, dtype, op, count, false});
    }
  }
  for (int nranks : testing::rankCounts({2, 3, 5, 8})) {
    SCOPED_TRACE(std::to_string(nranks) + " ranks");
    EXPECT_EQ(runDirectCases(nranks, cases, 2 << 20), cases.size() * nranks);
  }
  const std::vector<Case> large = {
      {CollectiveKind::kAllToAll, DataType::kInt32, ReduceOp::kSum, 300'001, false}};
  EXPECT_EQ(runDirectCases(4, large, 20 << 20), 4u);
}

// More ranks than the direct kernel takes (kDeviceMaxDirectRanks): the windows
// register, the collectives take the ring program (check + program).
TEST(DeviceDirect, NineRanksTakeTheRingProgram) {
  static_assert(kDeviceMaxDirectRanks == 8);
  const std::vector<Case> cases = {
      {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 5'000, false},
      {CollectiveKind::kAllGather, DataType::kInt32, ReduceOp::kSum, 3'001, true}};
  EXPECT_EQ(runDirectCases(9, cases, 1 << 20), 2 * cases.size() * 9);
}

// Direct all-reduces in place on a window, ring all-reduces on unregistered memory and
// board all-reduces, back to back and waited for only at the end: each direct one reads
// the previous one's output while a peer may still be a collective behind.
TEST(DeviceDirect, BackToBackWithoutWaiting) {
  constexpr int kRanks = 3;
  constexpr int kRepeats = 6;
  constexpr size_t kSmall = 1'000;   // 4 KB: the board
  constexpr size_t kLarge = 60'000;  // 240 KB
  Options options = directOptions();
  options.config["COLLIE_DEVICE_BOARD_BYTES"] = "16K";
  auto comm = testing::deviceComms(kRanks, Algorithm::kAuto, kTimeout, false, options);
  ASSERT_EQ(comm.size(), static_cast<size_t>(kRanks));
  Windows windows(kRanks, 2 * kLarge * sizeof(int32_t));
  Failures failures;
  testing::onEveryRank(kRanks, [&](int r) {
    const Placement at = windows.registerOn(r, *comm[r], &failures);
    DeviceBuffer small(kSmall * sizeof(int32_t)), ring(kLarge * sizeof(int32_t));
    std::vector<uint8_t> start = testing::makeInput(DataType::kInt32, ReduceOp::kSum, r, kLarge);
    std::memcpy(at.input, start.data(), start.size());
    ring.write(start);
    small.write(testing::makeInput(DataType::kInt32, ReduceOp::kSum, r, kSmall));
    std::vector<Work> works;
    for (int i = 0; i < kRepeats; ++i) {
      for (Result<Work> work :
           {comm[r]->allReduce(at.input, at.input, kLarge, DataType::kInt32, ReduceOp::kSum),
            comm[r]->allReduce(ring.get(), ring.get(), kLarge, DataType::kInt32, ReduceOp::kSum),
            comm[r]->allReduce(small.get(), small.get(), kSmall, DataType::kInt32,
                               ReduceOp::kSum)}) {
        if (!work.isOk()) return failures.add(work.status().toString());
        works.push_back(*work);
      }
    }
    for (Work& w : works) {
      Status s = w.wait(std::chrono::seconds(60));
      if (!s.isOk()) return failures.add(s.toString());
    }
    int64_t scale = 1;
    for (int i = 1; i < kRepeats; ++i) scale *= kRanks;
    for (auto [got, count] : {std::pair{reinterpret_cast<const int32_t*>(at.input), kLarge},
                              std::pair{reinterpret_cast<const int32_t*>(ring.get()), kLarge},
                              std::pair{reinterpret_cast<const int32_t*>(small.get()), kSmall}}) {
      std::vector<uint8_t> once =
          testing::expectedReduction(DataType::kInt32, ReduceOp::kSum, kRanks, 0, count);
      const int32_t* want = reinterpret_cast<const int32_t*>(once.data());
      for (size_t i = 0; i < count; ++i) {
        if (got[i] != static_cast<int32_t>(want[i] * scale)) {
          return failures.add("rank " + std::to_string(r) + ": all-reduce of " +
                              std::to_string(count) + ", element " + std::to_string(i) + " is " +
                              std::to_string(got[i]));
        }
      }
    }
  });
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
}

// Rank 1 passes an output outside its window: every rank fails with Mismatch (ranks 0
// and 2 naming rank 1, the message saying why), and no output byte is written.
TEST(DeviceDirect, BufferOutsideTheWindowFailsEveryRankBeforeWriting) {
  constexpr int kRanks = 3;
  constexpr size_t kCount = 40'000;
  constexpr size_t kBytes = kCount * sizeof(float);
  auto comm = testing::deviceComms(kRanks, Algorithm::kAuto, kTimeout, false, directOptions());
  ASSERT_EQ(comm.size(), static_cast<size_t>(kRanks));
  Windows windows(kRanks, 2 * kBytes);
  Failures failures;
  std::vector<Status> status(kRanks);
  std::vector<int> written(kRanks, 0);  // not vector<bool>: ranks write at once
  const auto start = std::chrono::steady_clock::now();
  testing::onEveryRank(kRanks, [&](int r) {
    const Placement at = windows.registerOn(r, *comm[r], &failures);
    DeviceBuffer elsewhere(kBytes);
    uint8_t* output = r == 1 ? elsewhere.get() : at.output;
    std::memset(at.input, 0x11, kBytes);
    std::memset(output, 0xEE, kBytes);
    Result<Work> work =
        comm[r]->allReduce(at.input, output, kCount, DataType::kFloat32, ReduceOp::kSum);
    status[r] = work.isOk() ? work->wait(std::chrono::seconds(30)) : work.status();
    written[r] =
        std::vector<uint8_t>(output, output + kBytes) != std::vector<uint8_t>(kBytes, 0xEE);
  });
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "no hang";
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(status[r].code(), StatusCode::kMismatch)
        << "rank " << r << ": " << status[r].toString();
    if (r != 1) {
      EXPECT_EQ(status[r].peer(), 1) << status[r].toString();
      EXPECT_NE(status[r].message().find("device windows"), std::string::npos)
          << status[r].toString();
    }
    EXPECT_FALSE(written[r]) << "rank " << r << " wrote output despite the mismatch";
  }
}

// Refused registrations: every rank gets the same code naming the same rank, nothing
// stays registered, and the communicator keeps working.
TEST(DeviceDirect, RefusedRegistrationsNameTheRankOnEveryRank) {
  constexpr int kRanks = 3;
  constexpr size_t kBytes = 64 << 10;
  auto comm = testing::deviceComms(kRanks, Algorithm::kAuto, kTimeout, false, directOptions());
  ASSERT_EQ(comm.size(), static_cast<size_t>(kRanks));
  Windows windows(kRanks, 2 * kBytes);
  std::vector<Status> otherSize(kRanks), hostMemory(kRanks), overlap(kRanks);
  std::vector<uint64_t> launches(kRanks);
  Failures failures;
  testing::onEveryRank(kRanks, [&](int r) {
    // Rank 1 registers another size.
    otherSize[r] = comm[r]->registerDeviceWindow(windows.pool(r), r == 1 ? kBytes / 2 : kBytes);
    // Rank 2 passes host memory.
    std::vector<uint8_t> host(kBytes);
    hostMemory[r] = comm[r]->registerDeviceWindow(r == 2 ? host.data() : windows.pool(r), kBytes);
    // Rank 0 overlaps a window it registered already (the first half, registered here).
    Status first = comm[r]->registerDeviceWindow(windows.pool(r), kBytes);
    if (!first.isOk()) failures.add("rank " + std::to_string(r) + ": " + first.toString());
    overlap[r] = comm[r]->registerDeviceWindow(windows.pool(r) + (r == 0 ? 0 : kBytes), kBytes);
    // Still working: an all-reduce in the registered half runs (directly).
    auto* data = reinterpret_cast<float*>(windows.pool(r));
    for (size_t i = 0; i < 1000; ++i) data[i] = static_cast<float>(r + i);
    Result<Work> work = comm[r]->allReduce(data, data, 1000, DataType::kFloat32, ReduceOp::kSum);
    Status done = work.isOk() ? work->wait(std::chrono::seconds(30)) : work.status();
    if (!done.isOk()) failures.add("rank " + std::to_string(r) + ": " + done.toString());
    for (size_t i = 0; i < 1000 && done.isOk(); ++i) {
      if (data[i] != static_cast<float>(3 * i + 3)) {
        failures.add("rank " + std::to_string(r) + ": element " + std::to_string(i));
        break;
      }
    }
  });
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(otherSize[r].code(), StatusCode::kInvalidArgument) << otherSize[r].toString();
    EXPECT_EQ(otherSize[r].peer(), 1) << otherSize[r].toString();
    EXPECT_EQ(hostMemory[r].code(), StatusCode::kInvalidArgument) << hostMemory[r].toString();
    EXPECT_EQ(hostMemory[r].peer(), 2) << hostMemory[r].toString();
    EXPECT_NE(hostMemory[r].message().find("not device memory"), std::string::npos)
        << hostMemory[r].toString();
    EXPECT_EQ(overlap[r].code(), StatusCode::kInvalidArgument) << overlap[r].toString();
    EXPECT_EQ(overlap[r].peer(), 0) << overlap[r].toString();
  }
}

// Rank 1 registers but never issues the collective: rank 0 fails with Timeout naming it.
TEST(DeviceDirect, PeerThatNeverArrivesTimesOutNamingIt) {
  auto comm = testing::deviceComms(2, Algorithm::kAuto, std::chrono::milliseconds(800), false,
                                   directOptions());
  ASSERT_EQ(comm.size(), 2u);
  constexpr size_t kCount = 50'000;
  Windows windows(2, 2 * kCount * sizeof(float));
  Failures failures;
  std::vector<Placement> at(2);
  testing::onEveryRank(2, [&](int r) { at[r] = windows.registerOn(r, *comm[r], &failures); });
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
  testing::expectAllReduceTimesOutNamingRank1(*comm[0], at[0].input, at[0].output, kCount);
}

// Once every rank closed its window, the same buffers take the ring program again.
TEST(DeviceDirect, ClosedWindowTakesTheRingAgain) {
  constexpr int kRanks = 2;
  constexpr size_t kCount = 20'000;
  auto comm = testing::deviceComms(kRanks, Algorithm::kAuto, kTimeout, false, directOptions());
  ASSERT_EQ(comm.size(), static_cast<size_t>(kRanks));
  Windows windows(kRanks, 2 * kCount * sizeof(float));
  const Case c{CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, kCount, false};
  Failures failures;
  std::vector<uint64_t> launched(2);
  for (int round = 0; round < 2; ++round) {
    const uint64_t before = emulatedKernelLaunches();
    testing::onEveryRank(kRanks, [&](int r) {
      const Placement at = round == 0 ? windows.registerOn(r, *comm[r], &failures)
                                      : Placement{windows.pool(r), windows.pool(r) + kCount * 4};
      (void)testing::runOne(*comm[r], c, &failures, at);
      if (round == 0) {
        Status closed = comm[r]->deregisterDeviceWindow(windows.pool(r));
        if (!closed.isOk()) failures.add(closed.toString());
      }
    });
    launched[round] = emulatedKernelLaunches() - before;
  }
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
  EXPECT_EQ(launched[0], 1u * kRanks);
  EXPECT_EQ(launched[1], 2u * kRanks);
  EXPECT_EQ(comm[0]->deregisterDeviceWindow(windows.pool(0)).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace collie
