// Throughput of the host reduction kernels (kernels/cpu), in bytes moved per second:
// a reduce reads two buffers and writes one (3 x size per call), memcpy reads one and
// writes one (2 x size). Sizes are per buffer: 256 KiB (in cache) and 64 MiB (memory).
//
//   collie_kernels_bench --benchmark_filter='reduce/float/sum'
//
// Names: reduce/<dtype>/<op>/<size>[/inplace][/<variant>]; the best variant is the
// default, the baseline (SSE2) variant is listed for float and half sum for comparison.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "core/kernel/reduce_backend.h"
#include "kernels/cpu/cpu_reduce.h"

namespace collie {
namespace {

constexpr size_t kSizes[] = {256 << 10, 64 << 20};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

// Page-aligned, touched, and filled with a pattern that is a small normal number for
// every floating type (0x3c: 1.0 in the high byte of a half, ~0.01 in a float).
Buffer makeBuffer(size_t bytes) {
  Buffer b(static_cast<unsigned char*>(std::aligned_alloc(4096, bytes)));
  std::memset(b.get(), 0x3c, bytes);
  return b;
}

std::string sizeName(size_t bytes) {
  return bytes >= (1 << 20) ? std::to_string(bytes >> 20) + "MiB"
                            : std::to_string(bytes >> 10) + "KiB";
}

void reduceBench(benchmark::State& state, const ReduceBackend* backend, DataType dtype, ReduceOp op,
                 size_t bytes, bool inPlace) {
  Buffer a = makeBuffer(bytes), b = makeBuffer(bytes), dst = makeBuffer(bytes);
  const size_t count = bytes / dataTypeSize(dtype);
  void* out = inPlace ? a.get() : dst.get();
  // kAvg with a divisor: the last step of an average, sum and divide fused.
  const int divisor = op == ReduceOp::kAvg ? 4 : 0;
  for (auto _ : state) {
    backend->reduce(out, a.get(), b.get(), count, dtype, op, divisor);
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 3 *
                          static_cast<int64_t>(bytes));
}

void memcpyBench(benchmark::State& state, size_t bytes) {
  Buffer src = makeBuffer(bytes), dst = makeBuffer(bytes);
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), bytes);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 *
                          static_cast<int64_t>(bytes));
}

void registerAll() {
  const ReduceBackend* best = &cpuReduceBackend();
  const ReduceBackend* baseline = cpuReduceBackendVariants()[0];
  for (size_t bytes : kSizes) {
    benchmark::RegisterBenchmark(("memcpy/" + sizeName(bytes)).c_str(), memcpyBench, bytes)
        ->UseRealTime();
    for (int d = 0; d < kNumDataTypes; ++d) {
      const auto dtype = static_cast<DataType>(d);
      for (int o = 0; o < kNumReduceOps; ++o) {
        const auto op = static_cast<ReduceOp>(o);
        const std::string name = "reduce/" + std::string(dataTypeName(dtype)) + "/" +
                                 std::string(reduceOpName(op)) + "/" + sizeName(bytes);
        benchmark::RegisterBenchmark(name.c_str(), reduceBench, best, dtype, op, bytes, false)
            ->UseRealTime();
        const bool sumOfFloatOrHalf =
            op == ReduceOp::kSum && (dtype == DataType::kFloat32 || dtype == DataType::kFloat16);
        if (sumOfFloatOrHalf) {
          benchmark::RegisterBenchmark((name + "/inplace").c_str(), reduceBench, best, dtype, op,
                                       bytes, true)
              ->UseRealTime();
          if (baseline != best) {
            benchmark::RegisterBenchmark((name + "/" + baseline->name).c_str(), reduceBench,
                                         baseline, dtype, op, bytes, false)
                ->UseRealTime();
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace collie

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  collie::registerAll();
  benchmark::AddCustomContext("collie_host_backend", collie::cpuReduceBackend().name);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
