// The ring program kernel (kernels/cuda/ring_program_kernel.cuh) on plain host memory
// through the emulator, with FIFOs and counts laid out by hand: what the
// communicator-level tests (device_ring_program_test.cc) cannot force. Programs run back
// to back continue their FIFO counts (a FIFO of four slots wraps many times); a receive
// whose sender never posts and a send into a FIFO its reader never drains time out
// naming that neighbour, writing nothing; a program that finds the error word set
// writes nothing.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "kernels/cuda/kernel_table.h"

namespace collie::cuda {
namespace {

constexpr unsigned kBlock = 32;
constexpr uint64_t kSliceBytes = 256;
constexpr int32_t kTimeoutBase = 2;

// One rank's window (FIFO and counts) and error word.
struct RingRank {
  std::vector<unsigned char> fifo =
      std::vector<unsigned char>(kDeviceMaxRingBlocks * kDeviceRingSlots * kSliceBytes, 0);
  uint64_t sent[kDeviceMaxRingBlocks * kDeviceRingFlagStride] = {};
  uint64_t consumed[kDeviceMaxRingBlocks * kDeviceRingFlagStride] = {};
  int32_t error = 0;
};

DeviceRingProgram makeProgram(std::vector<RingRank>& ranks, int r, uint32_t blocks,
                              uint64_t timeoutNs) {
  const int n = static_cast<int>(ranks.size());
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  DeviceRingProgram p;
  p.dtype = DataType::kInt32;
  p.op = ReduceOp::kSum;
  p.blocks = blocks;
  p.sliceBytes = kSliceBytes;
  p.sendFifo = ranks[next].fifo.data();
  p.recvFifo = ranks[r].fifo.data();
  p.sent = ranks[r].sent;
  p.consumed = ranks[r].consumed;
  p.nextConsumed = ranks[next].consumed;
  p.prevSent = ranks[prev].sent;
  p.nextRank = next;
  p.prevRank = prev;
  p.error = &ranks[r].error;
  p.timeoutNs = timeoutNs;
  p.timeoutBase = kTimeoutBase;
  return p;
}

void addStep(DeviceRingProgram* p, DeviceRingOp op, const void* src, void* dst, uint64_t bytes) {
  DeviceRingStep& step = p->steps[p->nsteps++];
  step.op = op;
  step.src = src;
  step.dst = dst;
  step.bytes = bytes;
}

// A 2-rank ring all-reduce as the planner gives it in one round, three times in a row
// on each rank: 3 blocks of 27 pieces per step through FIFOs of 4 slots.
TEST(RingProgramKernel, ProgramsBackToBackContinueTheirFifos) {
  constexpr int kRanks = 2;
  constexpr int kCalls = 3;
  constexpr uint64_t kCount = 10'000;
  constexpr uint64_t kHalf = kCount / 2 * sizeof(int32_t);
  constexpr uint32_t kBlocks = 3;
  std::vector<RingRank> ranks(kRanks);
  std::vector<std::vector<int32_t>> inputs(kRanks), outputs(kRanks * kCalls);
  for (int r = 0; r < kRanks; ++r) {
    for (uint64_t i = 0; i < kCount; ++i) inputs[r].push_back(static_cast<int32_t>(i * (r + 1)));
  }
  for (auto& out : outputs) out.assign(kCount, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      for (int call = 0; call < kCalls; ++call) {
        DeviceRingProgram p = makeProgram(ranks, r, kBlocks, 20'000'000'000ull);
        const auto* in = reinterpret_cast<const unsigned char*>(inputs[r].data());
        auto* out = reinterpret_cast<unsigned char*>(outputs[r * kCalls + call].data());
        const uint64_t mine = r * kHalf, other = (1 - r) * kHalf;
        addStep(&p, DeviceRingOp::kSend, in + mine, nullptr, kHalf);
        addStep(&p, DeviceRingOp::kRecvReduceSend, in + other, out + other, kHalf);
        addStep(&p, DeviceRingOp::kRecv, nullptr, out + mine, kHalf);
        emulatedLaunch(ringProgramKernelFor(p), dim3(p.blocks), dim3(kBlock), p);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<int32_t> want;
  for (uint64_t i = 0; i < kCount; ++i) want.push_back(static_cast<int32_t>(3 * i));
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(ranks[r].error, 0);
    for (int call = 0; call < kCalls; ++call) {
      EXPECT_EQ(outputs[r * kCalls + call], want) << "rank " << r << ", call " << call;
    }
    // Each block's part of a step: 105 units of 64 bytes (the last one less), 27 pieces.
    for (uint32_t b = 0; b < kBlocks; ++b) {
      const uint64_t part = b + 1 < kBlocks ? 6'720 : kHalf - 2 * 6'720;
      const uint64_t pieces = (part + kSliceBytes - 1) / kSliceBytes;
      EXPECT_EQ(ranks[r].sent[b * kDeviceRingFlagStride], 2 * pieces * kCalls) << "block " << b;
      EXPECT_EQ(ranks[r].consumed[b * kDeviceRingFlagStride], 2 * pieces * kCalls) << "block " << b;
    }
  }
}

// Rank 0 alone: its receive waits for rank 1 (the previous rank), which never posts.
TEST(RingProgramKernel, ReceiveFromAbsentSenderTimesOutNamingIt) {
  std::vector<RingRank> ranks(2);
  std::vector<int32_t> output(1'000, -1);
  DeviceRingProgram p = makeProgram(ranks, 0, 2, 50'000'000ull);
  addStep(&p, DeviceRingOp::kRecv, nullptr, output.data(), output.size() * sizeof(int32_t));
  emulatedLaunch(ringProgramKernelFor(p), dim3(p.blocks), dim3(kBlock), p);
  EXPECT_EQ(ranks[0].error, kTimeoutBase + 1);
  EXPECT_EQ(output, std::vector<int32_t>(1'000, -1));
  EXPECT_EQ(ranks[0].consumed[0], 0u);
}

// Rank 1 of 3 sends into rank 2's FIFO, full since rank 2 never read: the send times out
// naming rank 2 and nothing is overwritten.
TEST(RingProgramKernel, SendIntoUndrainedFifoTimesOutNamingTheReader) {
  std::vector<RingRank> ranks(3);
  ranks[1].sent[0] = kDeviceRingSlots;  // four messages in flight, none consumed
  ranks[2].fifo.assign(ranks[2].fifo.size(), 0x5A);
  std::vector<int32_t> input(64, 7);
  DeviceRingProgram p = makeProgram(ranks, 1, 1, 50'000'000ull);
  addStep(&p, DeviceRingOp::kSend, input.data(), nullptr, input.size() * sizeof(int32_t));
  emulatedLaunch(ringProgramKernelFor(p), dim3(p.blocks), dim3(kBlock), p);
  EXPECT_EQ(ranks[1].error, kTimeoutBase + 2);
  EXPECT_EQ(ranks[1].sent[0], static_cast<uint64_t>(kDeviceRingSlots));
  EXPECT_EQ(ranks[2].fifo, std::vector<unsigned char>(ranks[2].fifo.size(), 0x5A));
}

// The error word already holds a code (a failed check before the program): nothing moves.
TEST(RingProgramKernel, SetErrorWordStopsEveryBlock) {
  std::vector<RingRank> ranks(2);
  ranks[0].error = 99;
  std::vector<int32_t> input(4'000, 5), output(4'000, -1);
  DeviceRingProgram p = makeProgram(ranks, 0, 4, 50'000'000ull);
  addStep(&p, DeviceRingOp::kCopy, input.data(), output.data(), input.size() * sizeof(int32_t));
  addStep(&p, DeviceRingOp::kSend, input.data(), nullptr, input.size() * sizeof(int32_t));
  emulatedLaunch(ringProgramKernelFor(p), dim3(p.blocks), dim3(kBlock), p);
  EXPECT_EQ(ranks[0].error, 99);
  EXPECT_EQ(output, std::vector<int32_t>(4'000, -1));
  EXPECT_EQ(ranks[0].sent[0], 0u);
}

}  // namespace
}  // namespace collie::cuda
