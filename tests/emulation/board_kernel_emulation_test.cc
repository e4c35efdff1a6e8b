// The board kernel (kernels/cuda/board_kernel.cuh) on plain host memory through the
// emulator, with the flags laid out by hand: what the communicator-level tests
// (device_board_test.cc) cannot force. Consecutive collectives alternate the two board
// slots (a collective never overwrites what a peer one collective behind may still
// read); a block whose peer block posted another fingerprint writes nothing, even
// when block 0 agreed (on a GPU the blocks run at once, so each must check for itself).
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "kernels/cuda/kernel_table.h"
#include "support/reference.h"

namespace collie::cuda {
namespace {

constexpr unsigned kBlock = 32;
constexpr uint64_t kTimeoutNs = 20ull * 1000 * 1000 * 1000;
constexpr int32_t kMismatchBase = 1 << 24;

// What one rank's window and device memory hold for the board kernel.
struct BoardRank {
  std::vector<unsigned char> board;  // two slots
  uint64_t posted = 0;
  uint64_t slot[2] = {};
  uint64_t blockFlags[(kDeviceMaxBoardBlocks - 1) * kDeviceBoardFlagWords] = {};
  uint32_t counter = 0;
  uint64_t sequence = 0;
  int32_t error = 0;
  uint64_t peerFingerprint = 0;
  uint64_t ownFingerprint = 0;
};

DeviceBoardStep makeStep(std::vector<BoardRank>& ranks, int r, uint64_t slotBytes, uint64_t count,
                         uint64_t perBlock, uint64_t fingerprint) {
  const int n = static_cast<int>(ranks.size());
  BoardRank& me = ranks[r];
  DeviceBoardStep step;
  step.kind = DeviceBoardKind::kAllReduce;
  step.count = count;
  step.dtype = DataType::kInt32;
  step.op = ReduceOp::kSum;
  step.rank = r;
  step.nranks = n;
  for (int q = 0; q < n; ++q) step.boards[q] = ranks[q].board.data();
  step.slotBytes = slotBytes;
  step.perBlock = perBlock;
  step.blocks = static_cast<uint32_t>((count + perBlock - 1) / perBlock);
  step.ownBlockFlags = me.blockFlags;
  step.blockCounter = &me.counter;
  DeviceFingerprintCheck& check = step.check;
  check.ownSlot = me.slot;
  check.ownPosted = &me.posted;
  check.fingerprint = fingerprint;
  check.posted = 1;
  check.error = &me.error;
  check.peerFingerprint = &me.peerFingerprint;
  check.ownFingerprint = &me.ownFingerprint;
  check.timeoutNs = kTimeoutNs;
  check.timeoutBase = 2;
  check.mismatchBase = kMismatchBase;
  check.sequence = &me.sequence;
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    const int i = check.npeers++;
    check.peerSlot[i] = ranks[q].slot;
    check.peerPosted[i] = &ranks[q].posted;
    check.peerRank[i] = q;
    step.peerBlockFlags[i] = ranks[q].blockFlags;
  }
  return step;
}

std::vector<unsigned char> bytesOf(const std::vector<int32_t>& values) {
  std::vector<unsigned char> bytes(values.size() * sizeof(int32_t));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// Two all-reduces in a row on 2 ranks: the first publishes into slot 0, the second
// into slot 1, which leaves the first one's boards intact for a slow peer.
TEST(BoardKernel, ConsecutiveCollectivesAlternateSlots) {
  constexpr int kRanks = 2;
  constexpr uint64_t kCount = 100;  // one block
  constexpr uint64_t kSlotBytes = 4096;
  std::vector<BoardRank> ranks(kRanks);
  for (BoardRank& r : ranks) r.board.assign(2 * kSlotBytes, 0);
  std::vector<std::vector<int32_t>> inputs[kRanks], outputs[kRanks];
  for (int r = 0; r < kRanks; ++r) {
    for (int call = 0; call < 2; ++call) {
      inputs[r].push_back(std::vector<int32_t>(kCount, (r + 1) * 10 + call));
      outputs[r].push_back(std::vector<int32_t>(kCount, -1));
    }
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      for (int call = 0; call < 2; ++call) {
        DeviceBoardStep step = makeStep(ranks, r, kSlotBytes, kCount, 128, 0x1234);
        step.input = inputs[r][call].data();
        step.output = outputs[r][call].data();
        emulatedLaunch(boardKernelFor(step), dim3(step.blocks), dim3(kBlock), step);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(ranks[r].error, 0);
    EXPECT_EQ(ranks[r].sequence, 2u);
    EXPECT_EQ(ranks[r].counter, 0u) << "the block counter is rearmed";
    for (int call = 0; call < 2; ++call) {
      EXPECT_EQ(outputs[r][call], std::vector<int32_t>(kCount, 10 + 20 + 2 * call));
      const unsigned char* slot = ranks[r].board.data() + call * kSlotBytes;
      EXPECT_EQ(std::vector<unsigned char>(slot, slot + kCount * sizeof(int32_t)),
                bytesOf(inputs[r][call]))
          << "rank " << r << ", slot " << call;
    }
  }
}

// Rank 0 against a peer whose block 0 posted the same fingerprint and whose block 1
// posted another: block 1 stores the mismatch and writes none of its part.
TEST(BoardKernel, EveryBlockChecksItsPeerBlockBeforeWriting) {
  constexpr uint64_t kPerBlock = 64;
  constexpr uint64_t kCount = 2 * kPerBlock;
  constexpr uint64_t kSlotBytes = 4096;
  constexpr uint64_t kFingerprint = 0x5151;
  std::vector<BoardRank> ranks(2);
  for (BoardRank& r : ranks) r.board.assign(2 * kSlotBytes, 0);
  BoardRank& peer = ranks[1];  // its kernel never runs: its flags say it published
  peer.posted = 1;
  peer.slot[0] = kFingerprint;
  peer.blockFlags[0] = 1;                 // block 1: posted
  peer.blockFlags[1] = kFingerprint ^ 1;  // block 1: fingerprint, slot 0
  std::vector<int32_t> input(kCount, 3), output(kCount, -1);
  DeviceBoardStep step = makeStep(ranks, 0, kSlotBytes, kCount, kPerBlock, kFingerprint);
  step.input = input.data();
  step.output = output.data();
  ASSERT_EQ(step.blocks, 2u);
  emulatedLaunch(boardKernelFor(step), dim3(step.blocks), dim3(kBlock), step);
  EXPECT_EQ(ranks[0].error, kMismatchBase + 1);
  EXPECT_EQ(ranks[0].peerFingerprint, kFingerprint ^ 1);
  EXPECT_EQ(ranks[0].sequence, 0u) << "a failed collective does not advance";
  for (uint64_t i = kPerBlock; i < kCount; ++i) {
    ASSERT_EQ(output[i], -1) << "block 1 wrote element " << i << " despite the mismatch";
  }
  EXPECT_EQ(output[0], 3) << "block 0 agreed with its peer block and wrote its part";
}

}  // namespace
}  // namespace collie::cuda
