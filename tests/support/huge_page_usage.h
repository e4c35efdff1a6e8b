// What the kernel did with a buffer's pages, read from /proc/self/smaps: the tests of
// the huge-page advice (transports/shm/shm_huge_pages.h) check the kernel, not only
// the advisor's own count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace collie::testing {

// KiB of AnonHugePages in this process's mappings that overlap any of `ranges`
// (address, bytes), each mapping counted once. smaps counts per mapping, and the kernel
// merges neighbouring anonymous mappings, so compare before and after, not to a size.
inline size_t hugePageKiB(const std::vector<std::pair<const void*, size_t>>& ranges) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  size_t kib = 0;
  while (std::getline(smaps, line)) {
    unsigned long from = 0, to = 0;
    // A mapping's first line ("7f..-7f.. rw-p ..."); the fields below it have a key.
    if (std::sscanf(line.c_str(), "%lx-%lx ", &from, &to) == 2 && line.find(':') > 8) {
      inside = false;
      for (const auto& [p, bytes] : ranges) {
        const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
        inside = inside || (from < begin + bytes && begin < to);
      }
      continue;
    }
    size_t value = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %zu kB", &value) == 1) kib += value;
  }
  return kib;
}

inline size_t hugePageKiB(const void* p, size_t bytes) { return hugePageKiB({{p, bytes}}); }

}  // namespace collie::testing
