// The peers' registered buffers (collie/shared_memory.h) in this process: what
// PeerMemoryAccess::resolveWindow() (shm_peer_memory.h) gives core/team's direct
// all-reduce (core/team/direct_share.h).
//
// PeerWindows maps other processes' allocShared regions (/proc/<pid>/fd/<fd>, checked
// by inode) and caches the mappings by the region's random id; a new region of a peer
// that overlaps a cached one in the peer's address space evicts it (the old one was
// freed: a buffer reallocated at the same address). Ranks that are threads of this
// process are used through their addresses.
//
// Thread safety: a PeerWindows is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collie/status.h"
#include "core/memory/shared_region.h"

namespace collie::shm {

class PeerWindows {
 public:
  PeerWindows() = default;
  PeerWindows(const PeerWindows&) = delete;
  PeerWindows& operator=(const PeerWindows&) = delete;
  ~PeerWindows();

  // The address of `bytes` bytes of `window`, published by rank `peer`, in this
  // process. Fails (RemoteError naming the peer) when the window is malformed or its
  // region cannot be mapped.
  Result<uint8_t*> resolve(int peer, const SharedWindow& window, size_t bytes);

 private:
  struct Entry {
    int peer;
    uint64_t regionId;
    uint64_t peerBase;  // the region's address in the peer's process
    void* base;         // where it is mapped here
    size_t bytes;
  };
  std::vector<Entry> entries_;
};

}  // namespace collie::shm
