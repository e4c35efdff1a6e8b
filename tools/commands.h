// The subcommands of the `collie` tool. Each add*Command() registers a CLI11
// subcommand whose flags land in the given options struct; the matching run*()
// executes it after parsing and returns the process exit status.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/demo/demo_options.h"
#include "tools/perf_args.h"

namespace CLI {
class App;
}

namespace collie::tools {

struct RunCliOptions {
  int nprocs = 1;
  int nnodes = 1;
  int nodeRank = 0;
  std::string master;      // HOST:PORT of node 0's store (multi-host)
  std::string secretFile;  // file holding the job secret (32 hex digits), multi-host
  bool tagOutput = false;
  double graceSeconds = 2.0;
  bool keepGoing = false;  // --keep-going: ranks killed by a signal do not end the job
  // How global ranks are dealt to hosts: "block" (node R holds R*N .. R*N+N-1) or
  // "cyclic" (node R holds R, R+M, R+2M, ...), as Slurm's --distribution.
  std::string distribution = "block";
  // "auto": where this host's ranks outnumber the launcher's CPUs, rank r is bound to
  // the (r mod CPUs)-th of them; "none": the scheduler places them.
  std::string bind = "auto";
  std::vector<std::string> command;
};

// Adds the tool's knob table (COLLIE_TRACE) to the registry; first thing in main.
void registerToolKnobs();

CLI::App* addRunCommand(CLI::App& app, RunCliOptions* options);
int runLauncher(const RunCliOptions& options);

int runPerf(const PerfCliOptions& options);

CLI::App* addInfoCommand(CLI::App& app, bool* tuning);
int runInfo(bool tuning);
// Whether launcher variables name a job (collie run, torchrun, Open MPI), and, under
// one, `collie info`'s topology of that job (tools/topology_info.cc).
bool startedByLauncher();
int printJobTopology();

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
  std::string transport;               // "": no team collectives; else model that transport's team
  int hosts = 1;                       // ranks spread over this many hosts, as many on each
  std::string distribution = "block";  // rank numbering over the hosts: block or cyclic
  double netAlphaUs = 0;               // model between hosts; 0: as within
  double netBwGBps = 0;
  std::string hierHosts = "auto";  // hier's inter-host stage: auto (the model), ring, tree
};

CLI::App* addSimCommand(CLI::App& app, SimCliOptions* options);
int runSim(const SimCliOptions& options);

// `collie ddp-demo` (tools/ddp_demo_command.cc): the options of the demo itself.
using DdpDemoCliOptions = ddp::demo::DemoOptions;

CLI::App* addDdpDemoCommand(CLI::App& app, DdpDemoCliOptions* options);
int runDdpDemo(const DdpDemoCliOptions& options);

}  // namespace collie::tools
