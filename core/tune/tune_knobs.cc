// The tuner's knobs: fixed constants instead of a probe, and where probes are cached
// (core/engine/tune_probe.h).
#include "core/tune/tune_knobs.h"

#include "core/config/knob_reader.h"
#include "core/config/knob_registry.h"

namespace collie {

void registerTuneKnobs(KnobRegistry& registry) {
  (void)registry.add(KnobTable{
      "tune",
      "the tuner's cost-model constants and their probe cache",
      {
          knobs::decimal("COLLIE_TUNE_ALPHA_US", 0, 1000000,
                         "tuner: microseconds per message (with COLLIE_TUNE_BW_GBPS: no probe)"),
          knobs::decimal("COLLIE_TUNE_BW_GBPS", 0, 1000000,
                         "tuner: GB/s per link (with COLLIE_TUNE_ALPHA_US: no probe)"),
          knobs::decimal("COLLIE_TUNE_NET_ALPHA_US", 0, 1000000,
                         "tuner: microseconds per message between hosts (with "
                         "COLLIE_TUNE_NET_BW_GBPS: no probe between hosts)"),
          knobs::decimal("COLLIE_TUNE_NET_BW_GBPS", 0, 1000000,
                         "tuner: GB/s of one host's link to the others (with "
                         "COLLIE_TUNE_NET_ALPHA_US: no probe between hosts)"),
          knobs::text("COLLIE_TUNE_CACHE", "",
                      "directory of the tuner's probe cache (default $XDG_CACHE_HOME/collie or "
                      "~/.cache/collie; off: always probe)"),
      },
      [](const Config& config) { return TuneKnobs::parse(config).status(); }});
}

Result<TuneKnobs> TuneKnobs::parse(const Config& config) {
  KnobReader read(config);
  TuneKnobs knobs;
  knobs.alphaUs = read.text("COLLIE_TUNE_ALPHA_US");
  knobs.bwGBps = read.text("COLLIE_TUNE_BW_GBPS");
  knobs.netAlphaUs = read.text("COLLIE_TUNE_NET_ALPHA_US");
  knobs.netBwGBps = read.text("COLLIE_TUNE_NET_BW_GBPS");
  knobs.cacheDir = read.text("COLLIE_TUNE_CACHE");
  return read.finish(knobs);
}

}  // namespace collie
