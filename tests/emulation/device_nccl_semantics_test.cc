// NCCL's CUDA semantics of collie's NCCL API on the emulated device runtime
// (COLLIE_DEVICE_EMULATION=1), ranks as threads; nothing here runs on a GPU:
//   - a call returns once its kernels are enqueued on the caller's stream;
//   - a communicator is bound to the device current at init (also for a non-blocking
//     init, which runs on a thread of its own, and for ncclCommInitAll's devlist), and
//     ncclCommCuDevice returns it;
//   - ncclMemAlloc returns device memory; a PreMulSum factor in device memory
//     (ncclScalarDevice) is read when each collective runs;
//   - a group of device calls (all-reduce, all-to-all, sends and receives) returns from
//     ncclGroupEnd before its stream ran; the results are there once the stream passed;
//   - a peer that never joins a collective becomes ncclCommGetAsyncError's error, naming
//     it, while nothing waits on the host; ncclCommAbort returns at once even with a
//     kernel waiting for that peer;
//   - a group captured into a (emulated) CUDA graph replays correctly 100 times;
//   - ranks that window-register unlike memory (device, host, none) all fail naming one.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collie/nccl.h"
#include "core/device/device_runtime.h"
#include "kernels/cuda/emulation/emulated_stream.h"
#include "support/emulated_device.h"
#include "support/quick_matrix.h"
#include "support/rank_threads.h"
#include "support/reference.h"

namespace collie {
namespace {

using Clock = std::chrono::steady_clock;

DeviceRuntime& device() { return testing::emulatedDevice(); }

// The NCCL API reads collie's knobs from the environment at init.
class Environment {
 public:
  explicit Environment(const char* timeout) {
    setenv("COLLIE_DEVICE_EMULATION", "1", 1);
    setenv("COLLIE_TIMEOUT", timeout, 1);
  }
  ~Environment() {
    unsetenv("COLLIE_DEVICE_EMULATION");
    unsetenv("COLLIE_TIMEOUT");
  }
};

// Device memory of `count` floats holding `fill` + index.
float* deviceFloats(size_t count, float fill) {
  Result<void*> p = device().allocate(count * sizeof(float));
  EXPECT_TRUE(p.isOk()) << p.status().toString();
  auto* f = static_cast<float*>(*p);
  for (size_t i = 0; i < count; ++i) f[i] = fill + static_cast<float>(i);
  return f;
}

// Holds an emulated stream until open() (or 10 s, so that a call that blocks on its
// stream fails the test instead of hanging it).
class Gate {
 public:
  explicit Gate(DeviceStream stream) {
    static_cast<emulation::EmulatedStream*>(stream)->enqueue([this] {
      const auto limit = Clock::now() + std::chrono::seconds(10);
      while (!open_.load() && Clock::now() < limit) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  void open() { open_.store(true); }
  bool isOpen() const { return open_.load(); }

 private:
  std::atomic<bool> open_{false};
};

bool drain(DeviceStream stream) {
  Result<DeviceEvent> event = device().recordEvent(stream);
  if (!event.isOk()) return false;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!device().queryEvent(*event) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool done = device().queryEvent(*event);
  device().destroyEvent(*event);
  return done;
}

// Runs body(rank, comm) on `nranks` ranks as threads, each on a communicator of its own
// (one job; destroyed after body returns), and expects every body to return "".
void onEveryRankWithComm(int nranks, const std::function<std::string(int, ncclComm_t)>& body) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<std::string> failures(nranks);
  testing::onEveryRank(nranks, [&](int r) {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, nranks, id, r) != ncclSuccess) {
      failures[r] = "ncclCommInitRank failed";
      return;
    }
    failures[r] = body(r, comm);
    ncclCommDestroy(comm);
  });
  for (int r = 0; r < nranks; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

// Outside a group: ncclAllReduce returns once its kernels are enqueued on the caller's
// stream (held shut here, nothing written yet), and the result is there, exact, once
// the stream passed them.
TEST(DeviceNcclSemantics, AllReduceReturnsOnceEnqueuedOnTheStream) {
  Environment environment("30s");
  constexpr int kRanks = 3;
  constexpr size_t kCount = 3'001;
  const size_t bytes = kCount * sizeof(float);
  onEveryRankWithComm(kRanks, [&](int r, ncclComm_t comm) {
    std::string failure;
    DeviceStream stream = *device().createStream();
    void* in = *device().allocate(bytes);
    void* out = *device().allocate(bytes);
    std::vector<uint8_t> input = testing::makeInput(DataType::kFloat32, ReduceOp::kSum, r, kCount);
    std::memcpy(in, input.data(), bytes);
    Gate gate(stream);
    ncclResult_t result = ncclAllReduce(in, out, kCount, ncclFloat32, ncclSum, comm,
                                        static_cast<cudaStream_t>(stream));
    const bool returnedFirst = !gate.isOpen();
    const bool untouched =
        std::vector<uint8_t>(static_cast<uint8_t*>(out), static_cast<uint8_t*>(out) + bytes) ==
        std::vector<uint8_t>(bytes, 0);
    gate.open();
    std::vector<uint8_t> expected =
        testing::expectedReduction(DataType::kFloat32, ReduceOp::kSum, kRanks, 0, kCount);
    if (result != ncclSuccess) {
      failure = std::string("ncclAllReduce: ") + ncclGetErrorString(result);
    } else if (!returnedFirst || !untouched) {
      failure = "ncclAllReduce did not return before its stream ran";
    } else if (!drain(stream)) {
      failure = "the stream did not finish";
    } else if (std::memcmp(out, expected.data(), bytes) != 0) {
      failure = "wrong bytes";
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    if (failure.empty() && async != ncclSuccess) failure = "async error after success";
    device().destroyStream(stream);
    device().free(in);
    device().free(out);
    return failure;
  });
}

TEST(DeviceNcclSemantics, CommunicatorsAreBoundToTheDeviceCurrentAtInit) {
  Environment environment("30s");
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<int> bound(2, -2);
  std::vector<std::string> failures(2);
  testing::onEveryRank(2, [&](int r) {
    // Non-blocking: the init runs on a thread of its own, which must take this
    // thread's device.
    ASSERT_TRUE(device().setCurrentDevice(r + 2).isOk());
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    ncclResult_t started = ncclCommInitRankConfig(&comm, 2, id, r, &config);
    if (started != ncclSuccess && started != ncclInProgress) {
      failures[r] = std::string("init: ") + ncclGetErrorString(started);
      return;
    }
    ncclResult_t state = ncclInProgress;
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (state == ncclInProgress && Clock::now() < deadline) {
      ncclCommGetAsyncError(comm, &state);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (state != ncclSuccess) failures[r] = std::string("init: ") + ncclGetErrorString(state);
    if (ncclCommCuDevice(comm, &bound[r]) != ncclSuccess) failures[r] = "ncclCommCuDevice failed";
    // A child made on a thread whose current device is another one keeps the parent's.
    ASSERT_TRUE(device().setCurrentDevice(7).isOk());
    ncclComm_t child = nullptr;
    int childDevice = -2;
    if (ncclCommSplit(comm, 0, r, &child, nullptr) != ncclSuccess ||
        ncclCommCuDevice(child, &childDevice) != ncclSuccess || childDevice != r + 2) {
      failures[r] += " split: child on device " + std::to_string(childDevice);
    }
    if (*device().currentDevice() != 7) failures[r] += " split changed the caller's device";
    if (child != nullptr) ncclCommDestroy(child);
    ncclCommDestroy(comm);
    ASSERT_TRUE(device().setCurrentDevice(0).isOk());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(failures[r], "") << "rank " << r;
    EXPECT_EQ(bound[r], r + 2) << "rank " << r;
  }

  // ncclCommInitAll: communicator i on devlist[i]; the caller's device is kept.
  ASSERT_TRUE(device().setCurrentDevice(1).isOk());
  ncclComm_t comms[2] = {nullptr, nullptr};
  const int devlist[2] = {3, 6};
  ASSERT_EQ(ncclCommInitAll(comms, 2, devlist), ncclSuccess) << ncclGetLastError(nullptr);
  for (int i = 0; i < 2; ++i) {
    int ordinal = -2;
    EXPECT_EQ(ncclCommCuDevice(comms[i], &ordinal), ncclSuccess);
    EXPECT_EQ(ordinal, devlist[i]) << "communicator " << i;
    ncclCommDestroy(comms[i]);
  }
  EXPECT_EQ(*device().currentDevice(), 1);
  // A device that does not exist is refused before any rank starts.
  const int bad[2] = {0, 99};
  EXPECT_EQ(ncclCommInitAll(comms, 2, bad), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("devlist[1]"), std::string::npos)
      << ncclGetLastError(nullptr);
  ASSERT_TRUE(device().setCurrentDevice(0).isOk());
}

TEST(DeviceNcclSemantics, MemAllocReturnsDeviceMemory) {
  Environment environment("30s");
  void* memory = nullptr;
  ASSERT_EQ(ncclMemAlloc(&memory, 1 << 20), ncclSuccess);
  EXPECT_TRUE(device().isDevicePointer(memory));
  EXPECT_TRUE(device().isDevicePointer(static_cast<uint8_t*>(memory) + (1 << 20) - 1));
  EXPECT_EQ(ncclMemFree(memory), ncclSuccess);
  EXPECT_FALSE(device().isDevicePointer(memory));
}

// One group per rank of three: an all-reduce, an all-to-all, a send to the next rank
// and a receive from the previous one (4 KiB slots: the all-to-all and the messages
// are several chunks), all on a stream held shut: ncclGroupEnd must return first.
TEST(DeviceNcclSemantics, GroupEndReturnsBeforeTheStreamRuns) {
  Environment environment("30s");
  setenv("COLLIE_DEVICE_SLOT_BYTES", "4096", 1);
  constexpr int kRanks = 3;
  constexpr size_t kCount = 5'000;
  onEveryRankWithComm(kRanks, [&](int r, ncclComm_t comm) {
    std::string failure;
    DeviceStream stream = *device().createStream();
    float* reduceIn = deviceFloats(kCount, static_cast<float>(r));
    float* reduceOut = deviceFloats(kCount, 0);
    float* a2aIn = deviceFloats(kCount * kRanks, 1000.0f * static_cast<float>(r));
    float* a2aOut = deviceFloats(kCount * kRanks, 0);
    float* sendBuf = deviceFloats(kCount, 7000.0f * static_cast<float>(r));
    float* recvBuf = deviceFloats(kCount, 0);
    Gate gate(stream);
    auto* s = static_cast<cudaStream_t>(stream);
    ncclGroupStart();
    ncclAllReduce(reduceIn, reduceOut, kCount, ncclFloat32, ncclSum, comm, s);
    ncclAlltoAll(a2aIn, a2aOut, kCount, ncclFloat32, comm, s);
    ncclSend(sendBuf, kCount, ncclFloat32, (r + 1) % kRanks, comm, s);
    ncclRecv(recvBuf, kCount, ncclFloat32, (r + kRanks - 1) % kRanks, comm, s);
    ncclResult_t ended = ncclGroupEnd();
    const bool returnedFirst = !gate.isOpen();
    gate.open();
    if (ended != ncclSuccess) {
      failure = std::string("ncclGroupEnd: ") + ncclGetLastError(comm);
    } else if (!returnedFirst) {
      failure = "ncclGroupEnd waited for the stream";
    } else if (!drain(stream)) {
      failure = "the stream did not finish";
    } else {
      const int prev = (r + kRanks - 1) % kRanks;
      for (size_t i = 0; i < kCount && failure.empty(); ++i) {
        const float sum = static_cast<float>(0 + 1 + 2) + 3.0f * static_cast<float>(i);
        if (reduceOut[i] != sum) failure = "all-reduce element " + std::to_string(i);
        if (recvBuf[i] != 7000.0f * static_cast<float>(prev) + static_cast<float>(i)) {
          failure = "received element " + std::to_string(i);
        }
        for (int p = 0; p < kRanks && failure.empty(); ++p) {
          const float want = 1000.0f * static_cast<float>(p) + static_cast<float>(r * kCount + i);
          if (a2aOut[p * kCount + i] != want) {
            failure = "all-to-all block " + std::to_string(p) + " element " + std::to_string(i);
          }
        }
      }
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    if (failure.empty() && async != ncclSuccess) failure = "async error after success";
    device().destroyStream(stream);
    for (float* f : {reduceIn, reduceOut, a2aIn, a2aOut, sendBuf, recvBuf}) device().free(f);
    return failure;
  });
  unsetenv("COLLIE_DEVICE_SLOT_BYTES");
}

// Two ranks: rank 1 joins the communicator and then stays silent (it never issues the
// collective) until rank 0 ran `body` on its communicator and device buffers of 1024
// floats; then both abort. Returns rank 0's failure ("" when none).
std::string withSilentPeer(const char* timeout,
                           const std::function<std::string(ncclComm_t, float*, float*)>& body) {
  Environment environment(timeout);
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return "ncclGetUniqueId failed";
  std::atomic<bool> rank0Done{false};
  std::string failure;
  testing::onEveryRank(2, [&](int r) {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 2, id, r) != ncclSuccess) {
      if (r == 0) failure = "ncclCommInitRank failed";
      rank0Done = true;
      return;
    }
    if (r == 1) {
      while (!rank0Done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ncclCommAbort(comm);
      return;
    }
    float* in = deviceFloats(1024, 1);
    float* out = deviceFloats(1024, 0);
    failure = body(comm, in, out);  // aborts comm
    rank0Done = true;
    device().free(in);
    device().free(out);
  });
  return failure;
}

// Rank 1 joins the communicator but never the all-reduce. Rank 0's call returns at
// once; without anyone waiting on the host, ncclCommGetAsyncError turns into
// ncclRemoteError naming rank 1 once the kernel's deadline (COLLIE_TIMEOUT, 2 s) passed.
TEST(DeviceNcclSemantics, AsyncErrorNamesThePeerWhileNothingWaits) {
  double seconds = 0;
  const std::string failure = withSilentPeer("2s", [&](ncclComm_t comm, float* in, float* out) {
    const auto start = Clock::now();
    ncclResult_t issued = ncclAllReduce(in, out, 1024, ncclFloat32, ncclSum, comm, nullptr);
    ncclResult_t async = ncclSuccess;
    while (issued == ncclSuccess && async == ncclSuccess &&
           Clock::now() - start < std::chrono::seconds(20)) {
      ncclCommGetAsyncError(comm, &async);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const std::string text = ncclGetLastError(comm);
    ncclCommAbort(comm);
    if (issued != ncclSuccess) return std::string("ncclAllReduce: ") + ncclGetErrorString(issued);
    if (async != ncclRemoteError) return std::string("async error is ") + ncclGetErrorString(async);
    if (text.find("rank 1") == std::string::npos) return "the error does not name rank 1: " + text;
    return std::string();
  });
  EXPECT_EQ(failure, "");
  EXPECT_GE(seconds, 1.5);  // the kernel's deadline, not a host-side shortcut
}

// A 60 s timeout and a peer that never comes: ncclCommAbort ends the waiting kernel
// (the error word) and returns in well under the timeout.
TEST(DeviceNcclSemantics, AbortEndsKernelsWaitingForAPeer) {
  double abortSeconds = 0;
  const std::string failure = withSilentPeer("60s", [&](ncclComm_t comm, float* in, float* out) {
    DeviceStream stream = *device().createStream();
    std::string why;
    if (ncclAllReduce(in, out, 1024, ncclFloat32, ncclSum, comm,
                      static_cast<cudaStream_t>(stream)) != ncclSuccess) {
      why = "ncclAllReduce failed to issue";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the kernel waits now
    const auto start = Clock::now();
    if (ncclCommAbort(comm) != ncclSuccess) why = "ncclCommAbort failed";
    if (!drain(stream)) why = "the stream did not drain after the abort";
    abortSeconds = std::chrono::duration<double>(Clock::now() - start).count();
    device().destroyStream(stream);
    return why;
  });
  EXPECT_EQ(failure, "");
  EXPECT_LT(abortSeconds, 10.0);
}

// ncclRedOpCreatePreMulSum with ncclScalarDevice on device memory: the factor is read
// when each collective runs, so changing it between calls changes the result, on
// device buffers (the multiply kernel reads it) and on host buffers (copied at the
// call).
TEST(DeviceNcclSemantics, DeviceScalarIsReadWhenTheCollectiveRuns) {
  Environment environment("30s");
  constexpr size_t kCount = 1'000;
  onEveryRankWithComm(2, [&](int r, ncclComm_t comm) {
    std::string failure;
    DeviceStream stream = *device().createStream();
    auto* s = static_cast<cudaStream_t>(stream);
    float* factor = deviceFloats(1, 2.0f);
    float* in = deviceFloats(kCount, static_cast<float>(r + 1));
    float* out = deviceFloats(kCount, 0);
    std::vector<float> hostIn(kCount), hostOut(kCount);
    for (size_t i = 0; i < kCount; ++i) hostIn[i] = static_cast<float>(r + 1) + i;
    ncclRedOp_t op;
    if (ncclRedOpCreatePreMulSum(&op, factor, ncclFloat32, ncclScalarDevice, comm) != ncclSuccess) {
      failure = "ncclRedOpCreatePreMulSum failed";
      return failure;
    }
    // sum over ranks of (r + 1 + i) is 3 + 2i; each rank's factor is the same here.
    auto check = [&](const float* got, float f, const char* what) {
      for (size_t i = 0; i < kCount && failure.empty(); ++i) {
        if (got[i] != f * (3.0f + 2.0f * static_cast<float>(i))) {
          failure = std::string(what) + ": element " + std::to_string(i) + " is " +
                    std::to_string(got[i]) + ", factor " + std::to_string(f);
        }
      }
    };
    for (float f : {2.0f, 3.0f}) {
      *factor = f;  // emulated device memory: the host may write it while the stream idles
      if (ncclAllReduce(in, out, kCount, ncclFloat32, op, comm, s) != ncclSuccess ||
          !drain(stream)) {
        failure = "device all-reduce failed";
      }
      check(out, f, "device buffers");
      *factor = f + 3.0f;
      if (ncclAllReduce(hostIn.data(), hostOut.data(), kCount, ncclFloat32, op, comm, s) !=
          ncclSuccess) {
        failure = "host all-reduce failed";
      }
      check(hostOut.data(), f + 3.0f, "host buffers");
    }
    ncclRedOpDestroy(op, comm);
    device().destroyStream(stream);
    for (float* p : {factor, in, out}) device().free(p);
    return failure;
  });
}

// Each of three ranks captures one group (an all-reduce, an all-to-all, a send to the
// next rank and a receive from the previous one; 4 KiB slots, so every part is several
// messages) into a graph, then launches it 100 times with new inputs each time, with an
// eager all-reduce between some launches: every launch gives exactly the new results.
// The sanitizer runs (quick matrix) launch it 20 times: 100 took a minute under TSan.
// The message counts and the sequence number live on the device, so the recorded
// kernels compute their flags and slots afresh at each launch. The all-reduces run as
// board kernels, or (the board off) as ring programs of 4 KiB slices, whose FIFO counts
// live in the device windows, or as the direct kernel on buffers registered with
// ncclCommWindowRegister.
enum class AllReduceKernel { kBoard, kRingProgram, kDirect };
void capturedGroupReplaysAHundredTimes(AllReduceKernel kernel) {
  const bool ringProgram = kernel != AllReduceKernel::kBoard;
  Environment environment("30s");
  setenv("COLLIE_DEVICE_SLOT_BYTES", "4096", 1);
  if (ringProgram) {
    setenv("COLLIE_DEVICE_BOARD_BYTES", "0", 1);
    setenv("COLLIE_DEVICE_RING_SLICE_BYTES", "4096", 1);
  }
  constexpr int kRanks = 3;
  const size_t kCount = ringProgram ? 6'000 : 3'000;
  const int launches = testing::quickMatrix() ? 20 : 100;
  onEveryRankWithComm(kRanks, [&](int r, ncclComm_t comm) {
    std::string failure;
    DeviceStream stream = *device().createStream();
    auto* s = static_cast<cudaStream_t>(stream);
    auto* emulated = static_cast<emulation::EmulatedStream*>(stream);
    float* in = deviceFloats(kCount, 0);
    float* out = deviceFloats(kCount, 0);
    float* a2aIn = deviceFloats(kCount * kRanks, 0);
    float* a2aOut = deviceFloats(kCount * kRanks, 0);
    float* toNext = deviceFloats(kCount, 0);
    float* fromPrev = deviceFloats(kCount, 0);
    float* eager = deviceFloats(kCount, 0);
    const int next = (r + 1) % kRanks, prev = (r + kRanks - 1) % kRanks;
    ncclWindow_t windows[2] = {nullptr, nullptr};
    if (kernel == AllReduceKernel::kDirect &&
        (ncclCommWindowRegister(comm, in, kCount * sizeof(float), &windows[0],
                                NCCL_WIN_COLL_SYMMETRIC) != ncclSuccess ||
         ncclCommWindowRegister(comm, out, kCount * sizeof(float), &windows[1],
                                NCCL_WIN_COLL_SYMMETRIC) != ncclSuccess)) {
      return std::string("ncclCommWindowRegister: ") + ncclGetLastError(comm);
    }
    auto issueGroup = [&]() {
      ncclGroupStart();
      ncclAllReduce(in, out, kCount, ncclFloat32, ncclSum, comm, s);
      ncclAlltoAll(a2aIn, a2aOut, kCount, ncclFloat32, comm, s);
      ncclSend(toNext, kCount, ncclFloat32, next, comm, s);
      ncclRecv(fromPrev, kCount, ncclFloat32, prev, comm, s);
      return ncclGroupEnd();
    };
    // Once eagerly (the device scratch is allocated then), then captured.
    if (issueGroup() != ncclSuccess || !drain(stream)) {
      failure = "the eager group failed";
      return failure;
    }
    for (size_t i = 0; i < kCount; ++i) out[i] = -1.0f;
    emulated->beginCapture();
    const ncclResult_t captured = issueGroup();
    emulation::EmulatedStream::Graph graph = emulated->endCapture();
    if (captured != ncclSuccess) {
      failure = std::string("capture: ") + ncclGetLastError(comm);
    } else if (graph.empty() || out[0] != -1.0f) {
      failure = "the capture ran or recorded nothing";
    }
    for (int launch = 0; launch < launches && failure.empty(); ++launch) {
      const float base = 10.0f * static_cast<float>(launch);
      for (size_t i = 0; i < kCount; ++i) {
        in[i] = base + static_cast<float>(r) + static_cast<float>(i % 100);
        toNext[i] = base + 1000.0f * static_cast<float>(r) + static_cast<float>(i % 50);
      }
      for (size_t i = 0; i < kCount * kRanks; ++i) {
        a2aIn[i] = base + 100.0f * static_cast<float>(r) + static_cast<float>(i % 1000);
      }
      emulated->launch(graph);
      if (launch % 10 == 3 &&
          ncclAllReduce(eager, eager, kCount, ncclFloat32, ncclMax, comm, s) != ncclSuccess) {
        failure = "eager all-reduce between launches";
      }
      if (!drain(stream)) failure = "launch " + std::to_string(launch) + " did not finish";
      const std::string at = "launch " + std::to_string(launch) + ": ";
      for (size_t i = 0; i < kCount && failure.empty(); ++i) {
        const float sum = 3.0f * base + 3.0f + 3.0f * static_cast<float>(i % 100);
        if (out[i] != sum) failure = at + "all-reduce element " + std::to_string(i);
        const float got = base + 1000.0f * static_cast<float>(prev) + static_cast<float>(i % 50);
        if (fromPrev[i] != got) failure = at + "received element " + std::to_string(i);
        for (int p = 0; p < kRanks && failure.empty(); ++p) {
          const float want =
              base + 100.0f * static_cast<float>(p) + static_cast<float>((r * kCount + i) % 1000);
          if (a2aOut[p * kCount + i] != want) {
            failure =
                at + "all-to-all block " + std::to_string(p) + " element " + std::to_string(i);
          }
        }
      }
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    if (failure.empty() && async != ncclSuccess) {
      failure = std::string("async error: ") + ncclGetLastError(comm);
    }
    device().destroyStream(stream);
    for (ncclWindow_t window : windows) {
      if (window != nullptr && ncclCommWindowDeregister(comm, window) != ncclSuccess) {
        failure = std::string("ncclCommWindowDeregister: ") + ncclGetLastError(comm);
      }
    }
    for (float* f : {in, out, a2aIn, a2aOut, toNext, fromPrev, eager}) device().free(f);
    return failure;
  });
  unsetenv("COLLIE_DEVICE_SLOT_BYTES");
  unsetenv("COLLIE_DEVICE_BOARD_BYTES");
  unsetenv("COLLIE_DEVICE_RING_SLICE_BYTES");
}

TEST(DeviceNcclSemantics, CapturedGroupReplaysAHundredTimes) {
  capturedGroupReplaysAHundredTimes(AllReduceKernel::kBoard);
}

TEST(DeviceNcclSemantics, CapturedRingProgramReplaysAHundredTimes) {
  capturedGroupReplaysAHundredTimes(AllReduceKernel::kRingProgram);
}

// The all-reduce of the group on windows every rank registered: the direct kernel.
TEST(DeviceNcclSemantics, CapturedDirectKernelReplaysAHundredTimes) {
  capturedGroupReplaysAHundredTimes(AllReduceKernel::kDirect);
}

// ncclCommWindowRegister is collective: ranks that register different kinds of memory
// (device, host, nothing) all fail at once with ncclInvalidArgument naming the first
// rank unlike rank 0, instead of waiting in exchanges the others never join; the
// communicator works on, and registrations alike on every rank still succeed.
TEST(DeviceNcclSemantics, WindowRegisterOfUnlikeMemoryFailsEveryRankNamingIt) {
  Environment environment("20s");
  constexpr int kRanks = 3;
  constexpr size_t kCount = 4'096;
  const size_t bytes = kCount * sizeof(float);
  onEveryRankWithComm(kRanks, [&](int r, ncclComm_t comm) -> std::string {
    float* mine = deviceFloats(kCount, static_cast<float>(r));
    std::vector<float> host(kCount, 1.0f);
    auto refused = [&](void* buff, size_t size, const std::string& named) -> std::string {
      ncclWindow_t window = nullptr;
      const auto start = Clock::now();
      const ncclResult_t result =
          ncclCommWindowRegister(comm, buff, size, &window, NCCL_WIN_COLL_SYMMETRIC);
      const std::string error = ncclGetLastError(comm);
      if (result != ncclInvalidArgument) {
        return "registration returned " + std::to_string(result) + " (" + error + ")";
      }
      if (error.find(named) == std::string::npos) return "error without '" + named + "': " + error;
      if (Clock::now() - start > std::chrono::seconds(10)) return "the refusal waited";
      return window == nullptr ? "" : "a refused registration gave a window";
    };
    // Rank 1 offers host memory, the others device memory.
    std::string failure = refused(r == 1 ? static_cast<void*>(host.data()) : mine, bytes,
                                  "rank 1 registers host memory and rank 0 device memory");
    // Rank 2 offers nothing.
    if (failure.empty()) {
      failure = refused(mine, r == 2 ? 0 : bytes, "rank 2 registers nothing (size 0)");
    }
    // Alike on every rank: device windows, then an all-reduce on them.
    ncclWindow_t window = nullptr;
    if (failure.empty() && ncclCommWindowRegister(comm, mine, bytes, &window,
                                                  NCCL_WIN_COLL_SYMMETRIC) != ncclSuccess) {
      failure = std::string("registration alike: ") + ncclGetLastError(comm);
    }
    DeviceStream stream = *device().createStream();
    if (failure.empty() && ncclAllReduce(mine, mine, kCount, ncclFloat32, ncclSum, comm,
                                         static_cast<cudaStream_t>(stream)) != ncclSuccess) {
      failure = std::string("all-reduce: ") + ncclGetLastError(comm);
    }
    if (failure.empty() && !drain(stream)) failure = "the all-reduce did not finish";
    for (size_t i = 0; i < kCount && failure.empty(); ++i) {
      const float want = 3.0f * static_cast<float>(i) + 3.0f;  // ranks 0 + 1 + 2
      if (mine[i] != want) failure = "all-reduce element " + std::to_string(i);
    }
    if (window != nullptr && ncclCommWindowDeregister(comm, window) != ncclSuccess) {
      failure += std::string(" deregister: ") + ncclGetLastError(comm);
    }
    device().destroyStream(stream);
    device().free(mine);
    return failure;
  });
}

}  // namespace
}  // namespace collie
