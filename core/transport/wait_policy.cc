#include "core/transport/wait_policy.h"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace collie {

int cpusAvailable(const WaitKnobs& knobs) {
  const int64_t configured = knobs.cpus;
  if (configured > 0) return static_cast<int>(configured);
  const std::vector<int> cpus = affinityCpus();
  if (!cpus.empty()) return static_cast<int>(cpus.size());
  return std::max(1u, std::thread::hardware_concurrency());
}

std::vector<int> affinityCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
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
