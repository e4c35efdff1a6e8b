// The NCCL-compatible API on emulated device buffers (COLLIE_DEVICE_EMULATION=1): the
// stream argument of ncclAllReduce reaches the communicator, the call returns once
// the kernels are enqueued (here: while the stream is still held by a gate), and the
// result is there after the stream passed an event. Ranks are threads; nothing here
// runs on a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "collie/nccl.h"
#include "core/device/device_runtime.h"
#include "kernels/cuda/emulation/emulated_stream.h"
#include "support/emulated_device.h"
#include "support/rank_threads.h"
#include "support/reference.h"

namespace collie {
namespace {

// The NCCL API has no options of collie's: an NCCL program configures collie through
// the environment (COLLIE_* and NCCL_* variables), read when ncclCommInitRank takes the
// communicator's snapshot. So this test, which goes through that API, sets them there.
TEST(DeviceNccl, AllReduceReturnsOnceEnqueuedOnTheStream) {
  setenv("COLLIE_DEVICE_EMULATION", "1", 1);
  setenv("COLLIE_TIMEOUT", "30s", 1);
  constexpr int kRanks = 3;
  constexpr size_t kCount = 3'001;
  const size_t bytes = kCount * sizeof(float);
  DeviceRuntime& device = testing::emulatedDevice();
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<std::string> failures(kRanks);
  testing::onEveryRank(kRanks, [&](int r) {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, kRanks, id, r) != ncclSuccess) {
      failures[r] = "ncclCommInitRank failed";
      return;
    }
    Result<DeviceStream> stream = device.createStream();
    Result<void*> in = device.allocate(bytes);
    Result<void*> out = device.allocate(bytes);
    std::vector<uint8_t> input = testing::makeInput(DataType::kFloat32, ReduceOp::kSum, r, kCount);
    std::memcpy(*in, input.data(), bytes);
    // Gate: the stream is held until the call returned (or 10 s passed, so that a
    // blocking call fails the test instead of hanging it).
    std::atomic<bool> open{false};
    static_cast<emulation::EmulatedStream*>(*stream)->enqueue([&open] {
      const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!open.load() && std::chrono::steady_clock::now() < limit) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    ncclResult_t result = ncclAllReduce(*in, *out, kCount, ncclFloat32, ncclSum, comm,
                                        static_cast<cudaStream_t>(*stream));
    const bool returnedWhileHeld = !open.load();
    // Nothing may have run yet: the collective is behind the gate on the stream.
    const bool untouched =
        std::vector<uint8_t>(static_cast<uint8_t*>(*out), static_cast<uint8_t*>(*out) + bytes) ==
        std::vector<uint8_t>(bytes, 0);
    open.store(true);
    Result<DeviceEvent> event = device.recordEvent(*stream);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!device.queryEvent(*event) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::vector<uint8_t> expected =
        testing::expectedReduction(DataType::kFloat32, ReduceOp::kSum, kRanks, 0, kCount);
    if (result != ncclSuccess) {
      failures[r] = std::string("ncclAllReduce: ") + ncclGetErrorString(result);
    } else if (!returnedWhileHeld || !untouched) {
      failures[r] = "ncclAllReduce did not return before its stream ran";
    } else if (!device.queryEvent(*event)) {
      failures[r] = "the stream did not finish";
    } else if (std::memcmp(*out, expected.data(), bytes) != 0) {
      failures[r] = "wrong bytes";
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    if (failures[r].empty() && async != ncclSuccess) failures[r] = "async error after success";
    device.destroyEvent(*event);
    device.destroyStream(*stream);
    ncclCommDestroy(comm);
    device.free(*in);
    device.free(*out);
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
  unsetenv("COLLIE_DEVICE_EMULATION");
  unsetenv("COLLIE_TIMEOUT");
}

}  // namespace
}  // namespace collie
