// The engine's knobs, resolved into EngineConfig at creation (core/comm/communicator_create.cc).
#include "core/engine/engine_knobs.h"

#include "core/config/knob_reader.h"
#include "core/config/knob_registry.h"

namespace collie {

void registerEngineKnobs(KnobRegistry& registry) {
  using namespace knobs;  // NOLINT(build/namespaces)
  (void)registry.add(KnobTable{
      "engine",
      "the progress engine: polling, reduction on receive, root agreement, flight recorder",
      {
          duration("COLLIE_BUSY_POLL", "50us", 0, kKnobSecond,
                   "how long the engine spins for progress before blocking (yielding from "
                   "the start where a host's ranks outnumber its CPUs)"),
          everyRankAlike(
              choice("COLLIE_ROOT_AGREEMENT", "1", "0,1",
                     "1: broadcast (after its data) and reduce (before it) run a barrier whose "
                     "messages carry the root, so ranks that name different roots all fail with "
                     "Mismatch; 0: skip it (a broadcast root then returns without waiting for the "
                     "receivers, and differing roots can go unnoticed)")),
          choice("COLLIE_RECV_REDUCE", "1", "0,1",
                 "1: reduce incoming data straight out of a transport's receive buffers where "
                 "the transport can (ucx); 0: receive into staging, then reduce"),
          integer("COLLIE_TUNE_ADAPT_MAX", "8M", 0, kKnobTiB,
                  "largest all-reduce (bytes per rank) whose single copy by cross-memory attach "
                  "(shm's cma, above the board) the engine times against the schedule that "
                  "follows it, per size class, keeping the faster (re-checked every 64 calls); "
                  "0: the tuner's model alone (with 3 or more ranks the two sum in different "
                  "orders, so calls of one size may then differ in their last bits)"),
          integer("COLLIE_TRACE_DEPTH", "64", 0, 1 << 20,
                  "collectives kept per rank by the flight recorder (0 disables it)"),
          outputPath("COLLIE_TRACE_DUMP", "stderr",
                     "write the flight recorder as JSON on failure and at communicator "
                     "destruction: 'stderr' or a file path where %r becomes the rank"),
      },
      [](const Config& config) { return EngineKnobs::parse(config).status(); }});
}

Result<EngineKnobs> EngineKnobs::parse(const Config& config) {
  KnobReader read(config);
  EngineKnobs knobs;
  knobs.busyPoll = read.duration("COLLIE_BUSY_POLL");
  knobs.rootAgreement = read.integer("COLLIE_ROOT_AGREEMENT") != 0;
  knobs.reduceOnReceive = read.integer("COLLIE_RECV_REDUCE") != 0;
  knobs.adaptMaxBytes = static_cast<size_t>(read.integer("COLLIE_TUNE_ADAPT_MAX"));
  knobs.traceDepth = static_cast<size_t>(read.integer("COLLIE_TRACE_DEPTH"));
  knobs.traceDump = read.text("COLLIE_TRACE_DUMP");
  return read.finish(knobs);
}

}  // namespace collie
