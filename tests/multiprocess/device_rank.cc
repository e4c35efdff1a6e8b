// A rank of the device-buffer multiprocess checks, run through `collie run`: on the
// runtime a communicator selects (a CUDA device when there is one, else the emulated
// runtime with COLLIE_DEVICE_EMULATION=1, whose ranks map each other's regions
// through /proc/<pid>/fd), so the same program checks the device path on this
// machine's CPU and on a GPU (scripts/gpu-check.sh). Buffers are filled and read only
// through the runtime's copies on a stream, never dereferenced by the host.
//
// Usage: device_rank [MODE [ARGS]]; exit 0 when every check passed, 1 with a message
// naming the rank and the case otherwise. Each rank prints one "ok" line.
//   (none)                 all-reduce in place and all-gather, counts 1, 1021, 40,000;
//                          on the emulated runtime also that step kernels ran
//   staged                 the same with every rank on a host of its own: device
//                          buffers staged through host memory over tcp, no kernels
//   matrix MAXBYTES [ALGO] all-reduce (out of place and in place), reduce-scatter,
//                          all-gather, broadcast, reduce for float32/sum, bfloat16/avg
//                          and int32/max, 1 and 1021 elements and 1 KiB x16.. MAXBYTES
//                          (the larger buffer); exact bytes (#wrong elements printed)
//                          and every rank's output bitwise identical where it must be;
//                          ALGO ring (default), tree (no reduce-scatter, all-gather)
//                          or board (the board kernel where the input fits a board
//                          slot, ring beyond it and for broadcast and reduce)
//   stream COUNT           the input arrives only by copies queued on the caller's
//                          stream before the all-reduce, the result leaves only by
//                          copies queued after it; the host waits only for the stream
//   timeout MS             the last rank never issues the all-reduce: every other rank
//                          fails with Timeout naming it, within MS + 10 s
//   mismatch               rank 1 all-reduces another count: every rank fails with
//                          Mismatch and no output byte is written
//   premul COUNT           PREMUL_SUM with rank r's factor r + 2 on int32 (exact, wraps):
//                          all-reduce out of place and in place, reduce-scatter, reduce
//                          to the last rank, COUNT elements (the larger buffer)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collie/communicator.h"
#include "core/device/device_knobs.h"
#include "core/device/device_runtime.h"
#include "kernels/cuda/emulation/emulated_runtime.h"
#include "kernels/cuda/emulation/emulated_stream.h"
#include "support/reference.h"

namespace {

using collie::CollectiveKind;
using collie::Communicator;
using collie::DataType;
using collie::DeviceRuntime;
using collie::DeviceStream;
using collie::ReduceOp;
using collie::Result;
using collie::Status;

// The runtime's memory and one stream, with copies the host waits for.
class Device {
 public:
  explicit Device(DeviceRuntime& runtime) : runtime_(runtime) {
    Result<DeviceStream> stream = runtime_.createStream();
    if (stream.isOk()) stream_ = *stream;
  }
  ~Device() {
    for (void* p : allocations_) runtime_.free(p);
    if (stream_ != nullptr) runtime_.destroyStream(stream_);
  }
  DeviceRuntime& runtime() { return runtime_; }
  DeviceStream stream() const { return stream_; }
  void* allocate(size_t bytes) {
    Result<void*> p = runtime_.allocate(bytes == 0 ? 1 : bytes);
    if (!p.isOk()) return nullptr;
    allocations_.push_back(*p);
    return *p;
  }
  void release(void* p) {
    std::erase(allocations_, p);
    runtime_.free(p);
  }
  Status upload(void* device, const std::vector<uint8_t>& host) {
    Status s = runtime_.memcpyAsync(device, host.data(), host.size(), stream_);
    return s.isOk() ? sync() : s;
  }
  Result<std::vector<uint8_t>> download(const void* device, size_t bytes) {
    std::vector<uint8_t> host(bytes);
    Status s = runtime_.memcpyAsync(host.data(), device, bytes, stream_);
    if (s.isOk()) s = sync();
    if (!s.isOk()) return s;
    return host;
  }
  // Waits (60 s at most) until the stream reached this point.
  Status sync() {
    Result<collie::DeviceEvent> event = runtime_.recordEvent(stream_);
    if (!event.isOk()) return event.status();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    bool done = false;
    while (!(done = runtime_.queryEvent(*event)) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    runtime_.destroyEvent(*event);
    return done ? Status() : collie::timeoutError("device stream did not finish in 60 s");
  }

 private:
  DeviceRuntime& runtime_;
  DeviceStream stream_ = nullptr;
  std::vector<void*> allocations_;
};

int failed(int rank, const std::string& what) {
  std::fprintf(stderr, "device_rank %d: %s\n", rank, what.c_str());
  return 1;
}

// On the emulated runtime, where device memory is host memory and the host engine
// would give the same bytes: whether step kernels ran (the device path did).
bool devicePathRan(Device& device) {
  return device.runtime().name() != "emulated" || collie::emulatedKernelLaunches() > 0;
}

Status waitFor(Result<collie::Work> work) { return work.isOk() ? work->wait() : work.status(); }

// A hash of the bytes, 8 at a time (outputs reach 256 MiB).
uint64_t hashBytes(const std::vector<uint8_t>& bytes) {
  uint64_t h = 1469598103934665603ull ^ bytes.size();
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);
    h = (h ^ word) * 1099511628211ull;
  }
  for (; i < bytes.size(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}

std::string hexBytes(const uint8_t* p, size_t n) {
  std::string out;
  char digits[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(digits, sizeof(digits), "%02x", p[i]);
    out += digits;
  }
  return out;
}

// Elements of `actual` that differ from `expected`; the first one is described in
// *first (index, bytes found, bytes expected) for the report of a GPU run.
size_t countWrong(const std::vector<uint8_t>& actual, const std::vector<uint8_t>& expected,
                  size_t es, std::string* first) {
  size_t wrong = 0;
  for (size_t i = 0; i < expected.size(); i += es) {
    if (std::memcmp(actual.data() + i, expected.data() + i, es) == 0) continue;
    if (wrong++ == 0) {
      *first = "first at element " + std::to_string(i / es) + ": " +
               hexBytes(actual.data() + i, es) + ", want " + hexBytes(expected.data() + i, es);
    }
  }
  return wrong;
}

// The original checks: all-reduce in place and all-gather, exact bytes, and which path
// ran on the emulated runtime (step kernels, or none when staged).
int basic(Communicator& comm, Device& device, bool staged) {
  const int r = comm.rank();
  const int n = comm.size();
  for (size_t count : {size_t{1}, size_t{1021}, size_t{40'000}}) {
    const size_t bytes = count * sizeof(float);
    void* in = device.allocate(bytes * n);
    void* out = device.allocate(bytes * n);
    if (in == nullptr || out == nullptr || !comm.isDeviceBuffer(in)) {
      return failed(r, "device memory is not device memory to the communicator");
    }
    Status s =
        device.upload(in, collie::testing::makeInput(DataType::kFloat32, ReduceOp::kSum, r, count));
    if (s.isOk()) s = waitFor(comm.allReduce(in, in, count, DataType::kFloat32, ReduceOp::kSum));
    if (!s.isOk()) return failed(r, "allReduce: " + s.toString());
    auto result = device.download(in, bytes);
    if (!result.isOk()) return failed(r, "download: " + result.status().toString());
    std::string first;
    const size_t wrong = countWrong(
        *result,
        collie::testing::expectedReduction(DataType::kFloat32, ReduceOp::kSum, n, 0, count),
        sizeof(float), &first);
    if (wrong != 0) {
      return failed(r, "allReduce count " + std::to_string(count) + ": #wrong " +
                           std::to_string(wrong) + " (" + first + ")");
    }
    s = device.upload(
        in, collie::testing::makeInput(DataType::kFloat32, ReduceOp::kSum, 0, count, r * count));
    if (s.isOk()) s = waitFor(comm.allGather(in, out, count, DataType::kFloat32));
    if (!s.isOk()) return failed(r, "allGather: " + s.toString());
    result = device.download(out, bytes * n);
    if (!result.isOk()) return failed(r, "download: " + result.status().toString());
    const size_t gatherWrong = countWrong(
        *result, collie::testing::makeInput(DataType::kFloat32, ReduceOp::kSum, 0, count * n),
        sizeof(float), &first);
    if (gatherWrong != 0) {
      return failed(r, "allGather count " + std::to_string(count) + ": #wrong " +
                           std::to_string(gatherWrong) + " (" + first + ")");
    }
  }
  if (device.runtime().name() == "emulated") {
    const uint64_t launches = collie::emulatedKernelLaunches();
    if (staged ? launches != 0 : launches == 0) {
      return failed(r, staged ? "staged run launched kernels"
                              : "no kernel launched: the device path did not run");
    }
  }
  std::printf("device_rank %d: ok (%s runtime%s)\n", r, device.runtime().name().c_str(),
              staged ? ", staged" : "");
  return 0;
}

constexpr uint8_t kUnwritten = 0xEE;  // an output's bytes before the collective

// Fresh device buffers: an output of outBytes filled with kUnwritten and an input holding
// `input` (the output itself when inPlace); runs collective(in, out), then returns the
// output's bytes and frees both.
template <typename Collective>
Result<std::vector<uint8_t>> runOnDevice(Device& device, const std::vector<uint8_t>& input,
                                         size_t outBytes, bool inPlace, Collective collective) {
  void* out = device.allocate(outBytes);
  void* in = inPlace ? out : device.allocate(input.size());
  if (out == nullptr || in == nullptr) return collie::internalError("device allocation failed");
  Status s = device.upload(out, std::vector<uint8_t>(outBytes, kUnwritten));
  if (s.isOk()) s = device.upload(in, input);
  if (s.isOk()) s = collective(in, out);
  Result<std::vector<uint8_t>> result =
      s.isOk() ? device.download(out, outBytes) : Result<std::vector<uint8_t>>(s);
  device.release(out);
  if (!inPlace) device.release(in);
  return result;
}

struct MatrixCase {
  CollectiveKind kind;
  DataType dtype;
  ReduceOp op;
  size_t count;  // elements of the larger buffer
  bool inPlace;
};

std::string describe(const MatrixCase& c) {
  return std::string(collie::collectiveName(c.kind)) + " " +
         std::string(collie::dataTypeName(c.dtype)) + "/" +
         std::string(collie::reduceOpName(c.op)) + " count " + std::to_string(c.count) +
         (c.inPlace ? " in place" : "");
}

// Runs one case; returns its output (empty where this rank has none) or an error.
Result<std::vector<uint8_t>> runCase(Communicator& comm, Device& device, const MatrixCase& c,
                                     size_t* wrong, std::string* firstWrong) {
  namespace t = collie::testing;
  const int r = comm.rank();
  const int n = comm.size();
  const int root = n - 1;
  const size_t es = collie::dataTypeSize(c.dtype);
  const size_t share = c.count / n;  // reduce-scatter / all-gather block
  std::vector<uint8_t> input, expected;
  size_t outCount = c.count;
  switch (c.kind) {
    case CollectiveKind::kReduceScatter:
      input = t::makeInput(c.dtype, c.op, r, share * n);
      expected = t::expectedReduction(c.dtype, c.op, n, r * share, share);
      outCount = share;
      break;
    case CollectiveKind::kAllGather:
      input = t::makeInput(c.dtype, c.op, 0, share, r * share);
      expected = t::makeInput(c.dtype, c.op, 0, share * n);
      outCount = share * n;
      break;
    case CollectiveKind::kBroadcast:
      input = t::makeInput(c.dtype, c.op, r, c.count);
      expected = t::makeInput(c.dtype, c.op, root, c.count);
      break;
    default:  // all-reduce, reduce
      input = t::makeInput(c.dtype, c.op, r, c.count);
      expected = t::expectedReduction(c.dtype, c.op, n, 0, c.count);
      break;
  }
  const bool hasOutput = c.kind != CollectiveKind::kReduce || r == root;
  if (!hasOutput) expected.assign(outCount * es, kUnwritten);
  Result<std::vector<uint8_t>> result =
      runOnDevice(device, input, outCount * es, c.inPlace, [&](void* in, void* out) {
        switch (c.kind) {
          case CollectiveKind::kAllReduce:
            return waitFor(comm.allReduce(in, out, c.count, c.dtype, c.op));
          case CollectiveKind::kReduceScatter:
            return waitFor(comm.reduceScatter(in, out, share, c.dtype, c.op));
          case CollectiveKind::kAllGather:
            return waitFor(comm.allGather(in, out, share, c.dtype));
          case CollectiveKind::kBroadcast:
            return waitFor(comm.broadcast(in, out, c.count, c.dtype, root));
          default:
            return waitFor(comm.reduce(in, out, c.count, c.dtype, c.op, root));
        }
      });
  if (result.isOk()) *wrong = countWrong(*result, expected, es, firstWrong);
  return result;
}

int matrix(Communicator& comm, Device& device, size_t maxBytes, const char* algo) {
  const int r = comm.rank();
  const int n = comm.size();
  const std::pair<DataType, ReduceOp> typed[] = {{DataType::kFloat32, ReduceOp::kSum},
                                                 {DataType::kBFloat16, ReduceOp::kAvg},
                                                 {DataType::kInt32, ReduceOp::kMax}};
  const CollectiveKind kinds[] = {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                                  CollectiveKind::kAllGather, CollectiveKind::kBroadcast,
                                  CollectiveKind::kReduce};
  std::vector<MatrixCase> cases;
  for (auto [dtype, op] : typed) {
    const size_t es = collie::dataTypeSize(dtype);
    std::vector<size_t> counts = {static_cast<size_t>(n), 1021};
    for (size_t bytes = 1024; bytes <= maxBytes; bytes *= 16) counts.push_back(bytes / es);
    if (counts.back() * es < maxBytes) counts.push_back(maxBytes / es);
    for (CollectiveKind kind : kinds) {
      const bool treeless =
          kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllGather;
      if (treeless && std::string(algo) == "tree") continue;  // ring only
      for (size_t count : counts) {
        cases.push_back({kind, dtype, op, count, false});
        if (kind == CollectiveKind::kAllReduce) cases.push_back({kind, dtype, op, count, true});
      }
    }
  }
  size_t totalWrong = 0;
  for (const MatrixCase& c : cases) {
    size_t wrong = 0;
    std::string firstWrong;
    Result<std::vector<uint8_t>> out = runCase(comm, device, c, &wrong, &firstWrong);
    if (!out.isOk()) return failed(r, describe(c) + ": " + out.status().toString());
    // Every rank's result, by hash: all-reduce, all-gather and broadcast must agree.
    std::vector<uint64_t> hashes(n);
    uint64_t mine = hashBytes(*out);
    Status s = waitFor(comm.allGather(&mine, hashes.data(), 1, DataType::kUint64));
    if (!s.isOk()) return failed(r, "hash exchange: " + s.toString());
    const bool same = c.kind == CollectiveKind::kAllReduce ||
                      c.kind == CollectiveKind::kAllGather || c.kind == CollectiveKind::kBroadcast;
    for (int peer = 0; same && peer < n; ++peer) {
      if (hashes[peer] != mine) {
        return failed(r, describe(c) + ": rank " + std::to_string(peer) + "'s bytes differ");
      }
    }
    if (wrong != 0) {
      std::fprintf(stderr, "device_rank %d: %s: #wrong %zu (%s)\n", r, describe(c).c_str(), wrong,
                   firstWrong.c_str());
    }
    totalWrong += wrong;
  }
  if (totalWrong != 0) return failed(r, "#wrong " + std::to_string(totalWrong));
  if (!devicePathRan(device)) return failed(r, "no kernel launched: the device path did not run");
  std::printf("device_rank %d: ok matrix %s: %zu cases up to %zu bytes, #wrong 0 (%s runtime)\n", r,
              algo, cases.size(), maxBytes, device.runtime().name().c_str());
  return 0;
}

int streamOrder(Communicator& comm, Device& device, size_t count) {
  const int r = comm.rank();
  const int n = comm.size();
  const size_t bytes = count * sizeof(float);
  void* source = device.allocate(bytes);
  void* in = device.allocate(bytes);  // zero-filled: only the queued copies fill it
  void* out = device.allocate(bytes);
  void* copy = device.allocate(bytes);
  if (source == nullptr || in == nullptr || out == nullptr || copy == nullptr) {
    return failed(r, "device allocation failed");
  }
  Status s = device.upload(
      source, collie::testing::makeInput(DataType::kFloat32, ReduceOp::kSum, r, count));
  if (!s.isOk()) return failed(r, s.toString());
  DeviceRuntime& rt = device.runtime();
  if (rt.name() == "emulated") {
    // Hold the stream first, so that a collective that ignored it would surely run
    // before its input arrived (on a GPU the copies below are what it must wait for).
    static_cast<collie::emulation::EmulatedStream*>(device.stream())->enqueue([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    });
  }
  // Work ahead of the collective on the caller's stream: several device copies.
  for (int i = 0; i < 8 && s.isOk(); ++i) s = rt.memcpyAsync(in, source, bytes, device.stream());
  Result<collie::Work> work =
      s.isOk() ? comm.allReduce(in, out, count, DataType::kFloat32, ReduceOp::kSum, device.stream())
               : Result<collie::Work>(s);
  if (!work.isOk()) return failed(r, "allReduce: " + work.status().toString());
  // Work behind it: the result leaves the output only through the stream.
  std::vector<uint8_t> host(bytes);
  s = rt.memcpyAsync(copy, out, bytes, device.stream());
  if (s.isOk()) s = rt.memcpyAsync(host.data(), copy, bytes, device.stream());
  if (s.isOk()) s = device.sync();  // the host waits for the stream, not the Work
  if (!s.isOk()) return failed(r, "stream: " + s.toString());
  if (host != collie::testing::expectedReduction(DataType::kFloat32, ReduceOp::kSum, n, 0, count)) {
    return failed(r, "stream order: wrong bytes after the stream's copies");
  }
  s = work->wait();
  if (!s.isOk()) return failed(r, "the Work failed after its stream finished: " + s.toString());
  if (!devicePathRan(device)) return failed(r, "no kernel launched: the device path did not run");
  std::printf("device_rank %d: ok stream order, count %zu (%s runtime)\n", r, count,
              rt.name().c_str());
  return 0;
}

// Sum over ranks q of (q + 2) x rank q's input, element by element, wrapping like int32.
std::vector<uint8_t> premulExpected(int n, size_t first, size_t count) {
  std::vector<uint8_t> out(count * sizeof(int32_t), 0);
  for (int q = 0; q < n; ++q) {
    std::vector<uint8_t> in =
        collie::testing::makeInput(DataType::kInt32, ReduceOp::kSum, q, first + count);
    for (size_t i = 0; i < count; ++i) {
      uint32_t acc, value;
      std::memcpy(&acc, out.data() + i * 4, 4);
      std::memcpy(&value, in.data() + (first + i) * 4, 4);
      acc += value * static_cast<uint32_t>(q + 2);
      std::memcpy(out.data() + i * 4, &acc, 4);
    }
  }
  return out;
}

int premul(Communicator& comm, Device& device, size_t count) {
  const int r = comm.rank();
  const int n = comm.size();
  const int root = n - 1;
  count = count / n * n;  // reduce-scatter blocks
  const size_t share = count / n;
  const collie::ReduceScalar factor = collie::scalarOf(r + 2, DataType::kInt32);
  const std::vector<uint8_t> input =
      collie::testing::makeInput(DataType::kInt32, ReduceOp::kSum, r, count);
  struct Case {
    const char* name;
    CollectiveKind kind;
    bool inPlace;
  };
  const Case cases[] = {{"allreduce", CollectiveKind::kAllReduce, false},
                        {"allreduce in place", CollectiveKind::kAllReduce, true},
                        {"reducescatter", CollectiveKind::kReduceScatter, false},
                        {"reduce", CollectiveKind::kReduce, false}};
  for (const Case& c : cases) {
    const size_t outCount = c.kind == CollectiveKind::kReduceScatter ? share : count;
    Result<std::vector<uint8_t>> result =
        runOnDevice(device, input, outCount * 4, c.inPlace, [&](void* in, void* out) {
          const DataType i32 = DataType::kInt32;
          const ReduceOp op = ReduceOp::kPreMulSum;
          switch (c.kind) {
            case CollectiveKind::kAllReduce:
              return waitFor(comm.allReduce(in, out, count, i32, op, factor));
            case CollectiveKind::kReduceScatter:
              return waitFor(comm.reduceScatter(in, out, share, i32, op, factor));
            default:
              return waitFor(comm.reduce(in, out, count, i32, op, root, factor));
          }
        });
    if (!result.isOk()) {
      return failed(r, std::string("premul ") + c.name + ": " + result.status().toString());
    }
    std::vector<uint8_t> want;
    if (c.kind == CollectiveKind::kReduceScatter) {
      want = premulExpected(n, r * share, share);
    } else if (c.kind == CollectiveKind::kReduce && r != root) {
      want.assign(outCount * 4, kUnwritten);  // a non-root's output is not written
    } else {
      want = premulExpected(n, 0, count);
    }
    std::string first;
    const size_t wrong = countWrong(*result, want, 4, &first);
    if (wrong != 0) {
      std::fprintf(stderr, "device_rank %d: premul %s count %zu: #wrong %zu (%s)\n", r, c.name,
                   count, wrong, first.c_str());
      return failed(r, "#wrong " + std::to_string(wrong));
    }
  }
  if (!devicePathRan(device)) return failed(r, "no kernel launched: the device path did not run");
  std::printf("device_rank %d: ok premul, count %zu, #wrong 0 (%s runtime)\n", r, count,
              device.runtime().name().c_str());
  return 0;
}

int neverArrives(Communicator& comm, Device& device, int timeoutMs) {
  const int r = comm.rank();
  const int absent = comm.size() - 1;
  if (r == absent) {
    // Stays alive (windows mapped) well past the others' deadline, issuing nothing.
    std::this_thread::sleep_for(std::chrono::milliseconds(timeoutMs + 3000));
    std::printf("device_rank %d: ok (the rank that never arrives)\n", r);
    return 0;
  }
  const size_t count = 4096;
  void* in = device.allocate(count * sizeof(float));
  void* out = device.allocate(count * sizeof(float));
  const auto start = std::chrono::steady_clock::now();
  Result<collie::Work> work = comm.allReduce(in, out, count, DataType::kFloat32, ReduceOp::kSum);
  Status s = work.isOk() ? work->wait(std::chrono::seconds(60)) : work.status();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string named = "rank " + std::to_string(absent);
  if (s.code() != collie::StatusCode::kTimeout || s.peer() != absent ||
      s.message().find(named) == std::string::npos) {
    return failed(r, "expected Timeout naming " + named + ", got " + s.toString());
  }
  if (seconds > timeoutMs / 1000.0 + 10) {
    return failed(r, "Timeout took " + std::to_string(seconds) + " s");
  }
  std::printf("device_rank %d: ok Timeout naming %s after %.2f s (%s runtime)\n", r, named.c_str(),
              seconds, device.runtime().name().c_str());
  return 0;
}

int mismatch(Communicator& comm, Device& device) {
  const int r = comm.rank();
  const size_t count = r == 1 ? 1000 : 1024;
  const size_t bytes = count * sizeof(float);
  void* in = device.allocate(bytes);
  void* out = device.allocate(bytes);
  const std::vector<uint8_t> sentinel(bytes, kUnwritten);
  Status s = device.upload(out, sentinel);
  if (!s.isOk()) return failed(r, s.toString());
  const auto start = std::chrono::steady_clock::now();
  s = waitFor(comm.allReduce(in, out, count, DataType::kFloat32, ReduceOp::kSum));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (s.code() != collie::StatusCode::kMismatch ||
      s.message().find("count differs") == std::string::npos) {
    return failed(r, "expected Mismatch (count differs), got " + s.toString());
  }
  auto after = device.download(out, bytes);
  if (!after.isOk() || *after != sentinel) return failed(r, "output written despite Mismatch");
  std::printf("device_rank %d: ok Mismatch after %.3f s, output untouched (%s runtime)\n", r,
              seconds, device.runtime().name().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const char* arg = argc > 2 ? argv[2] : nullptr;
  collie::Options options;
  if (mode == "staged") {
    options.transport = "tcp";
    options.hostId = "emulated-host-" + std::string(std::getenv("COLLIE_RANK"));
  }
  if (mode == "matrix" && argc > 3) {
    std::optional<collie::Algorithm> algo = collie::parseAlgorithm(argv[3]);
    if (!algo) return failed(-1, std::string("unknown algorithm ") + argv[3]);
    options.algorithm = *algo;
  }
  if (mode == "timeout") options.timeout = std::chrono::milliseconds(arg ? std::atoi(arg) : 2000);
  auto created = Communicator::createFromEnvironment(options);
  if (!created.isOk()) return failed(-1, created.status().toString());
  Communicator& comm = **created;
  collie::Result<DeviceRuntime*> runtime = collie::selectDeviceRuntime(
      collie::DeviceKnobs::parse(collie::Config::fromEnvironment())->emulation);
  if (!runtime.isOk()) return failed(comm.rank(), runtime.status().toString());
  if (*runtime == nullptr) {
    return failed(comm.rank(), "no device runtime (no GPU, COLLIE_DEVICE_EMULATION unset)");
  }
  Device device(**runtime);
  if (device.stream() == nullptr) return failed(comm.rank(), "cannot create a device stream");
  if (mode.empty() || mode == "staged") return basic(comm, device, mode == "staged");
  if (mode == "matrix") {
    return matrix(comm, device, arg ? std::strtoull(arg, nullptr, 10) : 1 << 20,
                  argc > 3 ? argv[3] : "ring");
  }
  if (mode == "stream")
    return streamOrder(comm, device, arg ? std::strtoull(arg, nullptr, 10) : 40'000);
  if (mode == "timeout") return neverArrives(comm, device, arg ? std::atoi(arg) : 2000);
  if (mode == "mismatch") return mismatch(comm, device);
  if (mode == "premul") return premul(comm, device, arg ? std::strtoull(arg, nullptr, 10) : 40'000);
  return failed(comm.rank(), "unknown mode " + mode);
}
