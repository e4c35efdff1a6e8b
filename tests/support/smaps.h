// Sums of one field of /proc/self/smaps over chosen mappings: what the kernel did with
// a process's pages (huge pages, pages mapped), for tests that check the kernel and not
// only their code's own count.
#pragma once

#include <cstddef>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

namespace collie::testing {

// KiB of `field` ("Rss", "AnonHugePages", ...) summed over this process's mappings for
// which `chosen(from, to, header)` holds (header: the mapping's first line, with its
// path). smaps counts per mapping, and the kernel merges neighbouring anonymous
// mappings, so compare before and after, not to a size.
inline size_t smapsKiB(
    const char* field,
    const std::function<bool(unsigned long, unsigned long, const std::string&)>& chosen) {
  std::ifstream smaps("/proc/self/smaps");
  const std::string key = std::string(field) + ": %zu kB";
  std::string line;
  bool inside = false;
  size_t kib = 0;
  while (std::getline(smaps, line)) {
    unsigned long from = 0, to = 0;
    // A mapping's first line ("7f..-7f.. rw-p ..."); the fields below it have a key.
    if (std::sscanf(line.c_str(), "%lx-%lx ", &from, &to) == 2 && line.find(':') > 8) {
      inside = chosen(from, to, line);
      continue;
    }
    size_t value = 0;
    if (inside && std::sscanf(line.c_str(), key.c_str(), &value) == 1) kib += value;
  }
  return kib;
}

}  // namespace collie::testing
