// The subcommands of the `collie` tool. Each add*Command() registers a CLI11
// subcommand whose flags land in the given options struct; the matching run*()
// executes it after parsing and returns the process exit status.
#pragma once

#include <string>
#include <vector>

#include "tools/perf_args.h"

namespace CLI {
class App;
}

namespace collie::tools {

struct RunCliOptions {
  int nprocs = 1;
  int nnodes = 1;
  int nodeRank = 0;
  std::string master;  // HOST:PORT of node 0's store (multi-host, not yet supported)
  bool tagOutput = false;
  double graceSeconds = 2.0;
  std::vector<std::string> command;
};

CLI::App* addRunCommand(CLI::App& app, RunCliOptions* options);
int runLauncher(const RunCliOptions& options);

int runPerf(const PerfCliOptions& options);

CLI::App* addInfoCommand(CLI::App& app, bool* tuning);
int runInfo(bool tuning);

struct SimCliOptions {
  std::string collective = "allreduce";
  std::string algo = "auto";
  int nranks = 8;
  std::string bytes = "1M";
  std::string dtype = "float";
  double alphaUs = 0;  // 0: the tuner's default
  double bwGBps = 0;
  int nchannels = 0;  // 0: tuned
  std::string chunk;  // "": tuned
  int root = 0;
};

CLI::App* addSimCommand(CLI::App& app, SimCliOptions* options);
int runSim(const SimCliOptions& options);

}  // namespace collie::tools
