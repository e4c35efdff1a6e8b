#include "ddp/bucket_assignment.h"

#include <algorithm>

namespace collie::ddp {

std::vector<std::vector<size_t>> assignBuckets(const std::vector<size_t>& paramBytes,
                                               size_t firstBucketBytes, size_t capBytes) {
  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> open;
  size_t openBytes = 0;
  size_t limit = std::max<size_t>(firstBucketBytes, 1);
  for (size_t k = paramBytes.size(); k-- > 0;) {
    open.push_back(k);
    openBytes += paramBytes[k];
    if (openBytes >= limit) {
      buckets.push_back(std::move(open));
      open.clear();
      openBytes = 0;
      limit = std::max<size_t>(capBytes, 1);
    }
  }
  if (!open.empty()) buckets.push_back(std::move(open));
  return buckets;
}

size_t megabytesToBytes(double mb) {
  if (!(mb > 0)) return 0;
  return static_cast<size_t>(mb * 1024.0 * 1024.0);
}

}  // namespace collie::ddp
