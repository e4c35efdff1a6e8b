// The log filter's knobs. Process-wide: the filter is read before any communicator
// exists (core/log/log.h).
#include "core/log/log_knobs.h"

#include "core/config/knob_reader.h"
#include "core/config/knob_registry.h"

namespace collie {

void registerLogKnobs(KnobRegistry& registry) {
  (void)registry.add(KnobTable{
      "log",
      "what collie writes to stderr (read once per process)",
      {
          knobs::processWide(knobs::choice("COLLIE_DEBUG", "WARN", "NONE,WARN,INFO,TRACE",
                                           "log level: NONE, WARN, INFO or TRACE", "NCCL_DEBUG")),
          knobs::processWide(Knob{"COLLIE_DEBUG_SUBSYS", "ALL",
                                  "comma-separated subsystems to log (INIT, COLL, NET, SHM, "
                                  "BOOTSTRAP, TUNE, ENGINE, ALL); a leading ^ excludes",
                                  "NCCL_DEBUG_SUBSYS", KnobKind::kSubsystems, 0, 0,
                                  "INIT,COLL,NET,SHM,BOOTSTRAP,TUNE,ENGINE,ALL"}),
      },
      [](const Config& config) { return LogKnobs::parse(config).status(); }});
}

Result<LogKnobs> LogKnobs::parse(const Config& config) {
  // The filter exists before the communicator's validation names a refused value, so a
  // refused value reads as its default here.
  KnobReader read(config, KnobReader::RefusedValue::kReadDefault);
  LogKnobs knobs;
  knobs.level = read.text("COLLIE_DEBUG");
  knobs.subsystems = read.text("COLLIE_DEBUG_SUBSYS");
  return read.finish(knobs);
}

}  // namespace collie
