// `collie run`: the launcher. It hosts the job's rendezvous store itself (so no rank is
// special), hands every rank the unique id and its rank through COLLIE_* variables, and
// supervises the ranks (tools/launcher.h).
//
// Several hosts: every host runs `collie run --nnodes M --node-rank R --master HOST:PORT
// -n N`; the launcher of node 0 hosts the store at HOST:PORT, global ranks are
// R * N + local (--distribution block, the default) or local * M + R (cyclic, as Slurm's
// --distribution=cyclic deals them; every launcher must pass the same). All launchers must share
// the job secret (COLLIE_JOB_SECRET or
// --secret-file, 32 hex digits): it is what the store and every transport check.
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "collie/store.h"
#include "collie/unique_id.h"
#include "core/bootstrap/store_knobs.h"
#include "core/comm/comm_knobs.h"
#include "core/comm/join_agreement.h"
#include "core/config/config.h"
#include "core/config/knob.h"
#include "core/net/job_secret.h"
#include "core/transport/transport.h"
#include "core/transport/wait_policy.h"
#include "tools/commands.h"
#include "tools/launcher.h"

namespace collie::tools {

CLI::App* addRunCommand(CLI::App& app, RunCliOptions* options) {
  CLI::App* cmd = app.add_subcommand(
      "run", "Start N local ranks of a program: collie run -n N [--] prog args...");
  cmd->add_option("-n,--nproc-per-node", options->nprocs, "ranks to start on this host")
      ->capture_default_str();
  cmd->add_option("--nnodes", options->nnodes, "hosts in the job")->capture_default_str();
  cmd->add_option("--node-rank", options->nodeRank, "this host's index among --nnodes")
      ->capture_default_str();
  cmd->add_option("--master", options->master,
                  "HOST:PORT where node 0's launcher hosts the store (multi-host)");
  cmd->add_option("--secret-file", options->secretFile,
                  "file with the job secret (32 hex digits; else COLLIE_JOB_SECRET), multi-host");
  cmd->add_option("--distribution", options->distribution,
                  "how global ranks are dealt to hosts: block (node R: R*N..R*N+N-1) or cyclic "
                  "(node R: R, R+M, R+2M, ...); the same on every host")
      ->check(CLI::IsMember({"block", "cyclic"}))
      ->capture_default_str();
  cmd->add_option("--bind", options->bind,
                  "auto: where this host's ranks outnumber the CPUs the launcher may run on, "
                  "bind rank r to the (r mod CPUs)-th of them, and tell the ranks how many "
                  "there are (COLLIE_CPUS, unless set); none: leave them to the scheduler")
      ->check(CLI::IsMember({"auto", "none"}))
      ->capture_default_str();
  cmd->add_flag("--tag-output", options->tagOutput, "prefix each output line with [rank]");
  cmd->add_flag("--keep-going,--enable-recovery", options->keepGoing,
                "a rank killed by a signal does not end the job: the others go on (programs "
                "that shrink their communicator after a failure); exit 0 when every rank that "
                "was not killed exits 0. Ranks see COLLIE_KEEP_GOING=1");
  cmd->add_option("--grace", options->graceSeconds,
                  "seconds between SIGTERM and SIGKILL when the job ends early")
      ->capture_default_str();
  cmd->prefix_command();  // the program's own flags are not ours
  return cmd;
}

namespace {

// The unique id of a multi-host job: the master's address and the shared secret.
Result<UniqueId> multiHostId(const RunCliOptions& options) {
  UniqueId id;
  if (options.master.empty()) {
    return invalidArgument("--nnodes > 1 needs --master HOST:PORT (node 0's address)");
  }
  Result<UniqueId> parsed =
      UniqueId::parse("collie1:" + options.master + ":" + std::string(32, '0'));
  if (!parsed.isOk() || parsed->port == 0) {
    return invalidArgument("--master " + echoedValue(options.master) +
                           " is not HOST:PORT with a fixed port in 1..65535 (e.g. "
                           "10.213.0.1:29500)");
  }
  id.host = parsed->host;
  id.port = parsed->port;
  std::string hex;
  std::string source;
  if (!options.secretFile.empty()) {
    std::ifstream in(options.secretFile);
    if (!in || !std::getline(in, hex)) {
      return invalidArgument("cannot read the job secret from --secret-file '" +
                             options.secretFile + "'");
    }
    source = "--secret-file " + options.secretFile;
  } else if (Result<LaunchKnobs> launch = LaunchKnobs::parse(Config::fromEnvironment());
             !launch.isOk() || !launch->jobSecret.empty()) {
    if (!launch.isOk()) return launch.status();
    hex = launch->jobSecret;
    source = "COLLIE_JOB_SECRET";
  } else {
    return invalidArgument(
        "a multi-host job needs the same job secret on every host: set COLLIE_JOB_SECRET to 32 "
        "hex digits (e.g. $(openssl rand -hex 16)) or pass --secret-file");
  }
  Result<JobSecret> secret = jobSecretFromUserText(hex, source);
  if (!secret.isOk()) return secret.status();
  id.secret = *secret;
  return id;
}

// Every rank is gone: each transport removes what a rank killed during connect (by a
// signal, or by us after another rank failed) could not (shm: its /dev/shm names).
void removeJobLeftovers(const UniqueId& id, int nodeRank) {
  const LauncherScope scope{id.secret, nodeRank};
  for (const TransportFactory& factory : TransportRegistry::instance().factories()) {
    if (factory.removeLauncherLeftovers == nullptr) continue;
    const std::vector<std::string> removed = factory.removeLauncherLeftovers(scope);
    if (removed.empty()) continue;
    std::fprintf(stderr,
                 "collie run: removed %zu item(s) the ranks left behind (%s):", removed.size(),
                 factory.name.c_str());
    for (const std::string& name : removed) std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\n");
  }
}

}  // namespace

int runLauncher(const RunCliOptions& options) {
  if (options.command.empty()) {
    std::fprintf(stderr, "collie run: no program given (collie run -n N -- prog args...)\n");
    return 2;
  }
  if (options.nprocs < 1) {
    std::fprintf(stderr, "collie run: -n must be at least 1 (got %d)\n", options.nprocs);
    return 2;
  }
  const bool multiHost = options.nnodes != 1 || !options.master.empty();
  if (options.nnodes < 1 || options.nodeRank < 0 || options.nodeRank >= options.nnodes) {
    std::fprintf(stderr, "collie run: --node-rank %d is outside [0, --nnodes %d)\n",
                 options.nodeRank, options.nnodes);
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

  Result<UniqueId> uid = multiHost ? multiHostId(options) : UniqueId::generate("127.0.0.1", 0);
  if (!uid.isOk()) {
    std::fprintf(stderr, "collie run: %s\n", uid.status().message().c_str());
    return 2;
  }
  std::unique_ptr<StoreServer> store;
  if (options.nodeRank == 0) {
    // The store listens on the master address itself, or where COLLIE_STORE_BIND says
    // ('*': every interface, only when asked for). A master address that is not this
    // host's is refused rather than silently listening on every interface.
    Result<StoreKnobs> storeKnobs = StoreKnobs::parse(Config::fromEnvironment());
    if (!storeKnobs.isOk()) {
      std::fprintf(stderr, "collie run: %s\n", storeKnobs.status().message().c_str());
      return 2;
    }
    const std::string bind = storeKnobs->bind;
    const std::string bindHost = !multiHost || bind.empty() ? uid->host
                                 : bind == "*"              ? std::string("0.0.0.0")
                                                            : bind;
    Result<std::unique_ptr<StoreServer>> server =
        StoreServer::start(bindHost, uid->port, uid->secret);
    if (!server.isOk()) {
      std::fprintf(stderr, "collie run: starting the rendezvous store on %s:%u failed: %s%s\n",
                   bindHost.c_str(), unsigned(uid->port), server.status().toString().c_str(),
                   multiHost && bind.empty()
                       ? " (node 0 listens on the --master address, which must be one of this "
                         "host's; set COLLIE_STORE_BIND to an address of this host, or '*' for "
                         "every interface)"
                       : "");
      return 1;
    }
    store = std::move(*server);
    uid->port = store->port();
  }
  const std::string uidText = uid->toString();
  const std::string world = std::to_string(options.nprocs * options.nnodes);
  const std::string localWorld = std::to_string(options.nprocs);
  // This host's local rank -> global rank.
  const bool cyclic = options.distribution == "cyclic";
  auto globalRank = [&](int local) {
    return cyclic ? local * options.nnodes + options.nodeRank
                  : options.nodeRank * options.nprocs + local;
  };

  LaunchSpec spec;
  spec.command = options.command;
  spec.nprocs = options.nprocs;
  spec.tagOutput = options.tagOutput;
  spec.grace = std::chrono::milliseconds(std::lround(options.graceSeconds * 1000.0));
  spec.keepGoing = options.keepGoing;
  // More ranks than CPUs: unbound, the scheduler sometimes stacked them so that a small
  // all-reduce took twice as long for a whole launch (docs/decisions/bind-oversubscribed.md).
  const std::vector<int> cpus = affinityCpus();
  spec.cpuOfRank = bindRanks(options.bind, options.nprocs, cpus);
  // A bound rank's own mask holds one CPU: the job's count keeps its wait policy and
  // plans those of ranks sharing `cpus`.
  const char* cpusSet = std::getenv("COLLIE_CPUS");
  const bool tellCpus = !spec.cpuOfRank.empty() && (cpusSet == nullptr || *cpusSet == '\0');
  spec.env = [&](int rank) {
    EnvVars env{{"COLLIE_RANK", std::to_string(globalRank(rank))},
                {"COLLIE_KEEP_GOING", options.keepGoing ? "1" : "0"},
                {"COLLIE_WORLD_SIZE", world},
                {"COLLIE_LOCAL_RANK", std::to_string(rank)},
                {"COLLIE_LOCAL_WORLD_SIZE", localWorld},
                {"COLLIE_NODE_RANK", std::to_string(options.nodeRank)},
                {"COLLIE_UNIQUE_ID", uidText}};
    if (tellCpus) env.emplace_back("COLLIE_CPUS", std::to_string(cpus.size()));
    return env;
  };
  // Tell the job when a rank exits, so that ranks still joining a communicator with it
  // fail at once naming it (core/comm/join_agreement.h) instead of at COLLIE_TIMEOUT.
  // Best effort, and bounded: once a report failed (node 0's launcher, which hosts the
  // store, may have finished already) no later exit tries again, since the store
  // client's reconnect would wait up to a minute for a store that is gone.
  std::shared_ptr<Store> exits;
  bool storeGone = false;
  const std::string exitPrefix = launcherExitPrefix(publicJobTag(uid->secret));
  spec.onExit = [&](int rank, int status) {
    if (storeGone) return;
    if (!exits) {
      const std::string host = options.nodeRank == 0 && !multiHost ? "127.0.0.1" : uid->host;
      Result<std::shared_ptr<Store>> connected = connectTcpStore(
          host, uid->port, uid->secret, std::chrono::steady_clock::now() + std::chrono::seconds(2));
      if (!connected.isOk()) {  // the ranks still fail, at their deadline
        storeGone = true;
        return;
      }
      exits = *connected;
    }
    const std::string what = WIFEXITED(status)
                                 ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                 : "was killed by signal " + signalDescription(WTERMSIG(status));
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    const std::string text = what + " (collie run on " + host + ")";
    if (!exits
             ->set(exitPrefix + "/exit/" + std::to_string(globalRank(rank)),
                   Bytes(text.begin(), text.end()))
             .isOk() ||
        !exits->add(exitPrefix + "/exits", 1).isOk()) {
      storeGone = true;
    }
  };
  const int status = superviseRanks(spec);
  removeJobLeftovers(*uid, options.nodeRank);
  return status;
}

}  // namespace collie::tools
