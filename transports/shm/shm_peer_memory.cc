#include "transports/shm/shm_peer_memory.h"

#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace collie::shm {
namespace {

bool deniedErrno(int err) { return err == EPERM || err == EACCES || err == ENOSYS; }

std::string rankName(int peer, int32_t pid) {
  return "rank " + std::to_string(peer) + " (pid " + std::to_string(pid) + ")";
}

// process_vm_readv (pull) or process_vm_writev (push) of `bytes` bytes, to completion.
Status transfer(bool write, int peer, int32_t pid, uint64_t remote, uint8_t* local, size_t bytes) {
  while (bytes > 0) {
    iovec mine{local, bytes};
    iovec theirs{reinterpret_cast<void*>(remote), bytes};
    const ssize_t got = write ? process_vm_writev(pid, &mine, 1, &theirs, 1, 0)
                              : process_vm_readv(pid, &mine, 1, &theirs, 1, 0);
    if (got > 0) {
      local += got;
      remote += static_cast<uint64_t>(got);
      bytes -= static_cast<size_t>(got);
      continue;
    }
    const int err = got < 0 ? errno : EFAULT;
    if (err == EINTR) continue;
    if (err == ESRCH) {
      return remoteError(
          "shm: " + rankName(peer, pid) + " is gone (cross-memory attach: no such process)", peer);
    }
    if (err == EFAULT) {
      return remoteError("shm: " + rankName(peer, pid) +
                             " published a buffer that is not mapped in its process (did it "
                             "free the buffer while the collective ran?)",
                         peer);
    }
    return systemError(std::string("shm: ") +
                           (write ? "process_vm_writev to " : "process_vm_readv from ") +
                           rankName(peer, pid) + " (set COLLIE_SHM_CMA_MAX=0 to use the FIFO ring)",
                       err);
  }
  return Status();
}

}  // namespace

PeerMemoryAccess::PeerMemoryAccess(std::vector<int32_t> pids, size_t hugePageMinBytes,
                                   size_t hugePageBudgetBytes)
    : pids_(std::move(pids)), hugePages_(hugePageMinBytes, hugePageBudgetBytes) {}

Result<uint8_t*> PeerMemoryAccess::resolveWindow(int peer, const SharedWindow& window,
                                                 size_t bytes) {
  return windows_.resolve(peer, window, bytes);
}

Status PeerMemoryAccess::pull(int peer, uint64_t remote, void* local, size_t bytes) {
  return transfer(false, peer, pids_[peer], remote, static_cast<uint8_t*>(local), bytes);
}

Status PeerMemoryAccess::push(int peer, uint64_t remote, const void* local, size_t bytes) {
  return transfer(true, peer, pids_[peer], remote,
                  const_cast<uint8_t*>(static_cast<const uint8_t*>(local)), bytes);
}

Result<bool> PeerMemoryAccess::probe(int peer, uint64_t remote, size_t bytes, bool write,
                                     std::string* why) {
  const int32_t pid = pids_[peer];
  uint8_t sample[64];
  const size_t n = std::min(bytes, sizeof(sample));
  if (n == 0) return true;
  // Read the first bytes and, to probe writing, write them back: the caller makes sure
  // nobody writes there before every rank probed, so the bytes stay as they are.
  iovec mine{sample, n};
  iovec theirs{reinterpret_cast<void*>(remote), n};
  const char* call = "process_vm_readv from ";
  ssize_t done = process_vm_readv(pid, &mine, 1, &theirs, 1, 0);
  if (write && done == static_cast<ssize_t>(n)) {
    call = "process_vm_writev to ";
    done = process_vm_writev(pid, &mine, 1, &theirs, 1, 0);
  }
  if (done == static_cast<ssize_t>(n)) return true;
  const int err = done < 0 ? errno : EFAULT;
  if (deniedErrno(err)) {
    *why = call + rankName(peer, pid) + " failed: " + std::strerror(err);
    return false;
  }
  // Not a denial: name the peer (gone, bad address).
  COLLIE_RETURN_IF_ERROR(transfer(false, peer, pid, remote, sample, n));
  return true;
}

bool PeerMemoryAccess::adviseHugePages(const void* p, size_t bytes) {
  return hugePages_.advise(p, bytes);
}

}  // namespace collie::shm
