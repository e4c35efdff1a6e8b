// WaitPolicy: how a rank waits for its peers, adapted to whether the ranks of its host
// outnumber the CPUs they may run on (oversubscribed, as CPU-only training often is).
//
// Contract:
// - cpusAvailable(knobs) is COLLIE_CPUS when set above 0, else the CPUs in the calling
//   thread's affinity mask (sched_getaffinity), else hardware_concurrency(); at least 1.
//   A container's CPU quota does not show in the mask: COLLIE_CPUS says it.
// - waitPolicyFor() is pure. With a core per rank it keeps the configured poll: spin
//   (pure for kPureSpin, then yielding) for busyPoll, then block in the transports.
//   Oversubscribed (localRanks > cpus) the peer a waiter waits for may be queued behind
//   it on its core, so the waiter yields from its first idle turn (pureSpin 0): pure
//   spinning made it hold the core that the rank holding the data needed. It still polls
//   (yielding) before it blocks: blocking at once cost a futex wake-up per step
//   (bench/results/performance-changes.md, "The wait policy where ranks outnumber cores").
// - The engine polls with COLLIE_BUSY_POLL, the shm transport with COLLIE_SHM_SPIN.
// - The policy changes how long a rank burns its core, never what it plans: nothing
//   here feeds the tuner, so ranks may hold different policies (different affinity
//   masks). What does change a plan (shm's board-versus-cma crossover) is agreed by the
//   transport's team when it connects (transports/shm/shm_board.h).
//
// Thread safety: cpusAvailable() and affinityCpus() read the calling thread's affinity;
// all are safe to call from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "collie/status.h"
#include "core/config/config.h"

namespace collie {

struct WaitPolicy {
  bool oversubscribed = false;
  std::chrono::microseconds pureSpin{5};   // spin without yielding this long
  std::chrono::microseconds busyPoll{50};  // then yield-spin up to this, then block
};

// The pure spin with a core per rank: a peer on another core usually answers within it.
inline constexpr std::chrono::microseconds kPureSpin{5};

// The waiting knobs (their table is in wait_knobs.cc): COLLIE_CPUS lives here, the
// lowest layer that reads it, because both the engine and the shm transport size their
// waits by it.
struct WaitKnobs {
  int64_t cpus = 0;  // COLLIE_CPUS; 0: the affinity mask's
  // Fails naming a knob this parse reads that no table declares (a bug), or a value the
  // snapshot refused.
  static Result<WaitKnobs> parse(const Config& config);
};

int cpusAvailable(const WaitKnobs& knobs);
// The CPUs in the calling thread's affinity mask, in increasing order; empty when the mask
// cannot be read.
std::vector<int> affinityCpus();

WaitPolicy waitPolicyFor(std::chrono::microseconds busyPoll, int localRanks, int cpus);

}  // namespace collie
