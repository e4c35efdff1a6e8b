// Throughput of the host reduction kernels (kernels/cpu), in bytes moved per second:
// a reduce reads two buffers and writes one (3 x size per call), memcpy reads one and
// writes one (2 x size). Sizes are per buffer: 256 KiB (in cache) and 64 MiB (memory).
//
//   collie_kernels_bench --benchmark_filter='reduce/float/sum'
//
// Names: reduce/<dtype>/<op>/<size>[/inplace][/<variant>]; the best variant is the
// default; the others (cpu-baseline, cpu-avx2 where cpu-avx512 is the best) are listed
// for the float, half and bfloat16 sums for comparison.
//
// The machine's ceiling, on x86-64 with AVX2: stream/memset (write 1), stream/copy (read
// 1, write 1) and stream/read2write1 (dst = a | b: a reduce's traffic with no math),
// all with non-temporal stores. At the end it prints every float32 sum variant's
// bandwidth as a share of stream/read2write1's at 64 MiB (beyond the last-level cache;
// in cache plain stores beat streaming ones), from interleaved rounds, best of 5 each,
// so that the ratio survives a shared, busy machine.
//
//   collie_kernels_bench --benchmark_filter='stream|reduce/float/sum'

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/kernel/reduce_backend.h"
#include "kernels/cpu/cpu_reduce.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define COLLIE_BENCH_STREAM 1
#else
#define COLLIE_BENCH_STREAM 0
#endif

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

// kPreMulSum's pre-pass: dst = src * scalar (read src, write dst).
void scaleBench(benchmark::State& state, DataType dtype, size_t bytes) {
  Buffer src = makeBuffer(bytes), dst = makeBuffer(bytes);
  const size_t count = bytes / dataTypeSize(dtype);
  const ReduceScalar scalar = scalarOf(0.5, dtype);
  for (auto _ : state) {
    cpuReduceBackend().scale(dst.get(), src.get(), scalar.bytes, count, dtype);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 *
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

#if COLLIE_BENCH_STREAM
// Non-temporal baselines over 32-byte aligned buffers whose size is a multiple of 128.
enum class StreamShape { kMemset, kCopy, kRead2Write1 };

__attribute__((target("avx2"))) void streamKernel(StreamShape shape, void* dst, const void* a,
                                                  const void* b, size_t bytes) {
  auto* d = static_cast<__m256i*>(dst);
  const auto* x = static_cast<const __m256i*>(a);
  const auto* y = static_cast<const __m256i*>(b);
  const size_t n = bytes / sizeof(__m256i);
  const __m256i fill = _mm256_set1_epi8(0x3c);
  for (size_t i = 0; i < n; i += 4) {
    for (size_t k = i; k < i + 4; ++k) {
      __m256i v = fill;
      if (shape != StreamShape::kMemset) v = _mm256_load_si256(x + k);
      if (shape == StreamShape::kRead2Write1) v = _mm256_or_si256(v, _mm256_load_si256(y + k));
      _mm256_stream_si256(d + k, v);
    }
  }
  _mm_sfence();
}

// Bytes of memory traffic per call of `shape` on buffers of `bytes`.
size_t streamTraffic(StreamShape shape, size_t bytes) {
  return bytes * (shape == StreamShape::kMemset ? 1 : shape == StreamShape::kCopy ? 2 : 3);
}

void streamBench(benchmark::State& state, StreamShape shape, size_t bytes) {
  Buffer a = makeBuffer(bytes), b = makeBuffer(bytes), dst = makeBuffer(bytes);
  for (auto _ : state) {
    streamKernel(shape, dst.get(), a.get(), b.get(), bytes);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(streamTraffic(shape, bytes)));
}

// Bytes per second of `call` (moving `traffic` bytes), best of one round of at least
// 20 ms (after one warm-up call): rounds are interleaved by the caller, and the best
// round is the one least disturbed by other processes on a shared machine.
template <typename Call>
double roundRate(Call call, size_t traffic) {
  call();
  const auto start = std::chrono::steady_clock::now();
  std::chrono::duration<double> took{};
  size_t calls = 0;
  for (; took.count() < 0.02; ++calls) {
    call();
    took = std::chrono::steady_clock::now() - start;
  }
  return static_cast<double>(traffic * calls) / took.count();
}

// Prints the float32 sum kernels' bandwidth as a share of stream/read2write1's on
// buffers beyond the last-level cache: 5 interleaved rounds each, best of each.
void printStreamRatio() {
  const size_t bytes = kSizes[std::size(kSizes) - 1];
  Buffer a = makeBuffer(bytes), b = makeBuffer(bytes), dst = makeBuffer(bytes);
  const size_t count = bytes / sizeof(float);
  std::vector<const ReduceBackend*> backends(cpuReduceBackendVariants().begin(),
                                             cpuReduceBackendVariants().end());
  double stream = 0;
  std::vector<double> best(backends.size(), 0.0);
  for (int round = 0; round < 5; ++round) {
    stream = std::max(
        stream,
        roundRate(
            [&] { streamKernel(StreamShape::kRead2Write1, dst.get(), a.get(), b.get(), bytes); },
            3 * bytes));
    for (size_t k = 0; k < backends.size(); ++k) {
      best[k] = std::max(best[k], roundRate(
                                      [&] {
                                        backends[k]->reduce(dst.get(), a.get(), b.get(), count,
                                                            DataType::kFloat32, ReduceOp::kSum, 0);
                                      },
                                      3 * bytes));
    }
  }
  std::printf("# streaming-store read2write1, %s: %.1f GB/s (best of 5 rounds)\n",
              sizeName(bytes).c_str(), stream / 1e9);
  for (size_t k = 0; k < backends.size(); ++k) {
    std::printf("# reduce/float/sum/%s/%s: %.1f GB/s = %.0f%% of it\n", sizeName(bytes).c_str(),
                backends[k]->name, best[k] / 1e9, 100.0 * best[k] / stream);
  }
}

bool hasAvx2() { return __builtin_cpu_supports("avx2"); }
#endif

void registerStream() {
#if COLLIE_BENCH_STREAM
  if (!hasAvx2()) return;
  for (size_t i = 0; i < std::size(kSizes); ++i) {
    const size_t bytes = kSizes[i];
    const std::pair<const char*, StreamShape> shapes[] = {
        {"memset", StreamShape::kMemset},
        {"copy", StreamShape::kCopy},
        {"read2write1", StreamShape::kRead2Write1}};
    for (const auto& [name, shape] : shapes) {
      benchmark::RegisterBenchmark(("stream/" + std::string(name) + "/" + sizeName(bytes)).c_str(),
                                   streamBench, shape, bytes)
          ->UseRealTime();
    }
  }
#endif
}

void registerAll() {
  registerStream();
  const ReduceBackend* best = &cpuReduceBackend();
  for (size_t bytes : kSizes) {
    benchmark::RegisterBenchmark(("memcpy/" + sizeName(bytes)).c_str(), memcpyBench, bytes)
        ->UseRealTime();
    for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
      benchmark::RegisterBenchmark(
          ("scale/" + std::string(dataTypeName(dtype)) + "/" + sizeName(bytes)).c_str(), scaleBench,
          dtype, bytes)
          ->UseRealTime();
    }
    for (int d = 0; d < kNumDataTypes; ++d) {
      const auto dtype = static_cast<DataType>(d);
      for (int o = 0; o < kNumReduceOps; ++o) {
        const auto op = static_cast<ReduceOp>(o);
        if (!isValidFor(op, dtype) || op == ReduceOp::kPreMulSum) continue;  // = sum
        const std::string name = "reduce/" + std::string(dataTypeName(dtype)) + "/" +
                                 std::string(reduceOpName(op)) + "/" + sizeName(bytes);
        benchmark::RegisterBenchmark(name.c_str(), reduceBench, best, dtype, op, bytes, false)
            ->UseRealTime();
        const bool sumOfFloatLike =
            op == ReduceOp::kSum && (dtype == DataType::kFloat32 || dtype == DataType::kFloat16 ||
                                     dtype == DataType::kBFloat16);
        if (sumOfFloatLike) {
          benchmark::RegisterBenchmark((name + "/inplace").c_str(), reduceBench, best, dtype, op,
                                       bytes, true)
              ->UseRealTime();
          for (const ReduceBackend* other : cpuReduceBackendVariants()) {
            if (other == best) continue;
            benchmark::RegisterBenchmark((name + "/" + other->name).c_str(), reduceBench, other,
                                         dtype, op, bytes, false)
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
#if COLLIE_BENCH_STREAM
  if (collie::hasAvx2()) collie::printStreamRatio();
#endif
  benchmark::Shutdown();
  return 0;
}
