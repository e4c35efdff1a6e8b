// `collie`: the command-line tool (run, perf, info, sim, ddp-demo).
//
// Arguments after the first "--" are never parsed as collie's own: they are the
// command `collie run` starts (CLI11's prefix_command stops at the program name, but
// cannot be combined with "--").
#include <CLI/CLI.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "tools/commands.h"

int main(int argc, char** argv) {
  using namespace collie::tools;
  registerToolKnobs();
  std::vector<std::string> front;
  std::vector<std::string> trailing;
  bool seenSeparator = false;
  for (int i = 1; i < argc; ++i) {
    if (!seenSeparator && std::strcmp(argv[i], "--") == 0) {
      seenSeparator = true;
    } else {
      (seenSeparator ? trailing : front).emplace_back(argv[i]);
    }
  }

  CLI::App app{"collie: collective communication runtime tools"};
  app.require_subcommand(1);
  app.set_version_flag("--version", COLLIE_VERSION);
  RunCliOptions runOptions;
  PerfCliOptions perfOptions;
  CLI::App* run = addRunCommand(app, &runOptions);
  CLI::App* perf = addPerfCommand(app, &perfOptions);
  bool infoTuning = false;
  CLI::App* info = addInfoCommand(app, &infoTuning);
  SimCliOptions simOptions;
  CLI::App* sim = addSimCommand(app, &simOptions);
  DdpDemoCliOptions ddpOptions;
  CLI::App* ddpDemo = addDdpDemoCommand(app, &ddpOptions);

  std::vector<std::string> reversed(front.rbegin(), front.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (seenSeparator && !run->parsed()) {
    std::fprintf(stderr, "collie: unexpected '--' (only `collie run` takes a command after it)\n");
    return 2;
  }

  if (run->parsed()) {
    runOptions.command = run->remaining();
    if (seenSeparator && !runOptions.command.empty()) runOptions.command.emplace_back("--");
    runOptions.command.insert(runOptions.command.end(), trailing.begin(), trailing.end());
    return runLauncher(runOptions);
  }
  if (perf->parsed()) return runPerf(perfOptions);
  if (info->parsed()) return runInfo(infoTuning);
  if (sim->parsed()) return runSim(simOptions);
  if (ddpDemo->parsed()) return runDdpDemo(ddpOptions);
  return 2;
}
