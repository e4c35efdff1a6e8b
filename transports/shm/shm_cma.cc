#include "transports/shm/shm_cma.h"

#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "transports/shm/shm_direct.h"

namespace collie::shm {
namespace {

std::atomic<uint64_t> gShares{0};

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

uint64_t crossMemoryShareCount() { return gShares.load(std::memory_order_relaxed); }

Status pullFromPeer(int peer, int32_t pid, uint64_t remote, void* local, size_t bytes) {
  return transfer(false, peer, pid, remote, static_cast<uint8_t*>(local), bytes);
}

Status pushToPeer(int peer, int32_t pid, uint64_t remote, const void* local, size_t bytes) {
  return transfer(true, peer, pid, remote, const_cast<uint8_t*>(static_cast<const uint8_t*>(local)),
                  bytes);
}

Result<CrossMemoryAllReduce::Probe> CrossMemoryAllReduce::probe(
    const std::vector<CrossMemoryRank>& ranks, int rank, size_t bytes, std::string* why) {
  uint8_t sample[64];
  const size_t n = std::min(bytes, sizeof(sample));
  for (int peer = 0; peer < static_cast<int>(ranks.size()); ++peer) {
    if (peer == rank || n == 0) continue;
    // Read the first bytes of its output and write them back: nobody writes outputs
    // before every rank probed, so the bytes stay as they are.
    iovec mine{sample, n};
    iovec theirs{reinterpret_cast<void*>(ranks[peer].output), n};
    const char* call = "process_vm_readv from ";
    ssize_t done = process_vm_readv(ranks[peer].pid, &mine, 1, &theirs, 1, 0);
    if (done == static_cast<ssize_t>(n)) {
      call = "process_vm_writev to ";
      done = process_vm_writev(ranks[peer].pid, &mine, 1, &theirs, 1, 0);
    }
    if (done == static_cast<ssize_t>(n)) continue;
    const int err = done < 0 ? errno : EFAULT;
    if (deniedErrno(err)) {
      *why = call + rankName(peer, ranks[peer].pid) + " failed: " + std::strerror(err);
      return Probe::kDenied;
    }
    // Not a denial: name the peer (gone, bad address).
    COLLIE_RETURN_IF_ERROR(transfer(false, peer, ranks[peer].pid, ranks[peer].output, sample, n));
  }
  return Probe::kAllowed;
}

Result<CrossMemoryAllReduce::Probe> CrossMemoryAllReduce::probeReads(
    const std::vector<CrossMemoryRank>& ranks, const std::vector<int>& sources, size_t bytes,
    std::string* why) {
  uint8_t sample[64];
  const size_t n = std::min(bytes, sizeof(sample));
  for (int peer : sources) {
    if (n == 0) break;
    iovec mine{sample, n};
    iovec theirs{reinterpret_cast<void*>(ranks[peer].input), n};
    const ssize_t done = process_vm_readv(ranks[peer].pid, &mine, 1, &theirs, 1, 0);
    if (done == static_cast<ssize_t>(n)) continue;
    const int err = done < 0 ? errno : EFAULT;
    if (deniedErrno(err)) {
      *why = "process_vm_readv from " + rankName(peer, ranks[peer].pid) +
             " failed: " + std::strerror(err);
      return Probe::kDenied;
    }
    // Not a denial: name the peer (gone, bad address).
    COLLIE_RETURN_IF_ERROR(transfer(false, peer, ranks[peer].pid, ranks[peer].input, sample, n));
  }
  return Probe::kAllowed;
}

Status CrossMemoryAllReduce::reduceShare(const std::vector<CrossMemoryRank>& ranks, int rank,
                                         const void* input, void* output, size_t count,
                                         DataType dtype, ReduceOp op) {
  const int n = static_cast<int>(ranks.size());
  const size_t es = dataTypeSize(dtype);
  const size_t peers = static_cast<size_t>(std::max(1, n - 1));
  const ShareRange share = shareRange(count, es, n, rank);
  const size_t budget = (share.end - share.begin) * es >= kCrossMemoryLargeShareBytes
                            ? kCrossMemoryLargeTileBytes
                            : kCrossMemoryTileBytes;
  const size_t tileBytes = std::max<size_t>(4096, budget / peers / 64 * 64);
  const size_t need = (peers + 1) * tileBytes;  // a pulled tile per peer + scratch
  if (bufferBytes_ < need) {
    buffer_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, need)));
    if (!buffer_) return systemError("shm: allocating the cross-memory tiles", ENOMEM);
    bufferBytes_ = need;
  }
  gShares.fetch_add(1, std::memory_order_relaxed);
  const size_t tile = tileBytes / es;
  uint8_t* scratch = buffer_.get() + peers * tileBytes;
  std::vector<const uint8_t*> sources(n);
  for (size_t first = share.begin; first < share.end; first += tile) {
    const size_t elems = std::min(tile, share.end - first);
    const size_t offset = first * es;
    uint8_t* pulled = buffer_.get();
    for (int r = 0; r < n; ++r) {
      if (r == rank) {
        sources[r] = static_cast<const uint8_t*>(input) + offset;
        continue;
      }
      COLLIE_RETURN_IF_ERROR(
          pullFromPeer(r, ranks[r].pid, ranks[r].input + offset, pulled, elems * es));
      sources[r] = pulled;
      pulled += tileBytes;
    }
    uint8_t* result = static_cast<uint8_t*>(output) + offset;
    reduceInOrder(result, sources, elems, dtype, op, scratch);
    for (int r = 0; r < n; ++r) {
      if (r == rank) continue;
      COLLIE_RETURN_IF_ERROR(
          pushToPeer(r, ranks[r].pid, ranks[r].output + offset, result, elems * es));
    }
  }
  return Status();
}

}  // namespace collie::shm
