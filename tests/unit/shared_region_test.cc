// The allocShared table's lookup (core/memory/shared_region.h): a range inside a live
// region is found with its offset, a freed region is gone at once (also right after the
// same lookup succeeded, which the per-thread cache of lookups must not hide), a region
// allocated again is found with a new id, a heap range never, and a fork()ed child's
// window names the child's pid.
#include "core/memory/shared_region.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "collie/shared_memory.h"
#include "core/memory/process_id.h"

namespace collie {
namespace {

constexpr size_t kBytes = 1 << 16;

TEST(SharedRegion, FindsLiveRangesAndForgetsFreedOnes) {
  // Another live region keeps the table from being empty, which a lookup checks first.
  Result<void*> keeper = allocShared(kBytes);
  ASSERT_TRUE(keeper.isOk());
  Result<void*> region = allocShared(kBytes);
  ASSERT_TRUE(region.isOk());
  auto* base = static_cast<uint8_t*>(*region);
  SharedWindow window;
  for (int i = 0; i < 3; ++i) {  // the first lookup, then the remembered one
    ASSERT_TRUE(findSharedWindow(base, kBytes, &window)) << i;
    EXPECT_EQ(window.offset, 0u);
    EXPECT_EQ(window.pid, static_cast<int32_t>(getpid()));
    EXPECT_NE(window.regionId, 0u);
  }
  const uint64_t firstId = window.regionId;
  ASSERT_TRUE(findSharedWindow(base + 64, kBytes - 64, &window));
  EXPECT_EQ(window.offset, 64u);
  EXPECT_FALSE(findSharedWindow(base + 64, kBytes, &window)) << "runs past the region";

  ASSERT_TRUE(freeShared(base).isOk());
  EXPECT_FALSE(findSharedWindow(base, kBytes, &window)) << "a freed region was found";
  EXPECT_FALSE(findSharedWindow(base + 64, kBytes - 64, &window));

  Result<void*> again = allocShared(kBytes);
  ASSERT_TRUE(again.isOk());
  ASSERT_TRUE(findSharedWindow(*again, kBytes, &window));
  EXPECT_NE(window.regionId, firstId);
  ASSERT_TRUE(freeShared(*again).isOk());
  ASSERT_TRUE(freeShared(*keeper).isOk());
}

TEST(SharedRegion, HeapRangesAreNeverFound) {
  Result<void*> region = allocShared(kBytes);  // a live region: the table is not empty
  ASSERT_TRUE(region.isOk());
  std::vector<uint8_t> heap(kBytes);
  SharedWindow window;
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(findSharedWindow(heap.data(), kBytes, &window));
  ASSERT_TRUE(freeShared(*region).isOk());
  EXPECT_FALSE(findSharedWindow(heap.data(), kBytes, &window));
}

TEST(SharedRegion, AForkedChildNamesItsOwnPid) {
  Result<void*> region = allocShared(kBytes);
  ASSERT_TRUE(region.isOk());
  SharedWindow window;
  ASSERT_TRUE(findSharedWindow(*region, kBytes, &window));
  ASSERT_EQ(window.pid, currentPid());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    SharedWindow mine;
    const bool found = findSharedWindow(*region, kBytes, &mine);
    _exit(found && mine.pid == static_cast<int32_t>(getpid()) && currentPid() == getpid() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child saw its parent's pid";
  ASSERT_TRUE(freeShared(*region).isOk());
}

}  // namespace
}  // namespace collie
