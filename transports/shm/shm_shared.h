// ShmShared: what the shared-memory transport, its connections and its board share: this
// rank's segment, the peers' segments and processes, and whether each peer is alive.
//
// Owned jointly by the transport and its connections; the last one out marks this rank's
// segment closed and wakes the peers so that they notice. A peer is dead once its
// process exited (pidfd, else kill(pid, 0)), checked at most every 100 ms unless forced.
//
// Thread safety: used by the one thread that uses the transport and its connections.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "transports/shm/shm_segment.h"

namespace collie::shm {

class ShmConnection;

struct PeerState {
  int rank = -1;
  std::unique_ptr<Segment> segment;  // the peer's segment, mapped here
  int pid = 0;
  int pidfd = -1;         // -1 when the pid cannot be watched (same process, other pid ns)
  bool checkPid = false;  // pid is in our namespace and is not our own process
  bool dead = false;
};

// Owned jointly by the transport and its connections; the last one out marks this
// rank's segment closed and wakes the peers so that they notice.
class ShmShared {
 public:
  explicit ShmShared(int rank) : rank_(rank) {}
  ~ShmShared();

  int rank() const { return rank_; }
  std::unique_ptr<Segment> mine;
  std::vector<std::unique_ptr<PeerState>> peers;
  std::vector<ShmConnection*> connections;

  // Looks for dead peer processes, at most every 100 ms unless `force`.
  void checkLiveness(bool force);

 private:
  int rank_;
  std::chrono::steady_clock::time_point lastCheck_{};
};

}  // namespace collie::shm
