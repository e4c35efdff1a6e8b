// allreduce_loop: one kind of all-reduce, over and over, for profiling one path alone.
//
// `collie perf` runs out of place and in place, with fills and checks between them, so
// a profile of it mixes paths and setup. This runs only the asked one: float sum of
// --bytes, out of place or in place, on heap buffers (the cross-memory path) or on
// allocShared buffers registered on the communicator (the direct path), --iters timed
// calls after --warmup. The buffers are filled before the warm-up, so that a profile
// taken over the whole run (bench/phases.sh) is the calls' but for the first touch.
// Prints the slowest rank's median time per call in microseconds (rank 0).
//
// Usage: collie run -n 2 -- allreduce_loop [--bytes N] [--iters N] [--warmup N]
//                                          [--in-place] [--registered]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collie/communicator.h"
#include "collie/shared_memory.h"

namespace {

struct Options {
  size_t bytes = 64 << 20;
  int iters = 30;
  int warmup = 3;
  bool inPlace = false;
  bool registered = false;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool hasValue = i + 1 < argc;
    if (arg == "--in-place") {
      o.inPlace = true;
    } else if (arg == "--registered") {
      o.registered = true;
    } else if (arg == "--bytes" && hasValue) {
      o.bytes = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--iters" && hasValue) {
      o.iters = std::atoi(argv[++i]);
    } else if (arg == "--warmup" && hasValue) {
      o.warmup = std::atoi(argv[++i]);
    } else {
      return false;
    }
  }
  // In place the values grow by the rank count per call: stay far below float's range.
  return o.bytes >= 4 && o.bytes % 4 == 0 && o.iters > 0 && o.warmup >= 0 &&
         (!o.inPlace || o.warmup + o.iters <= 40);
}

// Heap memory, or allocShared memory registered on `comm`; zero-filled either way.
float* allocate(collie::Communicator& comm, const Options& o) {
  if (!o.registered) {
    void* p = std::aligned_alloc(64, (o.bytes + 63) / 64 * 64);
    if (p != nullptr) std::memset(p, 0, o.bytes);
    return static_cast<float*>(p);
  }
  collie::Result<void*> shared = collie::allocShared(o.bytes);
  if (!shared.isOk() || !comm.registerBuffer(*shared, o.bytes).isOk()) return nullptr;
  return static_cast<float*>(*shared);
}

bool allReduce(collie::Communicator& comm, const void* send, void* recv, size_t count,
               collie::DataType dtype, collie::ReduceOp op) {
  collie::Result<collie::Work> work = comm.allReduce(send, recv, count, dtype, op);
  if (!work.isOk() || !work->wait().isOk()) {
    std::fprintf(stderr, "allreduce_loop: rank %d: all-reduce failed: %s\n", comm.rank(),
                 (work.isOk() ? work->wait() : work.status()).toString().c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: allreduce_loop [--bytes N (multiple of 4)] [--iters N] [--warmup N] "
                 "[--in-place] [--registered]\n");
    return 2;
  }
  auto comm = collie::Communicator::createFromEnvironment();
  if (!comm.isOk()) {
    std::fprintf(stderr, "allreduce_loop: %s\n", comm.status().toString().c_str());
    return 1;
  }
  collie::Communicator& c = **comm;
  const size_t count = o.bytes / sizeof(float);
  float* send = allocate(c, o);
  float* recv = o.inPlace ? send : allocate(c, o);
  if (send == nullptr || recv == nullptr) {
    std::fprintf(stderr, "allreduce_loop: rank %d: cannot allocate %zu bytes\n", c.rank(), o.bytes);
    return 1;
  }
  std::fill(send, send + count, 1.0f);
  std::vector<double> us;
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (!allReduce(c, send, recv, count, collie::DataType::kFloat32, collie::ReduceOp::kSum))
      return 1;
    const double t =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    if (i >= o.warmup) us.push_back(t);
  }
  // In place every call multiplies the values by the rank count (exact in float).
  float expected = static_cast<float>(c.size());
  for (int i = 1; o.inPlace && i < o.warmup + o.iters; ++i)
    expected *= static_cast<float>(c.size());
  if (recv[0] != expected || recv[count - 1] != expected) {
    std::fprintf(stderr, "allreduce_loop: rank %d: wrong result %g (expected %g)\n", c.rank(),
                 recv[0], expected);
    return 1;
  }
  std::sort(us.begin(), us.end());
  double median = us[us.size() / 2];
  if (!allReduce(c, &median, &median, 1, collie::DataType::kFloat64, collie::ReduceOp::kMax))
    return 1;
  if (c.rank() == 0) {
    std::printf("%zu bytes, %s, %s: %.1f us per call, busbw %.2f GB/s\n", o.bytes,
                o.inPlace ? "in place" : "out of place", o.registered ? "registered" : "heap",
                median,
                static_cast<double>(o.bytes) / median / 1e3 * 2.0 * (c.size() - 1) / c.size());
  }
  return 0;
}
