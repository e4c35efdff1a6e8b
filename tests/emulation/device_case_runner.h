// Test support for the device path on the emulated device runtime (ranks as threads):
// device buffers, the options that select the emulation, communicators, and one
// collective run on device buffers and checked against the exact references of
// tests/support (device_collectives_test.cc, device_board_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/device/device_runtime.h"
#include "kernels/cuda/emulation/emulated_runtime.h"
#include "support/emulated_device.h"
#include "support/quick_matrix.h"
#include "support/rank_threads.h"
#include "support/reference.h"

namespace collie::testing {

inline DeviceRuntime& runtime() { return testing::emulatedDevice(); }

// Rank counts of a test: the sanitizer runs (quick matrix) keep the first of the list.
inline std::vector<int> rankCounts(std::initializer_list<int> all) {
  if (quickMatrix()) return {*all.begin()};
  return all;
}

// A device buffer of the emulated runtime, freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    Result<void*> p = runtime().allocate(bytes);
    EXPECT_TRUE(p.isOk()) << p.status().toString();
    ptr_ = static_cast<uint8_t*>(p.isOk() ? *p : nullptr);
  }
  ~DeviceBuffer() { runtime().free(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint8_t* get() const { return ptr_; }
  // The emulated runtime's device memory is host memory: tests may read it directly
  // once the stream is past the writes.
  std::vector<uint8_t> read(size_t offset, size_t bytes) const {
    return std::vector<uint8_t>(ptr_ + offset, ptr_ + offset + bytes);
  }
  void write(const std::vector<uint8_t>& bytes, size_t offset = 0) {
    std::memcpy(ptr_ + offset, bytes.data(), bytes.size());
  }

 private:
  uint8_t* ptr_ = nullptr;
};

// Options whose communicators run the device path on the emulated runtime.
inline Options emulatedDeviceOptions() {
  Options options;
  options.config["COLLIE_DEVICE_EMULATION"] = "1";
  // 64 KiB slots (the default is 8 MiB): the cases of a few hundred KB then take
  // several chunks per peer and reuse slots, which is what the flow control tests need.
  options.config["COLLIE_DEVICE_SLOT_BYTES"] = "64K";
  return options;
}

// `hostPerRank`: every rank claims a host of its own, so ranks talk over tcp and
// device buffers are staged through host memory.
inline std::vector<std::unique_ptr<Communicator>> deviceComms(
    int nranks, Algorithm algorithm, std::chrono::milliseconds timeout, bool hostPerRank = false,
    Options options = emulatedDeviceOptions()) {
  options.algorithm = algorithm;
  options.timeout = timeout;
  if (!hostPerRank) return testing::makeCommunicators(nranks, options);
  options.transport = "tcp";
  return testing::makeCommunicators(nranks, options, [](int r, Options* mine) {
    mine->hostId = "emulated-host-" + std::to_string(r);
  });
}

using testing::Failures;

struct Case {
  CollectiveKind kind;
  DataType dtype;
  ReduceOp op;
  size_t count;
  bool inPlace;
};

// Five dtype/op pairs: float, integer, 16-bit float (an average), byte and double
// reductions.
inline constexpr std::pair<DataType, ReduceOp> kTypedCases[] = {
    {DataType::kFloat32, ReduceOp::kSum},
    {DataType::kInt32, ReduceOp::kMax},
    {DataType::kBFloat16, ReduceOp::kAvg},
    {DataType::kUint8, ReduceOp::kProd},
    {DataType::kFloat64, ReduceOp::kMin}};

// Every kind of `kinds` x kTypedCases x count, in place and not.
template <typename Kinds>
std::vector<Case> casesOf(const Kinds& kinds, std::initializer_list<size_t> counts) {
  std::vector<Case> cases;
  for (CollectiveKind kind : kinds) {
    for (auto [dtype, op] : kTypedCases) {
      for (size_t count : counts) {
        for (bool inPlace : {false, true}) cases.push_back({kind, dtype, op, count, inPlace});
      }
    }
  }
  return cases;
}

inline std::string describe(const Case& c, int rank) {
  return std::string(collectiveName(c.kind)) + " " + std::string(dataTypeName(c.dtype)) + " " +
         std::string(reduceOpName(c.op)) + " count=" + std::to_string(c.count) +
         (c.inPlace ? " in-place" : "") + " rank " + std::to_string(rank);
}

// Where runOne puts a case's input and output: device memory of its own (null), or the
// given addresses (room for the case's buffers; registered windows, device_direct_test).
struct Placement {
  uint8_t* input = nullptr;
  uint8_t* output = nullptr;
};

// Runs one collective on device buffers of this rank; returns its output bytes (the
// checked part), or records a failure and returns nothing.
inline std::optional<std::vector<uint8_t>> runOne(Communicator& comm, const Case& c,
                                                  Failures* failures, Placement at = {}) {
  const int n = comm.size();
  const int r = comm.rank();
  const size_t es = dataTypeSize(c.dtype);
  const int root = n - 1;
  const bool allToAll = c.kind == CollectiveKind::kAllToAll;
  const size_t inCount =
      c.kind == CollectiveKind::kReduceScatter || allToAll ? c.count * n : c.count;
  const size_t outCount = c.kind == CollectiveKind::kAllGather || allToAll ? c.count * n : c.count;
  std::optional<DeviceBuffer> ownInput, ownOutput;
  if (at.input == nullptr) at.input = ownInput.emplace(inCount * es + 1).get();
  if (at.output == nullptr) at.output = ownOutput.emplace(outCount * es + 1).get();
  std::vector<uint8_t> host = c.kind == CollectiveKind::kAllGather
                                  ? makeInput(c.dtype, c.op, 0, c.count, r * c.count)
                                  : makeInput(c.dtype, c.op, r, inCount);
  std::memset(at.output, 0xEE, outCount * es);
  std::memcpy(at.input, host.data(), host.size());
  const void* send = at.input;
  uint8_t* recv = at.output;
  size_t checkOffset = 0;
  if (c.inPlace) {
    switch (c.kind) {
      case CollectiveKind::kReduceScatter:
        recv = at.input + r * c.count * es;
        checkOffset = r * c.count * es;
        break;
      case CollectiveKind::kAllGather:
        std::memcpy(at.output + r * c.count * es, host.data(), host.size());
        send = at.output + r * c.count * es;
        break;
      default:
        std::memcpy(at.output, host.data(), host.size());
        send = at.output;
    }
  }
  Result<Work> work = invalidArgument("unset");
  switch (c.kind) {
    case CollectiveKind::kAllReduce:
      work = comm.allReduce(send, recv, c.count, c.dtype, c.op);
      break;
    case CollectiveKind::kReduceScatter:
      work = comm.reduceScatter(send, recv, c.count, c.dtype, c.op);
      break;
    case CollectiveKind::kAllGather:
      work = comm.allGather(send, recv, c.count, c.dtype);
      break;
    case CollectiveKind::kBroadcast:
      work = comm.broadcast(send, recv, c.count, c.dtype, root);
      break;
    case CollectiveKind::kReduce:
      work = comm.reduce(send, recv, c.count, c.dtype, c.op, root);
      break;
    case CollectiveKind::kAllToAll:
      work = comm.allToAll(send, recv, c.count, c.dtype);
      break;
    default:
      break;
  }
  const std::string what = describe(c, r);
  if (!work.isOk()) {
    failures->add(what + ": " + work.status().toString());
    return std::nullopt;
  }
  Status status = work->wait(std::chrono::seconds(60));
  if (!status.isOk()) {
    failures->add(what + ": " + status.toString());
    return std::nullopt;
  }
  std::vector<uint8_t> expected;
  switch (c.kind) {
    case CollectiveKind::kAllReduce:
      expected = expectedReduction(c.dtype, c.op, n, 0, c.count);
      break;
    case CollectiveKind::kReduceScatter:
      expected = expectedReduction(c.dtype, c.op, n, r * c.count, c.count);
      break;
    case CollectiveKind::kAllGather:
      expected = makeInput(c.dtype, c.op, 0, c.count * n);
      break;
    case CollectiveKind::kBroadcast:
      expected = makeInput(c.dtype, c.op, root, c.count);
      break;
    case CollectiveKind::kReduce:
      if (r != root) return std::vector<uint8_t>();
      expected = expectedReduction(c.dtype, c.op, n, 0, c.count);
      break;
    case CollectiveKind::kAllToAll:
      for (int q = 0; q < n; ++q) {  // block r of every rank's input
        const std::vector<uint8_t> theirs = makeInput(c.dtype, c.op, q, c.count * n);
        expected.insert(expected.end(), theirs.begin() + r * c.count * es,
                        theirs.begin() + (r + 1) * c.count * es);
      }
      break;
    default:
      break;
  }
  const uint8_t* checked =
      c.kind == CollectiveKind::kReduceScatter && c.inPlace ? at.input + checkOffset : at.output;
  std::vector<uint8_t> actual(checked, checked + expected.size());
  if (actual != expected) {
    size_t first = 0;
    while (first < actual.size() && actual[first] == expected[first]) ++first;
    failures->add(what + ": wrong bytes from element " + std::to_string(first / es));
    return std::nullopt;
  }
  return actual;
}

// Runs `cases` on every rank of fresh communicators; checks the bytes (runOne) and that
// every rank holds the same output of an all-reduce, all-gather or broadcast; returns
// the kernels launched. `prepare` (optional) runs once on every rank first and places
// every case's buffers.
inline uint64_t runCases(int nranks, Algorithm algorithm, const std::vector<Case>& cases,
                         const Options& options, std::chrono::milliseconds timeout,
                         const std::function<Placement(int, Communicator&)>& prepare = {}) {
  auto comm = deviceComms(nranks, algorithm, timeout, false, options);
  EXPECT_EQ(comm.size(), static_cast<size_t>(nranks));
  if (comm.size() != static_cast<size_t>(nranks)) return 0;
  const uint64_t before = emulatedKernelLaunches();
  Failures failures;
  std::vector<std::vector<std::vector<uint8_t>>> outputs(nranks);
  onEveryRank(nranks, [&](int r) {
    const Placement at = prepare ? prepare(r, *comm[r]) : Placement{};
    for (const Case& c : cases) {
      outputs[r].push_back(runOne(*comm[r], c, &failures, at).value_or(std::vector<uint8_t>()));
    }
  });
  const uint64_t launched = emulatedKernelLaunches() - before;
  for (const std::string& m : failures.messages) ADD_FAILURE() << m;
  for (size_t i = 0; i < cases.size(); ++i) {
    const CollectiveKind kind = cases[i].kind;
    if (kind != CollectiveKind::kAllReduce && kind != CollectiveKind::kAllGather &&
        kind != CollectiveKind::kBroadcast) {
      continue;
    }
    for (int r = 1; r < nranks; ++r) {
      EXPECT_EQ(outputs[r][i], outputs[0][i]) << describe(cases[i], r) << " differs from rank 0";
    }
  }
  return launched;
}

// `comm` (rank 0 of 2) all-reduces `count` floats from `input` into `output`, which rank
// 1 never issues: the Work must fail with Timeout naming rank 1, well within 10 s of a
// communicator timeout under a second. Returns the kernels launched.
inline uint64_t expectAllReduceTimesOutNamingRank1(Communicator& comm, const void* input,
                                                   void* output, size_t count) {
  const uint64_t before = emulatedKernelLaunches();
  const auto start = std::chrono::steady_clock::now();
  Result<Work> work = comm.allReduce(input, output, count, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_TRUE(work.isOk()) << work.status().toString();
  if (!work.isOk()) return 0;
  Status status = work->wait(std::chrono::seconds(30));
  EXPECT_EQ(status.code(), StatusCode::kTimeout) << status.toString();
  EXPECT_EQ(status.peer(), 1) << status.toString();
  EXPECT_NE(status.message().find("rank 1"), std::string::npos) << status.toString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  return emulatedKernelLaunches() - before;
}

}  // namespace collie::testing
