// Doorbell futex helpers (see shm_layout.h).
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

#include "transports/shm/shm_layout.h"

namespace collie::shm {
namespace {

uint32_t* futexWord(std::atomic<uint32_t>* word) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return reinterpret_cast<uint32_t*>(word);
}

}  // namespace

void ringDoorbell(SegmentHeader* header) {
  // Pairs with the sleeper's seq_cst increment of `sleepers` followed by its check of
  // the FIFOs: either it sees our data, or we see it sleeping (Dekker).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (header->sleepers.load(std::memory_order_relaxed) == 0) return;
  header->doorbell.fetch_add(1, std::memory_order_seq_cst);
  // Shared (not PRIVATE) futex: the word lives in memory mapped by several processes.
  syscall(SYS_futex, futexWord(&header->doorbell), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void waitDoorbell(SegmentHeader* header, uint32_t seen, int64_t timeoutMicros) {
  if (timeoutMicros <= 0) return;
  struct timespec timeout;
  timeout.tv_sec = timeoutMicros / 1000000;
  timeout.tv_nsec = (timeoutMicros % 1000000) * 1000;
  // EAGAIN (value changed), EINTR and ETIMEDOUT all just return: callers re-check.
  syscall(SYS_futex, futexWord(&header->doorbell), FUTEX_WAIT, seen, &timeout, nullptr, 0);
}

}  // namespace collie::shm
