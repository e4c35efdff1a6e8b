#include "kernels/cpu/cpu_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace collie {
namespace {

// Bytes of cache level `index` of cpu0 as sysfs states it ("32768K"), 0 when absent.
size_t sysfsCacheBytes(int index) {
  const std::string path =
      "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return 0;
  unsigned long value = 0;
  char unit = 0;
  const int got = std::fscanf(f, "%lu%c", &value, &unit);
  std::fclose(f);
  if (got < 1) return 0;
  if (unit == 'K') value <<= 10;
  if (unit == 'M') value <<= 20;
  return value;
}

}  // namespace

size_t lastLevelCacheBytes() {
  static const size_t bytes = [] {
    size_t largest = 0;
    for (int index = 0; index < 8; ++index) largest = std::max(largest, sysfsCacheBytes(index));
    if (largest > 0) return largest;
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return static_cast<size_t>(l3 > 0 ? l3 : l2 > 0 ? l2 : 32l << 20);
  }();
  return bytes;
}

}  // namespace collie
