// Whole collectives composed from the kernels of kernels/cuda, as the cuda_ipc path
// runs them: each emulated rank is a host thread (an emulated GPU) that launches its
// steps in order; peers' buffers are plain pointers (what CUDA IPC maps) and steps are
// ordered only by the flags of DeviceStepSync. Checked against the exact references of
// tests/support/reference.h. Also: a wait that is never satisfied times out.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/kernel_table.h"
#include "support/reference.h"

namespace collie::cuda {
namespace {

constexpr unsigned kBlock = 32;
constexpr unsigned kMaxBlocks = 2;
constexpr uint64_t kTimeoutNs = 20ull * 1000 * 1000 * 1000;

struct RankMemory {
  std::vector<unsigned char> input, output;
  std::vector<std::vector<unsigned char>> slots;  // reduce-scatter receive slots, one per step
  uint64_t flag = 0;                              // this rank's step counter, polled by peers
  uint64_t flag2 = 0;
  uint32_t counter = 0;
  uint32_t counter2 = 0;
  int32_t error = 0;
};

DeviceStepSync makeSync(const uint64_t* wait0, const uint64_t* wait1, uint64_t waitValue,
                        uint64_t* post, uint32_t* counter, uint64_t postValue, int32_t* error) {
  DeviceStepSync sync;
  sync.waitFlags[0] = wait0;
  sync.waitFlags[1] = wait1;
  sync.waitValues[0] = waitValue;
  sync.waitValues[1] = waitValue;
  sync.postFlags[0] = post;
  sync.postValues[0] = postValue;
  sync.blockCounter = counter;
  sync.error = error;
  sync.timeoutNs = kTimeoutNs;
  return sync;
}

unsigned gridFor(size_t bytes) { return launchGrid(bytes, kBlock, kMaxBlocks); }

// Ring all-reduce, out of place. Rank r pushes its partial of chunk (r - s) into the
// next rank's slot s and bumps its own flag; the next rank waits for that flag. After
// N-1 steps rank r holds chunk (r + 1) reduced, and pushes it around the ring into
// the other ranks' outputs (all-gather), forwarding what it received.
void ringAllReduce(std::vector<RankMemory>& ranks, size_t count, DataType dtype, ReduceOp op) {
  const int n = static_cast<int>(ranks.size());
  const size_t es = dataTypeSize(dtype);
  auto chunkBegin = [&](int c) { return count * static_cast<size_t>(c) / n; };
  auto chunkCount = [&](int c) { return chunkBegin(c + 1) - chunkBegin(c); };
  auto mod = [n](int x) { return ((x % n) + n) % n; };
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      RankMemory& me = ranks[r];
      RankMemory& next = ranks[mod(r + 1)];
      RankMemory& prev = ranks[mod(r - 1)];
      // Reduce-scatter. Step 0 sends the own chunk r; step s combines chunk r - s.
      DeviceCopyStep first;
      first.src = me.input.data() + chunkBegin(r) * es;
      first.peerOut = next.slots[0].data();
      first.bytes = chunkCount(r) * es;
      first.sync = makeSync(nullptr, nullptr, 0, &me.flag, &me.counter, 1, &me.error);
      emulatedLaunch(&ringAllGatherStepKernel<>, dim3(gridFor(first.bytes)), dim3(kBlock), first);
      for (int s = 1; s < n; ++s) {
        const int c = mod(r - s);
        const bool last = s == n - 1;
        DeviceReduceStep step;
        step.local = me.input.data() + chunkBegin(c) * es;
        step.incoming = me.slots[s - 1].data();
        step.out = last ? me.output.data() + chunkBegin(c) * es : nullptr;
        step.peerOut = last ? nullptr : next.slots[s].data();
        step.count = chunkCount(c);
        step.divisor = last && op == ReduceOp::kAvg ? n : 0;
        step.sync = makeSync(&prev.flag, nullptr, s, &me.flag, &me.counter, s + 1, &me.error);
        emulatedLaunch(kernelFor<RingReduceScatterFamily>(dtype, op),
                       dim3(gridFor(step.count * es)), dim3(kBlock), step);
      }
      // All-gather on flag2: step t forwards chunk (r + 1 - t) into the next output.
      for (int t = 0; t < n - 1; ++t) {
        const int c = mod(r + 1 - t);
        DeviceCopyStep step;
        step.src = me.output.data() + chunkBegin(c) * es;
        step.out = me.output.data() + chunkBegin(c) * es;
        step.peerOut = next.output.data() + chunkBegin(c) * es;
        step.bytes = chunkCount(c) * es;
        step.sync = makeSync(t > 0 ? &prev.flag2 : nullptr, nullptr, t, &me.flag2, &me.counter2,
                             t + 1, &me.error);
        emulatedLaunch(&ringAllGatherStepKernel<>, dim3(gridFor(step.bytes)), dim3(kBlock), step);
      }
      // The last chunk arrives with the previous rank's final step.
      DeviceCopyStep wait;
      wait.src = me.output.data();
      wait.sync = makeSync(&prev.flag2, nullptr, n - 1, nullptr, nullptr, 0, &me.error);
      emulatedLaunch(&ringAllGatherStepKernel<>, dim3(1), dim3(kBlock), wait);
    });
  }
  for (std::thread& t : threads) t.join();
}

std::vector<RankMemory> makeRanks(int n, size_t count, DataType dtype, ReduceOp op) {
  const size_t bytes = count * dataTypeSize(dtype);
  std::vector<RankMemory> ranks(n);
  for (int r = 0; r < n; ++r) {
    ranks[r].input = testing::makeInput(dtype, op, r, count);
    ranks[r].output.assign(bytes, 0xA5);
    ranks[r].slots.assign(n, std::vector<unsigned char>(bytes / n + dataTypeSize(dtype) + 1));
  }
  return ranks;
}

TEST(CudaEmulationCollectives, RingAllReduceWithDeviceFlags) {
  struct Case {
    int n;
    size_t count;
  };
  for (Case c : {Case{2, 4099}, Case{3, 17}, Case{3, 4099}, Case{4, 1}, Case{4, 0}}) {
    for (DataType dtype : {DataType::kInt8, DataType::kUint32, DataType::kInt64, DataType::kFloat16,
                           DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
      for (ReduceOp op :
           {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
        SCOPED_TRACE(std::string(dataTypeName(dtype)) + "/" + std::string(reduceOpName(op)) +
                     " n=" + std::to_string(c.n) + " count=" + std::to_string(c.count));
        std::vector<RankMemory> ranks = makeRanks(c.n, c.count, dtype, op);
        ringAllReduce(ranks, c.count, dtype, op);
        std::vector<uint8_t> expected = testing::expectedReduction(dtype, op, c.n, 0, c.count);
        for (int r = 0; r < c.n; ++r) {
          ASSERT_EQ(ranks[r].error, 0) << "rank " << r;
          ASSERT_EQ(ranks[r].output, expected) << "rank " << r;
        }
      }
    }
  }
}

// Binary tree of 3 ranks (0 the root; 1 and 2 its children), in place in `output`:
// the children push their data into the root's two slots and bump their flags; the
// root waits for both, reduces (final step: divides for kAvg) and pushes the result
// into both children's outputs, bumping its flag, which the children wait for.
TEST(CudaEmulationCollectives, TreeAllReduceWithDeviceFlags) {
  for (DataType dtype : {DataType::kUint8, DataType::kInt32, DataType::kUint64, DataType::kFloat16,
                         DataType::kFloat32, DataType::kBFloat16}) {
    for (ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
      for (size_t count : {size_t{0}, size_t{15}, size_t{4099}}) {
        SCOPED_TRACE(std::string(dataTypeName(dtype)) + "/" + std::string(reduceOpName(op)) +
                     " count=" + std::to_string(count));
        const size_t bytes = count * dataTypeSize(dtype);
        std::vector<RankMemory> ranks = makeRanks(3, count, dtype, op);
        for (RankMemory& rank : ranks) rank.slots.assign(2, std::vector<unsigned char>(bytes));
        std::vector<std::thread> threads;
        for (int r = 0; r < 3; ++r) {
          threads.emplace_back([&, r] {
            RankMemory& me = ranks[r];
            if (r == 0) {
              TreeReduceStep up;
              up.local = me.input.data();
              up.children[0] = me.slots[0].data();
              up.children[1] = me.slots[1].data();
              up.nchildren = 2;
              up.out = me.output.data();
              up.count = count;
              up.divisor = op == ReduceOp::kAvg ? 3 : 0;
              up.sync = makeSync(&ranks[1].flag, &ranks[2].flag, 1, nullptr, nullptr, 0, &me.error);
              emulatedLaunch(kernelFor<TreeReduceFamily>(dtype, op), dim3(gridFor(bytes)),
                             dim3(kBlock), up);
              TreeBroadcastStep down;
              down.src = me.output.data();
              down.out = me.output.data();
              down.childOut[0] = ranks[1].output.data();
              down.childOut[1] = ranks[2].output.data();
              down.nchildren = 2;
              down.bytes = bytes;
              down.sync = makeSync(nullptr, nullptr, 0, &me.flag, &me.counter, 1, &me.error);
              emulatedLaunch(&treeBroadcastKernel<>, dim3(gridFor(bytes)), dim3(kBlock), down);
            } else {
              TreeReduceStep up;  // a leaf: its data alone, into the parent's slot
              up.local = me.input.data();
              up.out = ranks[0].slots[r - 1].data();
              up.count = count;
              up.sync = makeSync(nullptr, nullptr, 0, &me.flag, &me.counter, 1, &me.error);
              emulatedLaunch(kernelFor<TreeReduceFamily>(dtype, op), dim3(gridFor(bytes)),
                             dim3(kBlock), up);
              TreeBroadcastStep wait;  // nothing to forward: waits for the root's push
              wait.src = me.output.data();
              wait.out = me.output.data();
              wait.sync = makeSync(&ranks[0].flag, nullptr, 1, nullptr, nullptr, 0, &me.error);
              emulatedLaunch(&treeBroadcastKernel<>, dim3(1), dim3(kBlock), wait);
            }
          });
        }
        for (std::thread& t : threads) t.join();
        std::vector<uint8_t> expected = testing::expectedReduction(dtype, op, 3, 0, count);
        for (int r = 0; r < 3; ++r) {
          ASSERT_EQ(ranks[r].error, 0) << "rank " << r;
          ASSERT_EQ(ranks[r].output, expected) << "rank " << r;
        }
      }
    }
  }
}

TEST(CudaEmulationCollectives, UnsatisfiedWaitTimesOutAndSkipsTheStep) {
  uint64_t flag = 0, post = 0;
  uint32_t counter = 0;
  int32_t error = 0;
  std::vector<unsigned char> src(64, 1), out(64, 0);
  DeviceCopyStep step;
  step.src = src.data();
  step.out = out.data();
  step.bytes = 64;
  step.sync = makeSync(&flag, nullptr, 1, &post, &counter, 7, &error);
  step.sync.timeoutNs = 20 * 1000 * 1000;
  const auto start = std::chrono::steady_clock::now();
  emulatedLaunch(&ringAllGatherStepKernel<>, dim3(2), dim3(kBlock), step);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(20));
  EXPECT_EQ(error, kStepErrorTimeout);
  EXPECT_EQ(out, std::vector<unsigned char>(64, 0)) << "a timed-out step must not write";
  EXPECT_EQ(post, 0u) << "a timed-out step must not post";
}

}  // namespace
}  // namespace collie::cuda
