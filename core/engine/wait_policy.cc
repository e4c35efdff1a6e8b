#include "core/engine/wait_policy.h"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace collie {

int cpusAvailable(const Config& config) {
  const int64_t configured = config.integer("COLLIE_CPUS");
  if (configured > 0) return static_cast<int>(configured);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

WaitPolicy waitPolicyFor(std::chrono::microseconds busyPoll, int localRanks, int cpus) {
  WaitPolicy policy;
  policy.busyPoll = busyPoll;
  policy.pureSpin = std::min(kPureSpin, busyPoll);
  policy.oversubscribed = localRanks > std::max(cpus, 1);
  if (policy.oversubscribed) policy.pureSpin = std::chrono::microseconds(0);
  return policy;
}

}  // namespace collie
