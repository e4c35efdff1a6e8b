// What the kernel did with a buffer's pages, read from /proc/self/smaps: the tests of
// the huge-page advice (transports/shm/shm_huge_pages.h) check the kernel, not only
// the advisor's own count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/smaps.h"

namespace collie::testing {

// KiB of AnonHugePages in this process's mappings that overlap any of `ranges`
// (address, bytes), each mapping counted once. smaps counts per mapping, and the kernel
// merges neighbouring anonymous mappings, so compare before and after, not to a size.
inline size_t hugePageKiB(const std::vector<std::pair<const void*, size_t>>& ranges) {
  return smapsKiB("AnonHugePages", [&](unsigned long from, unsigned long to, const std::string&) {
    bool overlaps = false;
    for (const auto& [p, bytes] : ranges) {
      const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
      overlaps = overlaps || (from < begin + bytes && begin < to);
    }
    return overlaps;
  });
}

inline size_t hugePageKiB(const void* p, size_t bytes) { return hugePageKiB({{p, bytes}}); }

}  // namespace collie::testing
