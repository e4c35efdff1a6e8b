// HugePageAdvisor (transports/shm/shm_huge_pages.h) on real anonymous memory: which
// calls collapse, that the bytes and the mapping's privacy survive, that refused and
// replaced ranges are left alone. /proc/self/smaps shows what the kernel did.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "tests/support/huge_page_usage.h"
#include "transports/shm/shm_huge_pages.h"

namespace collie::shm {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Anonymous private memory of `bytes` starting `offset` bytes past a 2 MiB boundary,
// filled with a pattern; unmapped at the end of the test.
class Buffer {
 public:
  Buffer(size_t bytes, size_t offset) : bytes_(bytes) {
    mappedBytes_ = bytes + offset + 2 * HugePageAdvisor::kHugePageBytes;
    mapped_ =
        mmap(nullptr, mappedBytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    const uintptr_t aligned = (reinterpret_cast<uintptr_t>(mapped_) + kHugeMask) & ~kHugeMask;
    data_ = reinterpret_cast<uint8_t*>(aligned + offset);
    for (size_t i = 0; i < bytes_; ++i) data_[i] = pattern(i);
  }
  ~Buffer() { munmap(mapped_, mappedBytes_); }
  uint8_t* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  static uint8_t pattern(size_t i) { return static_cast<uint8_t>((i * 131 + i / 4096) & 0xff); }
  size_t firstWrongByte() const {
    for (size_t i = 0; i < bytes_; ++i) {
      if (data_[i] != pattern(i)) return i;
    }
    return SIZE_MAX;
  }

 private:
  static constexpr uintptr_t kHugeMask = HugePageAdvisor::kHugePageBytes - 1;
  void* mapped_ = nullptr;
  size_t mappedBytes_ = 0;
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
};

using testing::hugePageKiB;

// Whether this kernel collapses plain anonymous memory at all (Linux 6.1+, THP built in).
bool kernelCollapses(std::string* why) {
  Buffer probe(4 * kMiB, 0);
  HugePageAdvisor advisor(1, 4 * kMiB);
  advisor.advise(probe.data(), probe.bytes());
  if (advisor.advise(probe.data(), probe.bytes())) return true;
  *why =
      "this kernel does not collapse anonymous memory into huge pages (MADV_COLLAPSE: "
      "Linux 6.1+, transparent huge pages built in)";
  return false;
}

#define SKIP_WITHOUT_COLLAPSE()                      \
  do {                                               \
    std::string why;                                 \
    if (!kernelCollapses(&why)) GTEST_SKIP() << why; \
  } while (0)

TEST(HugePageAdvisor, CollapsesTheInteriorFromTheSecondSightingAndKeepsTheBytes) {
  SKIP_WITHOUT_COLLAPSE();
  // 9 MiB starting 12 bytes past a 2 MiB boundary: the interior is [2, 8) MiB.
  Buffer buffer(9 * kMiB, 12);
  HugePageAdvisor advisor(4 * kMiB, 256 * kMiB);
  const size_t before = hugePageKiB(buffer.data(), buffer.bytes());
  EXPECT_FALSE(advisor.advise(buffer.data(), buffer.bytes()));
  EXPECT_EQ(advisor.collapsedBytes(), 0u);
  EXPECT_TRUE(advisor.advise(buffer.data(), buffer.bytes()));
  EXPECT_EQ(advisor.collapsedBytes(), 6 * kMiB);
  EXPECT_GE(hugePageKiB(buffer.data(), buffer.bytes()), before + 6 * 1024);
  EXPECT_EQ(buffer.firstWrongByte(), SIZE_MAX);
  // Once collapsed, later calls ask nothing more.
  EXPECT_TRUE(advisor.advise(buffer.data(), buffer.bytes()));
  EXPECT_EQ(advisor.collapsedBytes(), 6 * kMiB);
}

TEST(HugePageAdvisor, ABudgetSpreadsTheCollapseOverCalls) {
  SKIP_WITHOUT_COLLAPSE();
  Buffer buffer(16 * kMiB, 0);
  HugePageAdvisor advisor(4 * kMiB, 4 * kMiB);
  EXPECT_FALSE(advisor.advise(buffer.data(), buffer.bytes()));
  EXPECT_FALSE(advisor.advise(buffer.data(), buffer.bytes()));
  EXPECT_EQ(advisor.collapsedBytes(), 4 * kMiB);
  EXPECT_FALSE(advisor.advise(buffer.data(), buffer.bytes()));
  EXPECT_FALSE(advisor.advise(buffer.data(), buffer.bytes()));
  EXPECT_TRUE(advisor.advise(buffer.data(), buffer.bytes()));
  EXPECT_EQ(advisor.collapsedBytes(), 16 * kMiB);
  EXPECT_EQ(buffer.firstWrongByte(), SIZE_MAX);
}

TEST(HugePageAdvisor, SmallBuffersAndTheZeroKnobAreLeftAlone) {
  Buffer buffer(8 * kMiB, 0);
  HugePageAdvisor small(16 * kMiB, 256 * kMiB);
  HugePageAdvisor off(0, 256 * kMiB);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(small.advise(buffer.data(), buffer.bytes()));
    EXPECT_FALSE(off.advise(buffer.data(), buffer.bytes()));
  }
  // No whole 2 MiB inside: nothing to collapse whatever the size floor.
  Buffer unaligned(3 * kMiB, 4096);
  HugePageAdvisor any(1, 256 * kMiB);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(any.advise(unaligned.data(), unaligned.bytes()));
  EXPECT_EQ(small.collapsedBytes() + off.collapsedBytes() + any.collapsedBytes(), 0u);
}

TEST(HugePageAdvisor, MemoryMarkedNoHugePageIsRefusedOnceAndNotAskedAgain) {
  SKIP_WITHOUT_COLLAPSE();
  Buffer buffer(8 * kMiB, 0);
  ASSERT_EQ(madvise(buffer.data(), buffer.bytes(), MADV_NOHUGEPAGE), 0);
  HugePageAdvisor advisor(4 * kMiB, 256 * kMiB);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(advisor.advise(buffer.data(), buffer.bytes()));
  EXPECT_EQ(advisor.collapsedBytes(), 0u);
  EXPECT_EQ(hugePageKiB(buffer.data(), buffer.bytes()), 0u);
  EXPECT_EQ(buffer.firstWrongByte(), SIZE_MAX);
}

// A kernel that finds the pages busy (EAGAIN) the first `gBusy` times it is asked, then
// collapses; counts the calls. No memory is touched: the advisor only passes addresses.
int gBusy = 0;
int gCalls = 0;
int busyThenCollapse(void*, size_t) {
  ++gCalls;
  return gCalls <= gBusy ? EAGAIN : 0;
}

TEST(HugePageAdvisor, ABusyPieceIsAskedAgainAtOnceThenAtTheNextCalls) {
  const size_t interior = 8 * kMiB;  // one piece (the advisor asks 16 MiB at a time)
  alignas(64) static uint8_t anchor;
  // An address range only: 2 MiB-aligned, never dereferenced.
  const auto* base = reinterpret_cast<const void*>(
      (reinterpret_cast<uintptr_t>(&anchor) + 64 * kMiB) & ~(HugePageAdvisor::kHugePageBytes - 1));
  // Busy once: the immediate second ask collapses it, in the same call.
  {
    gBusy = 1, gCalls = 0;
    HugePageAdvisor advisor(4 * kMiB, 256 * kMiB, &busyThenCollapse);
    EXPECT_FALSE(advisor.advise(base, interior));  // first sighting
    EXPECT_TRUE(advisor.advise(base, interior));
    EXPECT_EQ(gCalls, 2);
    EXPECT_EQ(advisor.collapsedBytes(), interior);
  }
  // Busy in two calls (twice each): not in huge pages until the third call collapses it.
  {
    gBusy = 4, gCalls = 0;
    HugePageAdvisor advisor(4 * kMiB, 256 * kMiB, &busyThenCollapse);
    EXPECT_FALSE(advisor.advise(base, interior));
    EXPECT_FALSE(advisor.advise(base, interior));
    EXPECT_FALSE(advisor.advise(base, interior));
    EXPECT_TRUE(advisor.advise(base, interior));
    EXPECT_EQ(gCalls, 5);
    EXPECT_TRUE(advisor.advise(base, interior));
    EXPECT_EQ(gCalls, 5) << "a finished range is not asked again";
  }
  // Busy in kMaxBusyCalls calls: the piece stays small for good, and is not asked again.
  {
    gBusy = 1000, gCalls = 0;
    HugePageAdvisor advisor(4 * kMiB, 256 * kMiB, &busyThenCollapse);
    EXPECT_FALSE(advisor.advise(base, interior));
    for (uint32_t i = 0; i < HugePageAdvisor::kMaxBusyCalls + 3; ++i) {
      EXPECT_FALSE(advisor.advise(base, interior));
    }
    EXPECT_EQ(gCalls, static_cast<int>(2 * HugePageAdvisor::kMaxBusyCalls));
    EXPECT_EQ(advisor.collapsedBytes(), 0u);
  }
}

TEST(HugePageAdvisor, AnOverlappingRangeReplacesTheOldOne) {
  SKIP_WITHOUT_COLLAPSE();
  Buffer buffer(12 * kMiB, 0);
  HugePageAdvisor advisor(4 * kMiB, 256 * kMiB);
  advisor.advise(buffer.data(), 8 * kMiB);
  // Another view of the same memory (freed and reallocated larger, say): its first
  // sighting collapses nothing, and the old range's count does not carry over.
  EXPECT_FALSE(advisor.advise(buffer.data(), 12 * kMiB));
  EXPECT_FALSE(advisor.advise(buffer.data(), 8 * kMiB));
  EXPECT_EQ(advisor.collapsedBytes(), 0u);
  EXPECT_TRUE(advisor.advise(buffer.data(), 8 * kMiB));
  EXPECT_EQ(advisor.collapsedBytes(), 8 * kMiB);
}

TEST(HugePageAdvisor, ACollapsedBufferStaysPrivateAcrossFork) {
  SKIP_WITHOUT_COLLAPSE();
  Buffer buffer(8 * kMiB, 0);
  HugePageAdvisor advisor(4 * kMiB, 256 * kMiB);
  advisor.advise(buffer.data(), buffer.bytes());
  ASSERT_TRUE(advisor.advise(buffer.data(), buffer.bytes()));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::memset(buffer.data(), 0xee, buffer.bytes());  // copy on write: the parent's stay
    _exit(buffer.data()[4 * kMiB] == 0xee ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(buffer.firstWrongByte(), SIZE_MAX);
}

}  // namespace
}  // namespace collie::shm
