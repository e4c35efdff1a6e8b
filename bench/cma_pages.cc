// What page size does to cross-memory attach: a child process holds a buffer, the parent
// reads it whole with process_vm_readv and writes it back with process_vm_writev, first
// in 4 KiB pages, then after madvise(MADV_COLLAPSE) of the child's buffer into 2 MiB
// pages (what transports/shm/shm_huge_pages.h asks for). Also times the collapse itself
// (first and repeated) and the first touch of fresh memory in either page size.
//
// Usage: cma_pages [MiB (default 64)] [calls (default 7)]
// Prints GB/s per call and the median; the VM's speed changes by the hour, so compare
// the two rows of one run.
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

namespace {

constexpr uintptr_t kHuge = uintptr_t{2} << 20;

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// 2 MiB-aligned anonymous memory (so that all of it can be collapsed), touched.
uint8_t* alignedBuffer(size_t bytes) {
  void* p =
      mmap(nullptr, bytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("cma_pages: mmap");
    std::exit(1);
  }
  auto* aligned =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1));
  return aligned;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Reads the child's buffer whole `calls` times, then writes it; prints GB/s.
void measure(const char* label, pid_t child, uint8_t* remote, uint8_t* local, size_t bytes,
             int calls) {
  for (bool write : {false, true}) {
    std::vector<double> rates;
    for (int i = 0; i < calls; ++i) {
      iovec mine{local, bytes}, theirs{remote, bytes};
      const double t = seconds();
      const ssize_t done = write ? process_vm_writev(child, &mine, 1, &theirs, 1, 0)
                                 : process_vm_readv(child, &mine, 1, &theirs, 1, 0);
      const double s = seconds() - t;
      if (done != static_cast<ssize_t>(bytes)) {
        std::perror("cma_pages: process_vm_readv/writev");
        std::exit(1);
      }
      rates.push_back(static_cast<double>(bytes) / s / 1e9);
    }
    std::printf("%-28s %-6s median %6.2f GB/s (", label, write ? "writev" : "readv", median(rates));
    for (double r : rates) std::printf(" %.2f", r);
    std::printf(" )\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 64) << 20;
  const int calls = argc > 2 ? std::atoi(argv[2]) : 7;
  int toChild[2], toParent[2];
  if (pipe(toChild) != 0 || pipe(toParent) != 0) return 1;
  uint8_t* buffer = alignedBuffer(bytes);  // the child's copy after fork
  const pid_t child = fork();
  if (child == 0) {
    close(toChild[1]);  // so that the parent's close ends the loop below
    std::memset(buffer, 1, bytes);
    char command = 0;
    while (read(toChild[0], &command, 1) == 1 && command == 'c') {
      const double t = seconds();
      const int rc = madvise(buffer, bytes, MADV_COLLAPSE) == 0 ? 0 : errno;
      const double ms = (seconds() - t) * 1e3;
      if (write(toParent[1], &rc, sizeof rc) != sizeof rc ||
          write(toParent[1], &ms, sizeof ms) != sizeof ms)
        _exit(1);
    }
    _exit(0);
  }
  uint8_t* local = alignedBuffer(bytes);
  std::memset(local, 0, bytes);
  // The child's buffer is touched once it answers the first command.
  auto collapse = [&](double* ms) {
    int rc = -1;
    if (write(toChild[1], "c", 1) != 1 || read(toParent[0], &rc, sizeof rc) != sizeof rc ||
        read(toParent[0], ms, sizeof *ms) != sizeof *ms) {
      std::exit(1);
    }
    return rc;
  };
  std::printf("cma_pages: %zu MiB, %d calls each\n", bytes >> 20, calls);
  usleep(200000);  // the child's memset
  measure("4 KiB pages", child, buffer, local, bytes, calls);
  double first = 0, again = 0;
  const int rc = collapse(&first);
  collapse(&again);
  if (rc != 0) {
    std::printf("MADV_COLLAPSE refused (errno %d): no huge pages here\n", rc);
  } else {
    std::printf("collapse: %.1f ms the first time, %.3f ms again\n", first, again);
    measure("2 MiB pages (collapsed)", child, buffer, local, bytes, calls);
  }
  // First touch of fresh memory, small and huge pages (the one-time cost either way).
  uint8_t* small = alignedBuffer(bytes);
  double t = seconds();
  std::memset(small, 2, bytes);
  const double smallMs = (seconds() - t) * 1e3;
  uint8_t* huge = alignedBuffer(bytes);
  madvise(huge, bytes, MADV_HUGEPAGE);
  t = seconds();
  std::memset(huge, 2, bytes);
  std::printf("first touch: %.1f ms in 4 KiB pages, %.1f ms in 2 MiB pages\n", smallMs,
              (seconds() - t) * 1e3);
  close(toChild[1]);
  waitpid(child, nullptr, 0);
  return 0;
}
