// Transparent huge pages for the plain buffers that cross-memory attach reads and writes.
//
// process_vm_readv/writev pin every page of the peer's range, and walk its page tables,
// on every call. With 4 KiB pages that is a third of a cma all-reduce's time
// (docs/decisions/roofline-shm.md); a range backed by 2 MiB pages pins one folio per
// 512 pages. HugePageAdvisor asks the kernel to back a buffer's 2 MiB-aligned interior
// with huge pages (madvise MADV_COLLAPSE, which copies the small pages into huge ones
// at once) from the second collective that publishes the same range: a buffer used
// twice is likely used again (a training loop's gradients), and one used once is not
// worth the copy. At most `budgetBytes` of a buffer are collapsed per call, so no
// collective stalls for long; the rest follows on the next calls. A range is collapsed once: if the
// program later frees it and maps fresh memory at the same place, that memory stays in
// small pages (slower, never wrong).
//
// Only a hint: the contents, the addresses and the mapping's kind are unchanged (private
// memory stays private, so fork() still copies on write). The kernel refuses memory the
// program marked MADV_NOHUGEPAGE, file mappings, and everything before Linux 6.1; a
// refused range is not asked again. A piece the kernel finds busy (EAGAIN: pages just
// faulted in may still sit in a CPU's LRU batch) is asked once more at once, then again
// at the buffer's next collectives, kMaxBusyCalls in all, before it stays small; until
// then the buffer does not count as in huge pages. The partial 2 MiB at either end stay
// small pages (they may hold other objects; collapsing never changes them, but it would
// copy them for no gain).
//
// Thread safety: one thread at a time (the board's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace collie::shm {

// What one buffer's collapsing may add to one collective: 0.1-0.7 s on the test VM
// (0.35-2.2 ms per 2 MiB, most of it the host backing fresh huge pages), a one-time
// cost that saves about 10 ms per later 64 MiB call; far inside any deadline.
constexpr size_t kHugePageBudgetBytes = size_t{256} << 20;

class HugePageAdvisor {
 public:
  // madvise(MADV_COLLAPSE) over [address, address + bytes): 0, or the errno.
  using Collapse = int (*)(void* address, size_t bytes);

  // `minBytes`: smaller buffers are left alone (0: the advisor does nothing).
  // `collapse`: null for the kernel's; tests pass one that fails on purpose.
  HugePageAdvisor(size_t minBytes, size_t budgetBytes, Collapse collapse = nullptr);

  // Called with each buffer a cma collective is about to publish (input and output).
  // True when the buffer's interior is now in huge pages as far as this advisor knows
  // (collapsed to the end, nothing refused or skipped).
  bool advise(const void* buffer, size_t bytes);

  // Bytes this advisor has collapsed into huge pages so far (tests, logs).
  uint64_t collapsedBytes() const { return collapsed_; }

  static constexpr size_t kHugePageBytes = size_t{2} << 20;
  // Collectives in which a busy piece is asked again before it stays small.
  static constexpr uint32_t kMaxBusyCalls = 3;

 private:
  struct Range {
    uintptr_t begin = 0;  // the interior, 2 MiB-aligned
    uintptr_t end = 0;
    uintptr_t next = 0;  // where collapsing resumes
    uint32_t sightings = 0;
    bool finished = false;  // collapsed to the end, or refused
    bool refused = false;
    bool skipped = false;    // some piece was busy (EAGAIN) and stayed in small pages
    uint32_t busyCalls = 0;  // collectives in which the piece at `next` was busy
    uint64_t lastUse = 0;
  };
  Range& find(uintptr_t begin, uintptr_t end);

  size_t minBytes_;
  size_t budgetBytes_;
  Collapse collapse_;
  uint64_t clock_ = 0;
  uint64_t collapsed_ = 0;
  std::vector<Range> ranges_;  // at most kMaxRanges, the least recently used replaced
  static constexpr size_t kMaxRanges = 32;
};

}  // namespace collie::shm
