// The shm transport's single copy through the peers' memory (core/transport/peer_memory.h),
// owned by its team board (shm_board.h) for ranks that all share one host:
// - registered windows through PeerWindows (shm_peer_windows.h);
// - cross-memory attach (process_vm_readv/writev) to the pid each peer's segment gave at
//   connect; ranks that are threads of one process go through the same system call on
//   their own pid, so a bad address published by a peer fails with EFAULT instead of a
//   crash. A gone process (ESRCH) is a RemoteError naming the peer; a denied call
//   (EPERM, EACCES, ENOSYS: seccomp, Yama, other uid) is what probe() reports, so that
//   the caller can fall back on every rank alike;
// - huge pages for the buffers cma pins, through HugePageAdvisor (shm_huge_pages.h).
//
// Thread safety: one thread at a time (PeerWindows' cache, the advisor's budget).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/transport/peer_memory.h"
#include "transports/shm/shm_huge_pages.h"
#include "transports/shm/shm_peer_windows.h"

namespace collie::shm {

class PeerMemoryAccess final : public PeerMemory {
 public:
  // `pids`: per rank, the process cross-memory attach reaches. `hugePageMinBytes`:
  // buffers below it are not collapsed (0: never), within `hugePageBudgetBytes` per call.
  PeerMemoryAccess(std::vector<int32_t> pids, size_t hugePageMinBytes,
                   size_t hugePageBudgetBytes = kHugePageBudgetBytes);

  Result<uint8_t*> resolveWindow(int peer, const SharedWindow& window, size_t bytes) override;
  Status pull(int peer, uint64_t remote, void* local, size_t bytes) override;
  Status push(int peer, uint64_t remote, const void* local, size_t bytes) override;
  Result<bool> probe(int peer, uint64_t remote, size_t bytes, bool write,
                     std::string* why) override;
  bool adviseHugePages(const void* p, size_t bytes) override;

 private:
  std::vector<int32_t> pids_;  // per rank
  PeerWindows windows_;
  HugePageAdvisor hugePages_;  // the plain buffers cma collectives publish
};

}  // namespace collie::shm
