// `collie run`: the local launcher. It hosts the job's rendezvous store itself (so no
// rank is special), hands every rank the unique id and its rank through COLLIE_*
// variables, and supervises the ranks (tools/launcher.h).
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>

#include "collie/store.h"
#include "collie/unique_id.h"
#include "tools/commands.h"
#include "tools/launcher.h"

namespace collie::tools {

CLI::App* addRunCommand(CLI::App& app, RunCliOptions* options) {
  CLI::App* cmd = app.add_subcommand(
      "run", "Start N local ranks of a program: collie run -n N [--] prog args...");
  cmd->add_option("-n,--nproc-per-node", options->nprocs, "ranks to start on this host")
      ->capture_default_str();
  cmd->add_option("--nnodes", options->nnodes, "hosts in the job (only 1 for now)")
      ->capture_default_str();
  cmd->add_option("--node-rank", options->nodeRank, "this host's index among --nnodes")
      ->capture_default_str();
  cmd->add_option("--master", options->master, "HOST:PORT of node 0's store (multi-host)");
  cmd->add_flag("--tag-output", options->tagOutput, "prefix each output line with [rank]");
  cmd->add_option("--grace", options->graceSeconds,
                  "seconds between SIGTERM and SIGKILL when the job ends early")
      ->capture_default_str();
  cmd->prefix_command();  // the program's own flags are not ours
  return cmd;
}

int runLauncher(const RunCliOptions& options) {
  if (options.command.empty()) {
    std::fprintf(stderr, "collie run: no program given (collie run -n N -- prog args...)\n");
    return 2;
  }
  if (options.nprocs < 1) {
    std::fprintf(stderr, "collie run: -n must be at least 1 (got %d)\n", options.nprocs);
    return 2;
  }
  if (options.nnodes != 1 || options.nodeRank != 0 || !options.master.empty()) {
    std::fprintf(stderr,
                 "collie run: multi-host jobs (--nnodes %d, --node-rank %d, --master '%s') are "
                 "not yet supported; start one job per host or use mpirun/torchrun, whose "
                 "variables collie ranks also read\n",
                 options.nnodes, options.nodeRank, options.master.c_str());
    return 2;
  }
  if (!(options.graceSeconds >= 0) || options.graceSeconds > 3600) {
    std::fprintf(stderr, "collie run: --grace must be between 0 and 3600 seconds\n");
    return 2;
  }
  if (findExecutable(options.command[0]).empty()) {
    std::fprintf(stderr, "collie run: cannot execute '%s': not found in PATH or not executable\n",
                 options.command[0].c_str());
    return 127;
  }

  // Before the store server starts its thread, so that it inherits the blocked mask.
  blockLauncherSignals();

  Result<UniqueId> uid = UniqueId::generate("127.0.0.1", 0);
  if (!uid.isOk()) {
    std::fprintf(stderr, "collie run: creating the job id failed: %s\n",
                 uid.status().toString().c_str());
    return 1;
  }
  Result<std::unique_ptr<StoreServer>> server = StoreServer::start("127.0.0.1", 0, uid->secret);
  if (!server.isOk()) {
    std::fprintf(stderr, "collie run: starting the rendezvous store on 127.0.0.1 failed: %s\n",
                 server.status().toString().c_str());
    return 1;
  }
  uid->port = (*server)->port();
  const std::string uidText = uid->toString();
  const std::string world = std::to_string(options.nprocs);

  LaunchSpec spec;
  spec.command = options.command;
  spec.nprocs = options.nprocs;
  spec.tagOutput = options.tagOutput;
  spec.grace = std::chrono::milliseconds(std::lround(options.graceSeconds * 1000.0));
  spec.env = [&](int rank) {
    return EnvVars{{"COLLIE_RANK", std::to_string(rank)},
                   {"COLLIE_WORLD_SIZE", world},
                   {"COLLIE_LOCAL_RANK", std::to_string(rank)},
                   {"COLLIE_LOCAL_WORLD_SIZE", world},
                   {"COLLIE_UNIQUE_ID", uidText}};
  };
  return superviseRanks(spec);
}

}  // namespace collie::tools
