// The waiting knobs: what a rank's waits need to know about its host
// (core/transport/wait_policy.h), read by the engine and by the shm transport.
#include "core/config/knob_reader.h"
#include "core/config/knob_registry.h"
#include "core/transport/wait_policy.h"

namespace collie {

void registerWaitKnobs(KnobRegistry& registry) {
  (void)registry.add(KnobTable{
      "wait",
      "how a rank waits for its peers: the CPUs its host gives its ranks",
      {
          knobs::integer(
              "COLLIE_CPUS", "0", 0, 1 << 20,
              "CPUs this rank's host gives its ranks (0: those of the process's affinity "
              "mask; set it where a CPU quota limits a container): with more ranks on the "
              "host than these, waits yield from the start and shm's board takes every "
              "size it carries"),
      },
      [](const Config& config) { return WaitKnobs::parse(config).status(); }});
}

Result<WaitKnobs> WaitKnobs::parse(const Config& config) {
  KnobReader read(config);
  WaitKnobs knobs;
  knobs.cpus = read.integer("COLLIE_CPUS");
  return read.finish(knobs);
}

}  // namespace collie
