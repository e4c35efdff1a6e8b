#include "transports/shm/shm_peer_windows.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "core/memory/process_id.h"

namespace collie::shm {

PeerWindows::~PeerWindows() {
  for (const Entry& e : entries_) munmap(e.base, e.bytes);
}

Result<uint8_t*> PeerWindows::resolve(int peer, const SharedWindow& window, size_t bytes) {
  // Built only on the paths that use it: resolve runs per peer and buffer in every call.
  auto who = [&] { return "rank " + std::to_string(peer) + "'s registered buffer"; };
  if (window.regionId == 0 || window.offset > window.regionBytes ||
      bytes > window.regionBytes - window.offset) {
    return remoteError(who() + " is malformed (offset or size outside its region)", peer);
  }
  if (window.pid == currentPid()) {
    return reinterpret_cast<uint8_t*>(window.base) + window.offset;  // a thread of ours
  }
  for (const Entry& e : entries_) {
    if (e.peer == peer && e.regionId == window.regionId && e.bytes == window.regionBytes) {
      return static_cast<uint8_t*>(e.base) + window.offset;
    }
  }
  // A region of this peer that overlaps the new one in the peer's address space was
  // freed (two live regions cannot overlap): a buffer reallocated at the same address.
  // Unmap it now instead of keeping the freed memory alive until the cap below.
  std::erase_if(entries_, [&](const Entry& e) {
    const bool stale = e.peer == peer && e.peerBase < window.base + window.regionBytes &&
                       window.base < e.peerBase + e.bytes;
    if (stale) munmap(e.base, e.bytes);
    return stale;
  });
  if (entries_.size() >= 256) {  // a program that keeps allocating: start over
    for (const Entry& e : entries_) munmap(e.base, e.bytes);
    entries_.clear();
  }
  Result<void*> mapped = mapSharedWindow(window, who(), peer);
  if (!mapped.isOk()) {
    return mapped.status().withContext("shm (deregister the buffers to use the copy path)");
  }
  void* base = *mapped;
  entries_.push_back(Entry{peer, window.regionId, window.base, base, window.regionBytes});
  return static_cast<uint8_t*>(base) + window.offset;
}

}  // namespace collie::shm
