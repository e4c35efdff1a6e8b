// The shm transport's knobs, registered with the transport (transports/shm/CMakeLists.txt).
#include "transports/shm/shm_knobs.h"

#include "core/config/knob_reader.h"
#include "core/config/knob_registry.h"

namespace collie {

void registerShmKnobs(KnobRegistry& registry) {
  using namespace knobs;  // NOLINT(build/namespaces)
  (void)registry.add(KnobTable{
      "shm",
      "the shared-memory transport: FIFOs, and its team collectives (board, direct, cma)",
      {
          integer("COLLIE_BUFFSIZE", "4M", 4 * kKnobKiB, kKnobGiB,
                  "bytes of each shared-memory FIFO (per peer, channel, direction)",
                  "NCCL_BUFFSIZE"),
          everyRankAlike(integer(
              "COLLIE_SHM_ONESHOT_MAX", "2M", 0, 16 * kKnobKiB * kKnobKiB,
              "largest part one rank publishes on the board (the board team algorithm, when "
              "all ranks share a host; 0 turns shm's team collectives off: no board, direct "
              "or cma; must be equal on every rank)")),
          integer("COLLIE_SHM_CMA_MAX", "64M", 0, kKnobTiB,
                  "largest out-of-place all-reduce on plain buffers (bytes per rank) that the "
                  "cma team algorithm (single copy through process_vm_readv/writev) takes when "
                  "the tuner tries it; in-place ones at every size (0 on any rank: no cma)"),
          integer("COLLIE_SHM_CMA_MIN", "2M", 0, kKnobTiB,
                  "bytes per rank at which the tuner's model has the single-copy all-reduces "
                  "(cma, direct) cost what the board costs, the measured crossover: above it "
                  "they go first (not where a host's ranks outnumber its cores; every rank "
                  "uses the largest value any rank set)"),
          integer("COLLIE_SHM_DIRECT_MIN", "2K", 0, kKnobTiB,
                  "bytes per rank at which the tuner's model has the direct all-reduce "
                  "(allocShared buffers, read and written in place by every rank) cost what "
                  "the board costs: above it an all-reduce whose buffers were allocShared "
                  "memory on every rank at the last such call goes direct before the board "
                  "(at least 16K where a host's ranks outnumber its cores; every rank uses "
                  "the largest value any rank set)"),
          integer("COLLIE_SHM_TWOSHOT_MIN", "16K", 0, kKnobTiB,
                  "smallest board all-reduce (bytes per rank) run in two shots: each rank "
                  "reduces its share, a meeting, then it copies the others' shares; smaller "
                  "ones reduce everything on every rank in one shot (at least 64K where a "
                  "host's ranks outnumber its cores; every rank uses the largest value any "
                  "rank set, and 0 on any rank means one shot at every size)"),
          integer("COLLIE_SHM_THP_MIN", "4M", 0, kKnobTiB,
                  "smallest plain buffer (bytes) whose 2 MiB-aligned interior a rank asks the "
                  "kernel to back with transparent huge pages (madvise MADV_COLLAPSE) from the "
                  "second cma all-reduce on it, so that cross-memory attach pins a page per "
                  "2 MiB instead of per 4 KiB (0: never)"),
          duration(
              "COLLIE_SHM_SPIN", "50us", 0, kKnobSecond,
              "how long shm waits spin before blocking on a futex (yielding from the start where "
              "a host's ranks outnumber its CPUs)"),
      },
      [](const Config& config) { return ShmKnobs::parse(config).status(); }});
}

Result<ShmKnobs> ShmKnobs::parse(const Config& config) {
  KnobReader read(config);
  ShmKnobs knobs;
  knobs.fifoBytes = read.integer("COLLIE_BUFFSIZE");
  knobs.oneShotMaxBytes = read.integer("COLLIE_SHM_ONESHOT_MAX");
  knobs.cmaMaxBytes = read.integer("COLLIE_SHM_CMA_MAX");
  knobs.cmaMinBytes = read.integer("COLLIE_SHM_CMA_MIN");
  knobs.directMinBytes = read.integer("COLLIE_SHM_DIRECT_MIN");
  knobs.twoShotMinBytes = read.integer("COLLIE_SHM_TWOSHOT_MIN");
  knobs.hugePageMinBytes = read.integer("COLLIE_SHM_THP_MIN");
  knobs.spin = read.duration("COLLIE_SHM_SPIN");
  return read.finish(knobs);
}

}  // namespace collie
