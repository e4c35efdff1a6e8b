// The board kernel of the device path (DeviceBoardStep, kernels/cuda/board_kernel.cuh)
// on the emulated device runtime, ranks as threads: all-reduce, reduce-scatter and
// all-gather in one launch per collective, bytes equal to the exact references, every
// rank identical; 2..8 ranks (the folds of more than four boards); several blocks;
// larger inputs and other algorithms on step kernels; board and step collectives back
// to back without waiting (the two board slots and the sequence number); a rank
// running other arguments (Mismatch on every rank, output untouched, in every block);
// a peer that never arrives (Timeout naming it). Nothing here runs on a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "device_case_runner.h"
#include "kernels/cuda/emulation/emulated_runtime.h"

namespace collie {
namespace {

using testing::Case;
using testing::describe;
using testing::DeviceBuffer;
using testing::expectedReduction;
using testing::Failures;
using testing::makeInput;
using testing::runOne;

constexpr auto kTimeout = std::chrono::seconds(30);

Options boardOptions(const std::string& boardBytes = "256K") {
  Options options = testing::emulatedDeviceOptions();
  options.config["COLLIE_DEVICE_BOARD_BYTES"] = boardBytes;
  return options;
}

uint64_t runCases(int nranks, Algorithm algorithm, const std::vector<Case>& cases,
                  const Options& options = boardOptions()) {
  return testing::runCases(nranks, algorithm, cases, options, kTimeout);
}

const CollectiveKind kBoardKinds[] = {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                                      CollectiveKind::kAllGather};

std::vector<Case> boardCases(std::initializer_list<size_t> counts) {
  return testing::casesOf(kBoardKinds, counts);
}

// One launch per collective and rank, with the check inside; several blocks from
// 16 KiB of output on.
TEST(DeviceBoard, EveryKindInOneKernel) {
  std::vector<Case> cases = boardCases({1, 7, 1021});
  for (CollectiveKind kind : kBoardKinds) {
    // 48 KB and 64 KB per part: 3 and 4 blocks (a 4-rank reduce-scatter's input of
    // 256 KiB fills the board).
    cases.push_back({kind, DataType::kFloat32, ReduceOp::kSum, 12'000, false});
    cases.push_back({kind, DataType::kInt64, ReduceOp::kSum, 8'000, true});
  }
  for (int nranks : {2, 3, 4}) {
    SCOPED_TRACE(std::to_string(nranks) + " ranks");
    EXPECT_EQ(runCases(nranks, Algorithm::kAuto, cases), cases.size() * nranks);
  }
}

// Five to eight boards take more than one pass of the fold (four sources a pass).
TEST(DeviceBoard, FoldsUpToEightRanks) {
  std::vector<Case> cases = boardCases({7, 3001});
  for (int nranks : {5, 8}) {
    SCOPED_TRACE(std::to_string(nranks) + " ranks");
    EXPECT_EQ(runCases(nranks, Algorithm::kBoard, cases), cases.size() * nranks);
  }
}

// Beyond the board (or with it off, or another algorithm forced) the step kernels run:
// more than one launch per collective, the same bytes.
TEST(DeviceBoard, OtherwiseStepKernelsRun) {
  const std::vector<Case> cases = {
      {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 2'000, false},
      {CollectiveKind::kReduceScatter, DataType::kInt32, ReduceOp::kMax, 600, true},
      {CollectiveKind::kAllGather, DataType::kBFloat16, ReduceOp::kSum, 2'100, false}};
  const int n = 3;
  // 8 KB of all-reduce and all-gather input, 7.2 KB of reduce-scatter input: over 4 KiB.
  EXPECT_GT(runCases(n, Algorithm::kAuto, cases, boardOptions("4K")), cases.size() * n);
  EXPECT_GT(runCases(n, Algorithm::kAuto, cases, boardOptions("0")), cases.size() * n);
  EXPECT_GT(runCases(n, Algorithm::kRing, cases), cases.size() * n);
  EXPECT_EQ(runCases(n, Algorithm::kBoard, cases), cases.size() * n);
}

// Board and step collectives back to back, waited for only at the end: in-place
// all-reduces on one buffer (each reads the previous one's output) alternate with
// all-gathers on the board and all-reduces too large for it, so the board slots are
// reused while peers may still be one collective behind.
TEST(DeviceBoard, BackToBackWithStepCollectivesWithoutWaiting) {
  constexpr int kRanks = 3;
  constexpr int kRepeats = 8;
  constexpr size_t kSmall = 4'000;   // 16 KB: the board, one block
  constexpr size_t kLarge = 20'000;  // 80 KB over a 64 KiB board: steps
  auto comm = testing::deviceComms(kRanks, Algorithm::kAuto, kTimeout, false, boardOptions("64K"));
  ASSERT_EQ(comm.size(), static_cast<size_t>(kRanks));
  Failures failures;
  testing::onEveryRank(kRanks, [&](int r) {
    DeviceBuffer small(kSmall * sizeof(int32_t));
    DeviceBuffer large(kLarge * sizeof(int32_t));
    DeviceBuffer part(kSmall * sizeof(int32_t));
    DeviceBuffer gathered(kRanks * kSmall * sizeof(int32_t));
    small.write(makeInput(DataType::kInt32, ReduceOp::kSum, r, kSmall));
    large.write(makeInput(DataType::kInt32, ReduceOp::kSum, r, kLarge));
    part.write(makeInput(DataType::kInt32, ReduceOp::kSum, 0, kSmall, r * kSmall));
    std::vector<Work> works;
    auto keep = [&](Result<Work> work) {
      if (work.isOk()) works.push_back(*work);
      return work.isOk();
    };
    for (int i = 0; i < kRepeats; ++i) {
      const bool ok =
          keep(comm[r]->allReduce(small.get(), small.get(), kSmall, DataType::kInt32,
                                  ReduceOp::kSum)) &&
          keep(comm[r]->allGather(part.get(), gathered.get(), kSmall, DataType::kInt32)) &&
          keep(comm[r]->allReduce(large.get(), large.get(), kLarge, DataType::kInt32,
                                  ReduceOp::kSum));
      if (!ok) return failures.add("rank " + std::to_string(r) + ": a submission failed");
    }
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
    if (gathered.read(0, kRanks * kSmall * sizeof(int32_t)) !=
        makeInput(DataType::kInt32, ReduceOp::kSum, 0, kRanks * kSmall)) {
      failures.add("rank " + std::to_string(r) + ": wrong all-gather");
    }
  });
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
}

// Runs `mine(r)` on every rank of fresh communicators; every rank must fail with
// Mismatch (rank 0 and 2 naming rank 1) and leave its output untouched.
void expectMismatchEverywhere(const std::vector<Case>& byRank) {
  const int n = static_cast<int>(byRank.size());
  auto comm = testing::deviceComms(n, Algorithm::kAuto, kTimeout, false, boardOptions("64K"));
  ASSERT_EQ(comm.size(), byRank.size());
  std::vector<Status> status(n);
  std::vector<std::vector<uint8_t>> untouched(n);
  const auto start = std::chrono::steady_clock::now();
  testing::onEveryRank(n, [&](int r) {
    const Case& c = byRank[r];
    const size_t bytes = c.count * dataTypeSize(c.dtype);
    DeviceBuffer input(bytes), output(bytes);
    input.write(std::vector<uint8_t>(bytes, 0x11));
    output.write(std::vector<uint8_t>(bytes, 0xEE));
    Result<Work> work = comm[r]->allReduce(input.get(), output.get(), c.count, c.dtype, c.op);
    status[r] = work.isOk() ? work->wait(std::chrono::seconds(30)) : work.status();
    if (output.read(0, bytes) != std::vector<uint8_t>(bytes, 0xEE)) {
      untouched[r] = output.read(0, bytes);
    }
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "no hang";
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(status[r].code(), StatusCode::kMismatch)
        << "rank " << r << ": " << status[r].toString();
    if (r != 1) {
      EXPECT_EQ(status[r].peer(), 1) << status[r].toString();
    }
    EXPECT_TRUE(untouched[r].empty()) << "rank " << r << " wrote output despite the mismatch";
  }
}

// Rank 1's all-reduce is too large for the board and runs the step kernels, whose check
// kernel meets block 0 of the others' board kernels.
TEST(DeviceBoard, MismatchAgainstStepKernels) {
  const Case board{CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 1'024, false};
  const Case steps{CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 40'000, false};
  expectMismatchEverywhere({board, steps, board});
}

// The same grid on every rank (10 blocks), another dtype on rank 1: every block finds
// the difference before it writes.
TEST(DeviceBoard, MismatchInEveryBlock) {
  const Case f32{CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 12'000, false};
  const Case i32{CollectiveKind::kAllReduce, DataType::kInt32, ReduceOp::kSum, 12'000, false};
  expectMismatchEverywhere({f32, i32, f32});
}

// Rank 1 never issues the collective: rank 0's board kernel times out on the device and
// the Work fails with Timeout naming rank 1, in one block and in several.
TEST(DeviceBoard, PeerThatNeverArrivesTimesOutNamingIt) {
  for (size_t count : {size_t{100}, size_t{20'000}}) {
    SCOPED_TRACE(std::to_string(count) + " floats");
    auto comm = testing::deviceComms(2, Algorithm::kAuto, std::chrono::milliseconds(800), false,
                                     boardOptions());
    ASSERT_EQ(comm.size(), 2u);
    DeviceBuffer input(count * sizeof(float)), output(count * sizeof(float));
    EXPECT_EQ(
        testing::expectAllReduceTimesOutNamingRank1(*comm[0], input.get(), output.get(), count), 1u)
        << "the board kernel alone";
  }
}

// A board slot that is not a multiple of 4 KiB refuses to start.
TEST(DeviceBoard, BadBoardSizeRefusesToStart) {
  Options options = boardOptions("5000");
  options.store = makeInMemoryStore();
  Result<std::unique_ptr<Communicator>> comm =
      Communicator::create(testing::testUniqueId(), 0, 1, options);
  ASSERT_FALSE(comm.isOk());
  EXPECT_NE(comm.status().message().find("board"), std::string::npos) << comm.status().toString();
}

}  // namespace
}  // namespace collie
