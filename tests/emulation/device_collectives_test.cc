// The engine's device path on the emulated device runtime (COLLIE_DEVICE_EMULATION=1):
// ranks as threads, buffers from the emulated runtime (so the communicator sees device
// memory), every collective turned into step kernels on a stream and ordered by
// flags in the ranks' exchanged regions. Checks bytes against the exact references
// of tests/support, every rank identical, stream order, back-to-back in-place calls
// (slot flow control), chunked sizes, and a peer that never arrives (Timeout naming
// it, no hang). Nothing here runs on a GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "core/device/device_runtime.h"
#include "device_case_runner.h"
#include "kernels/cuda/emulation/emulated_runtime.h"
#include "kernels/cuda/emulation/emulated_stream.h"
#include "support/emulated_device.h"
#include "support/rank_threads.h"
#include "support/reference.h"

namespace collie {
namespace {

using testing::expectedReduction;
using testing::makeInput;

using testing::Case;
using testing::describe;
using testing::DeviceBuffer;
using testing::runOne;
using testing::runtime;

class DeviceCollectivesTest : public ::testing::Test {
 public:
  static std::vector<std::unique_ptr<Communicator>> comms(int nranks, Algorithm algorithm,
                                                          std::chrono::milliseconds timeout,
                                                          bool hostPerRank = false) {
    return testing::deviceComms(nranks, algorithm, timeout, hostPerRank);
  }
};

using testing::Failures;

void runMatrix(int nranks, Algorithm algorithm, const std::vector<Case>& cases,
               bool hostPerRank = false) {
  auto comm =
      DeviceCollectivesTest::comms(nranks, algorithm, std::chrono::seconds(30), hostPerRank);
  ASSERT_EQ(comm.size(), static_cast<size_t>(nranks));
  if (hostPerRank) {
    for (int peer = 1; peer < nranks; ++peer) ASSERT_EQ(comm[0]->transportTo(peer), "tcp");
  }
  const uint64_t launchesBefore = emulatedKernelLaunches();
  const uint64_t copiesBefore = emulatedCopies();
  Failures failures;
  std::vector<std::vector<std::vector<uint8_t>>> outputs(nranks);
  testing::onEveryRank(nranks, [&](int r) {
    for (const Case& c : cases) {
      std::optional<std::vector<uint8_t>> out = runOne(*comm[r], c, &failures);
      outputs[r].push_back(out.value_or(std::vector<uint8_t>()));
    }
  });
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
  // Every collective ran as step kernels (the host engine would give the same bytes:
  // emulated device memory is host memory).
  if (!hostPerRank) {
    EXPECT_GE(emulatedKernelLaunches() - launchesBefore, cases.size() * (nranks - 1));
  } else {
    // Staging: a copy to host memory and one back per collective (non-roots of a
    // reduce copy nothing back).
    EXPECT_GE(emulatedCopies() - copiesBefore, cases.size() * nranks);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    if (cases[i].kind != CollectiveKind::kAllReduce) continue;
    for (int r = 1; r < nranks; ++r) {
      EXPECT_EQ(outputs[r][i], outputs[0][i]) << describe(cases[i], r) << " differs from rank 0";
    }
  }
}

std::vector<Case> everyCollective() {
  std::vector<Case> cases;
  const CollectiveKind kinds[] = {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                                  CollectiveKind::kAllGather, CollectiveKind::kBroadcast,
                                  CollectiveKind::kReduce};
  const std::pair<DataType, ReduceOp> typed[] = {{DataType::kFloat32, ReduceOp::kSum},
                                                 {DataType::kInt32, ReduceOp::kMax},
                                                 {DataType::kBFloat16, ReduceOp::kAvg},
                                                 {DataType::kUint8, ReduceOp::kProd},
                                                 {DataType::kFloat64, ReduceOp::kMin}};
  for (CollectiveKind kind : kinds) {
    for (auto [dtype, op] : typed) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{1021}}) {
        for (bool inPlace : {false, true}) cases.push_back({kind, dtype, op, count, inPlace});
      }
    }
    // Larger than one 64 KiB slot per rank: several chunks, slots reused.
    cases.push_back({kind, DataType::kFloat32, ReduceOp::kSum, 40'000, false});
  }
  return cases;
}

TEST_F(DeviceCollectivesTest, EveryCollectiveTwoRanks) {
  runMatrix(2, Algorithm::kRing, everyCollective());
}
TEST_F(DeviceCollectivesTest, EveryCollectiveThreeRanks) {
  runMatrix(3, Algorithm::kRing, everyCollective());
}
TEST_F(DeviceCollectivesTest, EveryCollectiveFourRanks) {
  runMatrix(4, Algorithm::kRing, everyCollective());
}

TEST_F(DeviceCollectivesTest, TreeAllReduce) {
  std::vector<Case> cases;
  for (size_t count : {size_t{1}, size_t{1021}, size_t{40'000}}) {
    cases.push_back({CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, count, false});
    cases.push_back({CollectiveKind::kAllReduce, DataType::kInt64, ReduceOp::kMax, count, true});
  }
  for (int nranks : {2, 3, 4}) runMatrix(nranks, Algorithm::kTree, cases);
}

// Ranks on different hosts: device buffers go device -> pinned host -> tcp -> device.
TEST_F(DeviceCollectivesTest, AcrossHostsStagedThroughHostMemory) {
  std::vector<Case> cases;
  for (const Case& c : everyCollective()) {
    if (c.count != 7) cases.push_back(c);
  }
  runMatrix(3, Algorithm::kRing, cases, true);
}

// Back-to-back in-place all-reduces on one buffer, waited for only at the end: the
// "slot free" flags must hold every sender until its receiver read the slot.
TEST_F(DeviceCollectivesTest, RepeatedInPlaceWithoutWaiting) {
  constexpr int kRanks = 3;
  constexpr int kRepeats = 6;
  constexpr size_t kCount = 20'000;  // 80 KB: two chunks per call
  auto comm = comms(kRanks, Algorithm::kRing, std::chrono::seconds(30));
  ASSERT_EQ(comm.size(), static_cast<size_t>(kRanks));
  Failures failures;
  testing::onEveryRank(kRanks, [&](int r) {
    DeviceBuffer buffer(kCount * sizeof(int32_t));
    buffer.write(makeInput(DataType::kInt32, ReduceOp::kSum, r, kCount));
    std::vector<Work> works;
    for (int i = 0; i < kRepeats; ++i) {
      Result<Work> work =
          comm[r]->allReduce(buffer.get(), buffer.get(), kCount, DataType::kInt32, ReduceOp::kSum);
      if (!work.isOk()) return failures.add(work.status().toString());
      works.push_back(*work);
    }
    for (Work& w : works) {
      Status s = w.wait(std::chrono::seconds(60));
      if (!s.isOk()) return failures.add(s.toString());
    }
    std::vector<uint8_t> expected =
        expectedReduction(DataType::kInt32, ReduceOp::kSum, kRanks, 0, kCount);
    const int32_t* got = reinterpret_cast<const int32_t*>(buffer.get());
    const int32_t* want = reinterpret_cast<const int32_t*>(expected.data());
    int64_t scale = 1;
    for (int i = 1; i < kRepeats; ++i) scale *= kRanks;
    for (size_t i = 0; i < kCount; ++i) {
      if (got[i] != want[i] * scale) {
        return failures.add("rank " + std::to_string(r) + ": element " + std::to_string(i) +
                            " is " + std::to_string(got[i]) + ", expected " +
                            std::to_string(want[i] * scale));
      }
    }
  });
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
}

// Work on the caller's stream runs in stream order: the stream is held by a gate (an
// item the emulated stream runs first), then a copy that fills the input, the
// collective and the copy of the result are enqueued. Until the gate opens nothing
// may have happened; afterwards the host looks only after the stream passed an event.
TEST_F(DeviceCollectivesTest, RunsInStreamOrder) {
  constexpr int kRanks = 2;
  constexpr size_t kCount = 5'000;
  auto comm = comms(kRanks, Algorithm::kRing, std::chrono::seconds(30));
  ASSERT_EQ(comm.size(), static_cast<size_t>(kRanks));
  Failures failures;
  testing::onEveryRank(kRanks, [&](int r) {
    Result<DeviceStream> stream = runtime().createStream();
    if (!stream.isOk()) return failures.add(stream.status().toString());
    std::atomic<bool> open{false};
    static_cast<emulation::EmulatedStream*>(*stream)->enqueue([&open] {
      while (!open.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    const size_t bytes = kCount * sizeof(float);
    DeviceBuffer input(bytes);
    DeviceBuffer output(bytes);
    std::vector<uint8_t> source = makeInput(DataType::kFloat32, ReduceOp::kSum, r, kCount);
    std::vector<uint8_t> result(bytes, 0);
    Status s = runtime().memcpyAsync(input.get(), source.data(), bytes, *stream);
    Result<Work> work = comm[r]->allReduce(input.get(), output.get(), kCount, DataType::kFloat32,
                                           ReduceOp::kSum, *stream);
    if (!work.isOk()) return failures.add(work.status().toString());
    s = runtime().memcpyAsync(result.data(), output.get(), bytes, *stream);
    Result<DeviceEvent> event = runtime().recordEvent(*stream);
    if (!s.isOk() || !event.isOk()) return failures.add("enqueue failed");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(work->test()) << "the collective ran before the work ahead of it on the stream";
    EXPECT_EQ(output.read(0, bytes), std::vector<uint8_t>(bytes, 0));
    open.store(true);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!runtime().queryEvent(*event) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!runtime().queryEvent(*event)) return failures.add("stream did not finish");
    runtime().destroyEvent(*event);
    runtime().destroyStream(*stream);
    EXPECT_TRUE(work->test()) << "the Work completes with the stream";
    EXPECT_TRUE(work->status().isOk()) << work->status().toString();
    if (result != expectedReduction(DataType::kFloat32, ReduceOp::kSum, kRanks, 0, kCount)) {
      failures.add("rank " + std::to_string(r) + ": wrong bytes after the stream's copies");
    }
  });
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
}

// Rank 1 never issues the collective: rank 0's kernels time out on the device, the
// Work fails with Timeout naming rank 1, and the failure is sticky.
TEST_F(DeviceCollectivesTest, PeerThatNeverArrivesTimesOutNamingIt) {
  auto comm = comms(2, Algorithm::kRing, std::chrono::milliseconds(800));
  ASSERT_EQ(comm.size(), 2u);
  DeviceBuffer input(4096 * sizeof(float));
  DeviceBuffer output(4096 * sizeof(float));
  const auto start = std::chrono::steady_clock::now();
  Result<Work> work =
      comm[0]->allReduce(input.get(), output.get(), 4096, DataType::kFloat32, ReduceOp::kSum);
  ASSERT_TRUE(work.isOk()) << work.status().toString();
  Status status = work->wait(std::chrono::seconds(30));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(status.code(), StatusCode::kTimeout) << status.toString();
  EXPECT_EQ(status.peer(), 1) << status.toString();
  EXPECT_NE(status.message().find("rank 1"), std::string::npos) << status.toString();
  EXPECT_LT(elapsed, std::chrono::seconds(10));
  Result<Work> next =
      comm[0]->allReduce(input.get(), output.get(), 4096, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_FALSE(next.isOk() && next->wait(std::chrono::seconds(30)).isOk())
      << "the device failure must be sticky";
}

// Rank 1 issues another collective than the others (count, dtype, op, root or kind):
// the fingerprint check that opens every device collective fails every rank with
// Mismatch naming a peer and both sides, before any output byte is written, and well
// before the timeout.
struct MismatchCase {
  const char* what;
  Case others;
  Case rank1;
  int root1;          // rank 1's root (the others use 0)
  const char* field;  // the differing field, as describeMismatch names it
};

TEST_F(DeviceCollectivesTest, MismatchFailsEveryRankBeforeWriting) {
  const Case sum{CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 1024, false};
  const Case bcast{CollectiveKind::kBroadcast, DataType::kFloat32, ReduceOp::kSum, 1024, false};
  const MismatchCase cases[] = {
      {"count",
       sum,
       {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 1000, false},
       0,
       "count"},
      {"dtype",
       sum,
       {CollectiveKind::kAllReduce, DataType::kInt32, ReduceOp::kSum, 1024, false},
       0,
       "dtype"},
      {"op",
       sum,
       {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kMax, 1024, false},
       0,
       "op"},
      // Rank 1's premulsum scales its input (into scratch) before the check fails: the
      // output must still be untouched.
      {"premulsum op",
       sum,
       {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kPreMulSum, 1024, false},
       0,
       "op"},
      {"root", bcast, bcast, 2, "root"},
      {"kind", sum, bcast, 0, "kind"},
  };
  constexpr int kRanks = 3;
  constexpr size_t kBytes = 1024 * sizeof(float);
  for (const MismatchCase& m : cases) {
    SCOPED_TRACE(m.what);
    auto comm = comms(kRanks, Algorithm::kRing, std::chrono::seconds(30));
    ASSERT_EQ(comm.size(), static_cast<size_t>(kRanks));
    std::vector<std::unique_ptr<DeviceBuffer>> input, output;
    for (int r = 0; r < kRanks; ++r) {
      input.push_back(std::make_unique<DeviceBuffer>(kBytes));
      output.push_back(std::make_unique<DeviceBuffer>(kBytes));
      input[r]->write(std::vector<uint8_t>(kBytes, 0x11));
      output[r]->write(std::vector<uint8_t>(kBytes, 0xEE));
    }
    std::vector<Status> status(kRanks);
    const auto start = std::chrono::steady_clock::now();
    testing::onEveryRank(kRanks, [&](int r) {
      const Case& c = r == 1 ? m.rank1 : m.others;
      const int root = r == 1 ? m.root1 : 0;
      Result<Work> work =
          c.kind == CollectiveKind::kBroadcast
              ? comm[r]->broadcast(input[r]->get(), output[r]->get(), c.count, c.dtype, root)
          : c.op == ReduceOp::kPreMulSum
              ? comm[r]->allReduce(input[r]->get(), output[r]->get(), c.count, c.dtype, c.op,
                                   scalarOf(2.0, c.dtype))
              : comm[r]->allReduce(input[r]->get(), output[r]->get(), c.count, c.dtype, c.op);
      status[r] = work.isOk() ? work->wait(std::chrono::seconds(30)) : work.status();
    });
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << "no hang";
    for (int r = 0; r < kRanks; ++r) {
      const Status& s = status[r];
      EXPECT_EQ(s.code(), StatusCode::kMismatch) << "rank " << r << ": " << s.toString();
      // Rank 1 disagrees with everyone; the others disagree with rank 1.
      if (r != 1) {
        EXPECT_EQ(s.peer(), 1) << s.toString();
      }
      EXPECT_NE(s.message().find(std::string(m.field) + " differs"), std::string::npos)
          << s.toString();
      EXPECT_NE(s.message().find("this rank collective #0"), std::string::npos) << s.toString();
      EXPECT_EQ(output[r]->read(0, kBytes), std::vector<uint8_t>(kBytes, 0xEE))
          << "rank " << r << " wrote output despite the mismatch";
    }
  }
}

// The device path gets its windows from the transport that offers them (cuda_ipc),
// even when COLLIE_TRANSPORT forces tcp for host messages; forcing cuda_ipc itself
// fails, naming what to force instead.
TEST_F(DeviceCollectivesTest, DeviceWindowsComeFromTheirTransport) {
  Options options = testing::emulatedDeviceOptions();
  options.transport = "tcp";
  auto comm = testing::makeCommunicators(2, options);
  ASSERT_EQ(comm.size(), 2u);
  EXPECT_EQ(comm[0]->transportTo(1), "tcp");
  const uint64_t launchesBefore = emulatedKernelLaunches();
  const uint64_t copiesBefore = emulatedCopies();
  Failures failures;
  const Case c{CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 1021, false};
  testing::onEveryRank(2, [&](int r) { runOne(*comm[r], c, &failures); });
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
  EXPECT_GE(emulatedKernelLaunches() - launchesBefore, 2u) << "ran as step kernels";
  EXPECT_EQ(emulatedCopies() - copiesBefore, 0u) << "not staged through host memory";

  options.transport = "cuda_ipc";
  options.store = makeInMemoryStore();
  Result<std::unique_ptr<Communicator>> forced =
      Communicator::create(testing::testUniqueId(), 0, 1, options);
  ASSERT_FALSE(forced.isOk());
  EXPECT_NE(forced.status().message().find("shm or tcp"), std::string::npos)
      << forced.status().toString();
}

TEST_F(DeviceCollectivesTest, MixedHostAndDeviceBuffersAreRejected) {
  auto comm = comms(1, Algorithm::kRing, std::chrono::seconds(10));
  ASSERT_EQ(comm.size(), 1u);
  DeviceBuffer device(64);
  std::vector<float> host(16);
  Result<Work> work =
      comm[0]->allReduce(device.get(), host.data(), 16, DataType::kFloat32, ReduceOp::kSum);
  ASSERT_FALSE(work.isOk());
  EXPECT_EQ(work.status().code(), StatusCode::kInvalidArgument) << work.status().toString();
}

}  // namespace
}  // namespace collie
