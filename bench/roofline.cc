// roofline: the ceilings a host all-reduce is measured against, in one run.
//
//   copy       one core streaming a buffer into another (non-temporal stores): GB/s.
//   dualwrite  the single-copy all-reduce of two processes over shared memory: each
//              reduces its half of both inputs (float sum) and writes the result into
//              both outputs with streaming stores, one barrier per call. Reported as
//              busbw (bytes / time for 2 ranks), the figure `collie perf` prints, so a
//              collie 2-rank busbw divided by it is collie's fraction of the machine.
//              For n ranks the ceiling scales by 2(n-1)/n over the 2-rank one.
//   pingpong   the round trip of one cache line between the two processes: tells the
//              VM's fast vCPU placement (~70-135 ns) from its slow one (~340-390 ns).
//
// The two processes are pinned to the first two CPUs the process may use (or float when
// there is only one). Every figure is the median over the iterations.
//
// Usage: roofline [--bytes N] [--iters N] [--warmup N] [--json]
#include <emmintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  size_t bytes = 64 << 20;
  int iters = 20;
  int warmup = 3;
  bool json = false;
};

bool parse(int argc, char** argv, Options& options) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool hasValue = i + 1 < argc;
    if (arg == "--json") {
      options.json = true;
    } else if (arg == "--bytes" && hasValue) {
      options.bytes = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--iters" && hasValue) {
      options.iters = std::atoi(argv[++i]);
    } else if (arg == "--warmup" && hasValue) {
      options.warmup = std::atoi(argv[++i]);
    } else {
      return false;
    }
  }
  // Whole 64-byte lines per half, so that both halves stream aligned.
  return options.bytes >= 128 && options.bytes % 128 == 0 && options.iters > 0 &&
         options.warmup >= 0;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The CPUs this process may run on, lowest first.
std::vector<int> allowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

void pinTo(const std::vector<int>& cpus, int index) {
  if (cpus.size() < 2) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpus[static_cast<size_t>(index)], &set);
  sched_setaffinity(0, sizeof set, &set);
}

void* sharedMapping(size_t bytes) {
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    std::perror("roofline: mmap");
    std::exit(1);
  }
  std::memset(memory, 0, bytes);  // fault every page in before timing
  return memory;
}

// out[i] = a[i] + b[i] for `floats` floats (a multiple of 16), streaming stores into
// every output in outs.
void sumInto(const float* a, const float* b, float* const* outs, int nouts, size_t floats) {
  for (size_t i = 0; i < floats; i += 4) {
    const __m128 sum = _mm_add_ps(_mm_load_ps(a + i), _mm_load_ps(b + i));
    for (int o = 0; o < nouts; ++o) _mm_stream_ps(outs[o] + i, sum);
  }
  _mm_sfence();
}

void streamCopy(const float* from, float* to, size_t floats) {
  for (size_t i = 0; i < floats; i += 4) _mm_stream_ps(to + i, _mm_load_ps(from + i));
  _mm_sfence();
}

// A sense-reversing barrier of two processes on one shared word.
struct Barrier {
  std::atomic<uint32_t> arrived{0};
  std::atomic<uint32_t> generation{0};

  void wait() {
    const uint32_t generationSeen = generation.load(std::memory_order_acquire);
    if (arrived.fetch_add(1, std::memory_order_acq_rel) == 1) {
      arrived.store(0, std::memory_order_relaxed);
      generation.store(generationSeen + 1, std::memory_order_release);
      return;
    }
    while (generation.load(std::memory_order_acquire) == generationSeen) {
    }
  }
};

double copyGBps(const Options& options) {
  const size_t floats = options.bytes / sizeof(float);
  auto* from = static_cast<float*>(sharedMapping(options.bytes));
  auto* to = static_cast<float*>(sharedMapping(options.bytes));
  std::vector<double> seconds;
  for (int i = 0; i < options.warmup + options.iters; ++i) {
    const auto start = Clock::now();
    streamCopy(from, to, floats);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (i >= options.warmup) seconds.push_back(s);
  }
  munmap(from, options.bytes);
  munmap(to, options.bytes);
  return static_cast<double>(options.bytes) / median(seconds) / 1e9;
}

struct TwoProcessFigures {
  double dualWriteUs = 0;
  double pingPongNs = 0;
};

// Runs the dual-write all-reduce and the ping-pong in two processes; rank 0 (this
// process) times them.
TwoProcessFigures twoProcessFigures(const Options& options, const std::vector<int>& cpus) {
  const size_t floats = options.bytes / sizeof(float);
  const size_t half = floats / 2;
  float* inputs[2];
  float* outputs[2];
  for (int r = 0; r < 2; ++r) {
    inputs[r] = static_cast<float*>(sharedMapping(options.bytes));
    outputs[r] = static_cast<float*>(sharedMapping(options.bytes));
    for (size_t i = 0; i < floats; ++i) inputs[r][i] = static_cast<float>(r + 1);
  }
  auto* control = static_cast<char*>(sharedMapping(4096));
  auto* barrier = new (control) Barrier;
  auto* flag = new (control + 2048) std::atomic<uint64_t>(0);
  constexpr uint64_t kRoundTrips = 100000;
  const int calls = options.warmup + options.iters;

  const pid_t child = fork();
  const int rank = child == 0 ? 1 : 0;
  pinTo(cpus, rank);
  std::vector<double> callUs;
  for (int i = 0; i < calls; ++i) {
    barrier->wait();
    const auto start = Clock::now();
    const size_t first = static_cast<size_t>(rank) * half;
    float* outs[2] = {outputs[0] + first, outputs[1] + first};
    sumInto(inputs[0] + first, inputs[1] + first, outs, 2, half);
    barrier->wait();
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (i >= options.warmup) callUs.push_back(us);
  }
  if (rank == 1) {
    for (uint64_t i = 1; i <= kRoundTrips; ++i) {
      while (flag->load(std::memory_order_acquire) != 2 * i - 1) {
      }
      flag->store(2 * i, std::memory_order_release);
    }
    _exit(0);
  }
  const auto start = Clock::now();
  for (uint64_t i = 1; i <= kRoundTrips; ++i) {
    flag->store(2 * i - 1, std::memory_order_release);
    while (flag->load(std::memory_order_acquire) != 2 * i) {
    }
  }
  const double pingPongNs =
      std::chrono::duration<double, std::nano>(Clock::now() - start).count() / kRoundTrips;
  int status = 0;
  waitpid(child, &status, 0);
  // The result must be right, or the figure means nothing.
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < floats; i += 4099) {
      if (outputs[r][i] != 3.0f) {
        std::fprintf(stderr, "roofline: dual-write output %d wrong at %zu\n", r, i);
        std::exit(1);
      }
    }
    munmap(inputs[r], options.bytes);
    munmap(outputs[r], options.bytes);
  }
  munmap(control, 4096);
  return {median(callUs), pingPongNs};
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, options)) {
    std::fprintf(stderr,
                 "usage: roofline [--bytes N (multiple of 128)] [--iters N] [--warmup N] "
                 "[--json]\n");
    return 2;
  }
  const std::vector<int> cpus = allowedCpus();
  const double copy = copyGBps(options);
  const TwoProcessFigures two = twoProcessFigures(options, cpus);
  const double dualWriteGBps = static_cast<double>(options.bytes) / (two.dualWriteUs * 1e3);
  const char* placement = two.pingPongNs < 200 ? "fast" : "slow";
  if (options.json) {
    std::printf(
        "{\"bytes\": %zu, \"iters\": %d, \"cpus\": %zu, \"copy_gbps\": %.3f, "
        "\"dualwrite_us\": %.2f, \"dualwrite_busbw_gbps\": %.3f, \"pingpong_ns\": %.1f, "
        "\"placement\": \"%s\"}\n",
        options.bytes, options.iters, cpus.size(), copy, two.dualWriteUs, dualWriteGBps,
        two.pingPongNs, placement);
  } else {
    std::printf("# roofline, %zu bytes, median of %d (after %d warm-up), %zu cpus\n", options.bytes,
                options.iters, options.warmup, cpus.size());
    std::printf("copy       %8.2f GB/s  (one core, streaming stores)\n", copy);
    std::printf("dualwrite  %8.2f GB/s  busbw, %.1f us per call (2-rank all-reduce bound)\n",
                dualWriteGBps, two.dualWriteUs);
    std::printf("pingpong   %8.1f ns    round trip of a cache line (%s placement)\n",
                two.pingPongNs, placement);
  }
  return 0;
}
