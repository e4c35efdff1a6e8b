// cacheline_pingpong: the round-trip time of one cache line between two processes pinned
// to cpu 0 and cpu 1, for `lines` lines `stride` bytes apart in one shared mapping. It
// tells the VM's fast mode (70-135 ns per round trip) from its slow one (340-390 ns),
// and whether the time depends on where the line lies (docs/decisions/small-message-path.md).
// bench/roofline measures the same round trip next to the memory ceilings. Not part of
// the build:
//
//   g++ -O2 -o /tmp/cacheline_pingpong bench/cacheline_pingpong.cc
//   /tmp/cacheline_pingpong 32 8388608     # 32 lines, 8 MiB apart: ns per round trip each
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const int lines = argc > 1 ? std::atoi(argv[1]) : 16;
  const size_t stride = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 8192;
  constexpr uint64_t kRoundTrips = 200000;
  const size_t bytes = static_cast<size_t>(lines) * stride;
  auto* memory = static_cast<char*>(
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (memory == MAP_FAILED || lines < 1 || stride < 64) {
    std::fprintf(stderr, "usage: cacheline_pingpong [LINES] [STRIDE >= 64]\n");
    return 2;
  }
  for (int l = 0; l < lines; ++l) memory[static_cast<size_t>(l) * stride] = 0;
  const pid_t child = fork();
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(child == 0 ? 1 : 0, &set);
  sched_setaffinity(0, sizeof set, &set);
  for (int l = 0; l < lines; ++l) {
    auto* flag = reinterpret_cast<std::atomic<uint64_t>*>(memory + static_cast<size_t>(l) * stride);
    if (child == 0) {  // answers 2i to 2i-1
      for (uint64_t i = 1; i <= kRoundTrips; ++i) {
        while (flag->load(std::memory_order_acquire) != 2 * i - 1) {
        }
        flag->store(2 * i, std::memory_order_release);
      }
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t i = 1; i <= kRoundTrips; ++i) {
      flag->store(2 * i - 1, std::memory_order_release);
      while (flag->load(std::memory_order_acquire) != 2 * i) {
      }
    }
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    std::printf("%.0f ", took.count() / kRoundTrips);
    std::fflush(stdout);
  }
  if (child != 0) {
    waitpid(child, nullptr, 0);
    std::printf("\n");
  }
  return 0;
}
