#include "transports/shm/shm_shared.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "core/log/log.h"

namespace collie::shm {
namespace {

constexpr auto kLivenessPeriod = std::chrono::milliseconds(100);

}  // namespace

ShmShared::~ShmShared() {
  if (mine) {
    mine->header()->closed.store(1, std::memory_order_release);
    for (auto& peer : peers) {
      if (peer->segment) ringDoorbell(peer->segment->header());
    }
  }
  for (auto& peer : peers) {
    if (peer->pidfd >= 0) close(peer->pidfd);
  }
}

void ShmShared::checkLiveness(bool force) {
  auto now = std::chrono::steady_clock::now();
  if (!force && now - lastCheck_ < kLivenessPeriod) return;
  lastCheck_ = now;
  for (auto& peer : peers) {
    if (peer->dead || !peer->checkPid) continue;
    if (peer->pidfd >= 0) {
      // A pidfd becomes readable when the process exits (zombies included).
      struct pollfd pfd = {peer->pidfd, POLLIN, 0};
      if (poll(&pfd, 1, 0) > 0) peer->dead = true;
    } else if (kill(peer->pid, 0) != 0 && errno == ESRCH) {
      peer->dead = true;
    }
    if (peer->dead) {
      COLLIE_LOG(WARN, SHM) << "rank " << peer->rank << " (pid " << peer->pid
                            << ") is gone; failing its shm connections";
    }
  }
}

}  // namespace collie::shm
