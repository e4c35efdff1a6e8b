// The process-wide table of allocShared() regions and of the ranges registered on them.
// Every live region is shareable; registrations are kept for registerBuffer's checks.
//
// A SharedWindow describes one registered range so that another process of the same
// host (same user, same pid namespace) can map it: it opens /proc/<pid>/fd/<fd>,
// checks the inode, and maps `regionBytes` bytes; the range starts `offset` bytes in.
// Ranks that are threads of one process (pid equal) use `base + offset` directly.
// A registration belongs to an owner (a communicator) and is dropped with it.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collie/status.h"

namespace collie {

struct SharedWindow {
  uint64_t regionId = 0;  // random, never 0; distinguishes reused fds
  int32_t pid = 0;
  int32_t fd = -1;
  uint64_t inode = 0;
  uint64_t regionBytes = 0;
  uint64_t base = 0;  // the region's address in the owning process
  uint64_t offset = 0;
};

// Registers [ptr, ptr + bytes) for `owner`. InvalidArgument when the range is not
// inside one allocShared() region.
Status registerSharedRange(const void* owner, const void* ptr, size_t bytes);
// Drops one registration of `ptr` by `owner`; NotFound when there is none.
Status deregisterSharedRange(const void* owner, const void* ptr);
// Drops every registration of `owner`.
void dropSharedRanges(const void* owner);
// True, with *window set, when [ptr, ptr + bytes) lies inside one live allocShared()
// region, registered or not (a freed region is gone from the table at once).
bool findSharedWindow(const void* ptr, size_t bytes, SharedWindow* window);
// Maps the whole region of a window published by another process (opens
// /proc/<pid>/fd/<fd>, checks inode and size, maps it shared). Returns the region's
// base here; unmap with munmap(base, window.regionBytes). SystemError when it cannot
// be opened or mapped, RemoteError (naming `peer`) when it changed; `who` names it.
Result<void*> mapSharedWindow(const SharedWindow& window, const std::string& who, int peer);

}  // namespace collie
