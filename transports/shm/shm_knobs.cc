// The shm transport's knobs, registered with the transport (transports/shm/CMakeLists.txt).
#include "core/config/knob_registry.h"

namespace collie {

void registerShmKnobs(KnobRegistry& registry) {
  using namespace knobs;  // NOLINT(build/namespaces)
  (void)registry.add(KnobTable{
      "shm",
      "the shared-memory transport: FIFOs, the one-shot board, cross-memory attach",
      {
          integer("COLLIE_BUFFSIZE", "4M", 4 * kKnobKiB, kKnobGiB,
                  "bytes of each shared-memory FIFO (per peer, channel, direction)",
                  "NCCL_BUFFSIZE"),
          everyRankAlike(integer(
              "COLLIE_SHM_ONESHOT_MAX", "256K", 0, 16 * kKnobKiB * kKnobKiB,
              "largest per-rank input of a one-shot collective through the shared board when "
              "all ranks share a host (0 disables; must be equal on every rank)")),
          integer("COLLIE_SHM_CMA_MAX", "64M", 0, kKnobTiB,
                  "largest out-of-place all-reduce on plain buffers (bytes per rank, above "
                  "COLLIE_SHM_CMA_MIN) that goes single-copy through process_vm_readv/writev "
                  "instead of the FIFO ring; in-place ones go single-copy at every size (0 "
                  "disables both)"),
          integer("COLLIE_SHM_CMA_MIN", "64K", 0, kKnobTiB,
                  "all-reduces on plain buffers above this many bytes per rank go single-copy "
                  "through cross-memory attach even when they fit the one-shot board (not when "
                  "a host's ranks outnumber its cores; every rank uses the largest value any "
                  "rank set)"),
          duration("COLLIE_SHM_SPIN", "50us", 0, kKnobSecond,
                   "how long shm waits spin before blocking on a futex"),
      }});
}

}  // namespace collie
