// The `collie` tool's own knobs. The tool is not part of libcollie, so its table is
// added at run time, first thing in main (core/config/knob_registry.h), and `collie
// info` lists it with the library's tables.
#include "tools/tool_knobs.h"

#include "core/config/knob_reader.h"
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
      },
      [](const Config& config) { return ToolKnobs::parse(config).status(); }});
}

Result<ToolKnobs> ToolKnobs::parse(const Config& config) {
  KnobReader read(config);
  ToolKnobs knobs;
  knobs.tracePath = read.text("COLLIE_TRACE");
  return read.finish(knobs);
}

}  // namespace collie::tools
