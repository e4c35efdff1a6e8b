#include "transports/shm/shm_huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>

#include "core/log/log.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; older headers lack it, older kernels say EINVAL
#endif

namespace collie::shm {

namespace {

int kernelCollapse(void* address, size_t bytes) {
  return madvise(address, bytes, MADV_COLLAPSE) == 0 ? 0 : errno;
}

}  // namespace

HugePageAdvisor::HugePageAdvisor(size_t minBytes, size_t budgetBytes, Collapse collapse)
    : minBytes_(minBytes),
      budgetBytes_(std::max(budgetBytes, kHugePageBytes)),
      collapse_(collapse != nullptr ? collapse : &kernelCollapse) {}

HugePageAdvisor::Range& HugePageAdvisor::find(uintptr_t begin, uintptr_t end) {
  for (Range& range : ranges_) {
    if (range.begin == begin && range.end == end) return range;
  }
  // A range overlapping a new one is gone (freed, or a different view of the memory):
  // forget it, so that its entry cannot stand for memory mapped there later.
  std::erase_if(ranges_,
                [&](const Range& range) { return range.begin < end && begin < range.end; });
  if (ranges_.size() >= kMaxRanges) {
    ranges_.erase(
        std::min_element(ranges_.begin(), ranges_.end(),
                         [](const Range& a, const Range& b) { return a.lastUse < b.lastUse; }));
  }
  ranges_.push_back(Range{begin, end, begin, 0, false, false, false, 0, 0});
  return ranges_.back();
}

bool HugePageAdvisor::advise(const void* buffer, size_t bytes) {
  if (minBytes_ == 0 || buffer == nullptr || bytes < minBytes_) return false;
  const uintptr_t first = reinterpret_cast<uintptr_t>(buffer);
  const uintptr_t begin = (first + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  const uintptr_t end = (first + bytes) & ~(kHugePageBytes - 1);
  if (end <= begin) return false;
  Range& range = find(begin, end);
  range.lastUse = ++clock_;
  if (range.finished) return !range.refused && !range.skipped;
  if (++range.sightings < 2) return false;
  const uintptr_t stop = std::min(range.end, range.next + budgetBytes_);
  while (range.next < stop) {
    const size_t piece = std::min<size_t>(stop - range.next, kHugePageBytes * 8);
    void* address = reinterpret_cast<void*>(range.next);
    int err = collapse_(address, piece);
    if (err == EAGAIN) err = collapse_(address, piece);  // the kernel drained its batches
    if (err == 0) {
      collapsed_ += piece;
    } else if (err == EINVAL || err == EPERM || err == ENOMEM) {
      // Not collapsible (old kernel, NOHUGEPAGE, a file mapping, a hole): leave the
      // range as it is.
      COLLIE_LOG(INFO, SHM) << "huge pages refused for a buffer of " << bytes
                            << " bytes (madvise MADV_COLLAPSE: errno " << err
                            << "); it stays in small pages";
      range.finished = true;
      range.refused = true;
      return false;
    } else if (err == EAGAIN && ++range.busyCalls < kMaxBusyCalls) {
      // EAGAIN twice (pages busy, no huge page free now): this piece again at the next
      // collective; the range does not count as in huge pages meanwhile.
      return false;
    } else {
      // Busy in kMaxBusyCalls collectives (or an error not named above): the piece stays
      // small, and the range does not count as in huge pages.
      range.skipped = true;
    }
    range.busyCalls = 0;
    range.next += piece;
  }
  range.finished = range.next >= range.end;
  return range.finished && !range.skipped;
}

}  // namespace collie::shm
