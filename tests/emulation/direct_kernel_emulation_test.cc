// The direct kernel (kernels/cuda/direct_kernel.cuh) on plain host memory through the
// emulator, with every rank's flags laid out by hand: what the communicator-level tests
// (device_direct_test.cc) cannot force. Two ranks as threads run all-reduces back to
// back over several blocks (entry and exit flags and the sequence number advance);
// seven ranks fold float sums in place in the documented order, bitwise;
// rank 0 alone, facing a peer that entered but never leaves, waits for that peer's exit
// and times out naming it (its kernel must not end while the peer may still read its
// buffers); a peer that never enters, or enters another collective, is named by a
// timeout or a mismatch and no output byte is written.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/cuda/kernel_table.h"
#include "kernels/cuda/step_checks.h"

namespace collie::cuda {
namespace {

constexpr unsigned kBlock = 32;
constexpr int32_t kTimeoutBase = 2;
constexpr int32_t kMismatchBase = 1 << 24;
constexpr uint64_t kFingerprint = 0x1234;

// One rank's flags (as in its device window), counters and error words.
struct DirectRank {
  uint64_t posted = 0;
  uint64_t slots[2] = {};
  uint64_t blockFlags[kDeviceMaxDirectBlocks * kDeviceDirectFlagWords] = {};
  uint64_t sequence = 0;
  uint32_t blockCounter = 0;
  int32_t error = 0;
  uint64_t peerFingerprint = 0;
  uint64_t ownFingerprint = 0;
};

// An all-reduce of int32 or float sums.
template <typename T>
DeviceDirectStep makeStep(std::vector<DirectRank>& ranks, int r,
                          const std::vector<std::vector<T>>& inputs,
                          std::vector<std::vector<T>>& outputs, uint64_t perBlock,
                          uint64_t timeoutNs) {
  static_assert(std::is_same_v<T, int32_t> || std::is_same_v<T, float>);
  const int n = static_cast<int>(ranks.size());
  DeviceDirectStep p;
  p.kind = DeviceBoardKind::kAllReduce;
  p.count = inputs[0].size();
  p.shareCount = ((p.count + n - 1) / n + 15) / 16 * 16;
  p.dtype = std::is_same_v<T, float> ? DataType::kFloat32 : DataType::kInt32;
  p.op = ReduceOp::kSum;
  p.rank = r;
  p.nranks = n;
  p.perBlock = perBlock;
  p.blocks = static_cast<uint32_t>((std::min(p.shareCount, p.count) + perBlock - 1) / perBlock);
  for (int q = 0; q < n; ++q) {
    p.inputs[q] = inputs[q].data();
    p.outputs[q] = outputs[q].data();
  }
  DirectRank& me = ranks[r];
  p.ownBlockFlags = me.blockFlags;
  p.blockCounter = &me.blockCounter;
  DeviceFingerprintCheck& check = p.check;
  check.ownSlot = me.slots;
  check.ownPosted = &me.posted;
  check.fingerprint = kFingerprint;
  check.posted = 1;
  check.error = &me.error;
  check.peerFingerprint = &me.peerFingerprint;
  check.ownFingerprint = &me.ownFingerprint;
  check.timeoutNs = timeoutNs;
  check.timeoutBase = kTimeoutBase;
  check.mismatchBase = kMismatchBase;
  check.sequence = &me.sequence;
  check.sequenceShift = 44;
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    const int i = check.npeers++;
    check.peerSlot[i] = ranks[q].slots;
    check.peerPosted[i] = &ranks[q].posted;
    check.peerRank[i] = q;
    p.peerBlockFlags[i] = ranks[q].blockFlags;
  }
  return p;
}

void launch(const DeviceDirectStep& p) {
  EXPECT_TRUE(checkDirectStep(p).isOk()) << checkDirectStep(p).toString();
  emulatedLaunch(directKernelFor(p), dim3(p.blocks), dim3(kBlock), p);
}

std::vector<int32_t> ramp(size_t count, int32_t scale) {
  std::vector<int32_t> v;
  for (size_t i = 0; i < count; ++i) v.push_back(static_cast<int32_t>(i) * scale);
  return v;
}

// Two ranks as threads, three all-reduces in place each, 5 blocks per share: every
// output exact, and each block's done flag and the sequence number at 3.
TEST(DirectKernel, AllReducesBackToBack) {
  constexpr int kRanks = 2;
  constexpr size_t kCount = 5'000;
  constexpr uint64_t kPerBlock = 512;
  std::vector<DirectRank> ranks(kRanks);
  std::vector<std::vector<int32_t>> data = {ramp(kCount, 1), ramp(kCount, 2)};
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      for (int call = 0; call < 3; ++call) {
        launch(makeStep(ranks, r, data, data, kPerBlock, 20'000'000'000ull));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // In place: the first call leaves i + 2i on both ranks, each later one doubles it.
  const std::vector<int32_t> want = ramp(kCount, 3 * 2 * 2);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(ranks[r].error, 0);
    EXPECT_EQ(data[r], want) << "rank " << r;
    EXPECT_EQ(ranks[r].sequence, 3u);
    EXPECT_EQ(ranks[r].blockCounter, 0u);
    for (uint32_t b = 0; b < 5; ++b) {
      EXPECT_EQ(ranks[r].blockFlags[b * kDeviceDirectFlagWords + 3], 3u) << "block " << b;
    }
  }
}

// Seven ranks, more than one pass reads, float sums in place over 7 blocks a share:
// every rank's share is folded from its own input on (rank r, r + 1, .., r - 1), the
// order of DeviceDirectStep, into its output first and then into every peer's, so
// every rank holds the same bits. In place, a fold in rank order through the output
// would overwrite a rank's own input before reading it; the inputs' magnitudes make
// the two orders round differently.
TEST(DirectKernel, MoreRanksThanAPassFoldFromTheirOwnInput) {
  constexpr int kRanks = 7;
  constexpr size_t kCount = 7 * 112 - 5;
  constexpr uint64_t kPerBlock = 16;
  std::vector<DirectRank> ranks(kRanks);
  std::vector<std::vector<float>> data(kRanks, std::vector<float>(kCount));
  const float scales[] = {1e-3f, 1.0f, 3e4f, 1e8f, 7.0f, 1e-2f, 5e7f};
  for (int q = 0; q < kRanks; ++q) {
    for (size_t i = 0; i < kCount; ++i) {
      const float sign = (i + q) % 3 == 0 ? -1.0f : 1.0f;
      data[q][i] = sign * scales[(q + i) % kRanks] * (1.0f + static_cast<float>(i % 13) / 7.0f);
    }
  }
  const std::vector<std::vector<float>> inputs = data;
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back(
        [&, r] { launch(makeStep(ranks, r, data, data, kPerBlock, 20'000'000'000ull)); });
  }
  for (std::thread& t : threads) t.join();

  const size_t share = ((kCount + kRanks - 1) / kRanks + 15) / 16 * 16;
  size_t orderMatters = 0;
  for (size_t i = 0; i < kCount; ++i) {
    const int owner = static_cast<int>(i / share);
    float want = inputs[owner][i];
    for (int j = 1; j < kRanks; ++j) want += inputs[(owner + j) % kRanks][i];
    float rankOrder = inputs[0][i];
    for (int q = 1; q < kRanks; ++q) rankOrder += inputs[q][i];
    if (std::memcmp(&want, &rankOrder, sizeof(float)) != 0) ++orderMatters;
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_EQ(std::memcmp(&data[r][i], &want, sizeof(float)), 0)
          << "rank " << r << " element " << i << ": " << data[r][i] << ", want " << want;
    }
  }
  EXPECT_GT(orderMatters, kCount / 10) << "the inputs do not tell the fold orders apart";
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(ranks[r].error, 0);
    EXPECT_EQ(ranks[r].sequence, 1u);
  }
}

// The peer entered (posted its fingerprint) but never leaves: rank 0 writes its share,
// then must wait for the peer's exit and time out naming it, without advancing its
// sequence number: its stream may not move on while the peer could still read its input
// or write its output.
TEST(DirectKernel, WaitsForThePeersExit) {
  std::vector<DirectRank> ranks(2);
  std::vector<std::vector<int32_t>> inputs = {ramp(64, 1), ramp(64, 2)};
  std::vector<std::vector<int32_t>> outputs(2, std::vector<int32_t>(64, -1));
  ranks[1].posted = 1;  // block 0 enters on the check's flags,
  ranks[1].slots[0] = kFingerprint;
  ranks[1].blockFlags[kDeviceDirectFlagWords] = 1;  // block 1 on its own
  ranks[1].blockFlags[kDeviceDirectFlagWords + 1] = kFingerprint;
  launch(makeStep(ranks, 0, inputs, outputs, 16, 50'000'000ull));
  EXPECT_EQ(ranks[0].error, kTimeoutBase + 1);
  EXPECT_EQ(ranks[0].sequence, 0u);
  EXPECT_EQ(ranks[0].blockFlags[3], 1u) << "rank 0 posted its own exit";
  // Rank 0's share (elements 0..31) is in both outputs.
  EXPECT_EQ(outputs[0][5], 15);
  EXPECT_EQ(outputs[1][5], 15);
  EXPECT_EQ(outputs[0][40], -1);
}

// A peer that never enters: a timeout naming it, nothing written.
TEST(DirectKernel, PeerThatNeverEntersTimesOutWritingNothing) {
  std::vector<DirectRank> ranks(2);
  std::vector<std::vector<int32_t>> inputs = {ramp(64, 1), ramp(64, 2)};
  std::vector<std::vector<int32_t>> outputs(2, std::vector<int32_t>(64, -1));
  launch(makeStep(ranks, 0, inputs, outputs, 16, 50'000'000ull));
  EXPECT_EQ(ranks[0].error, kTimeoutBase + 1);
  EXPECT_EQ(outputs[0], std::vector<int32_t>(64, -1));
  EXPECT_EQ(outputs[1], std::vector<int32_t>(64, -1));
}

// A peer in another collective: a mismatch naming it with its fingerprint, nothing
// written, and a set error word stops a later launch before it writes.
TEST(DirectKernel, MismatchWritesNothing) {
  std::vector<DirectRank> ranks(2);
  std::vector<std::vector<int32_t>> inputs = {ramp(64, 1), ramp(64, 2)};
  std::vector<std::vector<int32_t>> outputs(2, std::vector<int32_t>(64, -1));
  ranks[1].posted = 1;
  ranks[1].slots[0] = kFingerprint + 1;
  launch(makeStep(ranks, 0, inputs, outputs, 16, 50'000'000ull));
  EXPECT_EQ(ranks[0].error, kMismatchBase + 1);
  EXPECT_EQ(ranks[0].peerFingerprint, kFingerprint + 1);
  ranks[1].slots[0] = kFingerprint;
  launch(makeStep(ranks, 0, inputs, outputs, 16, 50'000'000ull));
  EXPECT_EQ(ranks[0].error, kMismatchBase + 1);
  EXPECT_EQ(outputs[0], std::vector<int32_t>(64, -1));
  EXPECT_EQ(outputs[1], std::vector<int32_t>(64, -1));
}

}  // namespace
}  // namespace collie::cuda
