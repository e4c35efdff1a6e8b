#include "core/memory/process_id.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>

namespace collie {
namespace {

std::atomic<int32_t> gPid{0};

void forgetInChild() { gPid.store(0, std::memory_order_relaxed); }

}  // namespace

int32_t currentPid() {
  const int32_t cached = gPid.load(std::memory_order_relaxed);
  if (cached != 0) return cached;
  // Registered before the first id is kept, so a fork after that always resets it.
  static const bool registered = pthread_atfork(nullptr, nullptr, forgetInChild) == 0;
  const auto pid = static_cast<int32_t>(getpid());
  if (registered) gPid.store(pid, std::memory_order_relaxed);
  return pid;
}

}  // namespace collie
