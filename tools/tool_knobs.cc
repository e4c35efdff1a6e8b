// The `collie` tool's own knobs. The tool is not part of libcollie, so its table is
// added at run time, first thing in main (core/config/knob_registry.h), and `collie
// info` lists it with the library's tables.
#include "core/config/knob_registry.h"
#include "tools/commands.h"

namespace collie::tools {

void registerToolKnobs() {
  (void)KnobRegistry::instance().add(KnobTable{
      "tools",
      "the collie command-line tool (read from the environment)",
      {
          knobs::processWide(knobs::outputPath(
              "COLLIE_TRACE", nullptr,
              "collie ddp-demo: write a Chrome-trace JSON timeline of the run to this file "
              "(as --trace)")),
      }});
}

}  // namespace collie::tools
