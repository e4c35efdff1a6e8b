// `collie ddp-demo`: its options, and one rank's run of the demo (ddp/demo/demo.h: data-
// parallel training of a simulated MLP with the ddp::Reducer, elastic runs included)
// under `collie run -n N --`. What the demo does not reach through the public API is
// resolved here: the trace path's default (the tool's COLLIE_TRACE knob) and the bytes
// sent on TCP sockets.
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collie/communicator.h"
#include "core/comm/comm_knobs.h"
#include "core/config/config.h"
#include "core/net/process_sockets.h"
#include "ddp/demo/demo.h"
#include "tools/commands.h"
#include "tools/tool_knobs.h"

namespace collie::tools {

CLI::App* addDdpDemoCommand(CLI::App& app, DdpDemoCliOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "ddp-demo",
      "Data-parallel training demo: bucketed gradient all-reduce overlapped with a simulated "
      "backward pass; run it under `collie run -n N --`");
  cmd->add_option("--layers", o->layers, "layers of the MLP")->capture_default_str();
  cmd->add_option("--params-per-layer", o->paramsPerLayer,
                  "parameters per layer (dim*dim + dim, dim rounded down)")
      ->capture_default_str();
  cmd->add_option("--ms-per-layer", o->msPerLayer,
                  "simulated backward compute per layer, on top of the real math (ms)")
      ->capture_default_str();
  cmd->add_option("--compute", o->compute,
                  "how simulated compute is spent: fma (busy multiply-add loop on this core) or "
                  "sleep (host idle, as while an accelerator computes)")
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "training steps")->capture_default_str();
  cmd->add_option("--batch", o->batch, "samples per rank per step")->capture_default_str();
  cmd->add_option("--dataset", o->datasetSize, "samples in the synthetic data set")
      ->capture_default_str();
  cmd->add_option("--bucket-cap-mb", o->bucketCapMb, "bucket size cap (MiB)")
      ->capture_default_str();
  cmd->add_option("--first-bucket-mb", o->firstBucketMb, "first bucket's size cap (MiB)")
      ->capture_default_str();
  cmd->add_option("--bucket-memory", o->bucketMemory,
                  "where the gradient buckets live: shared (collie shared memory, one-pass "
                  "all-reduce on one host) or heap")
      ->check(CLI::IsMember({"shared", "heap"}))
      ->capture_default_str();
  cmd->add_option("--optimizer", o->optimizer, "sgd (with momentum) or adam")
      ->capture_default_str();
  cmd->add_option("--lr", o->lr, "learning rate")->capture_default_str();
  cmd->add_option("--seed", o->seed, "seed of the model, data and shuffle")->capture_default_str();
  cmd->add_option("--checkpoint", o->checkpointDir,
                  "directory where rank 0 writes a checkpoint after the last step");
  cmd->add_flag("--resume", o->resume, "start from the checkpoint in --checkpoint");
  cmd->add_option("--checkpoint-every", o->checkpointEvery,
                  "with --checkpoint: also write one after every N-th step (0: only at the end)")
      ->capture_default_str();
  cmd->add_flag("--shrink-on-failure", o->shrinkOnFailure,
                "when a rank dies, the others shrink the communicator, reload the last "
                "checkpoint and finish (run under `collie run --keep-going`)");
  cmd->add_option("--kill-rank", o->killRank,
                  "fault drill: this rank SIGKILLs itself in the backward pass of "
                  "--kill-at-step (implies --shrink-on-failure, needs --checkpoint)");
  cmd->add_option("--kill-at-step", o->killAtStep,
                  "step of the --kill-rank drill (default: the middle of the run)");
  cmd->add_option("--trace", o->tracePath, "Chrome-trace JSON output (default: $COLLIE_TRACE)");
  cmd->add_option("--svg", o->svgPath, "SVG timeline of the last step");
  return cmd;
}

namespace {

// Bytes this process has sent on its TCP sockets (the tcp transport's connections and
// the store's), summed from TCP_INFO over every socket in /proc/self/fd. Shared-memory
// transfers are plain memory copies and are not seen here.
long long tcpBytesSent() {
  Result<std::vector<net::TcpSocketInfo>> sockets = net::processTcpSockets();
  if (!sockets.isOk()) return -1;  // unknown, not zero
  long long total = 0;
  for (const net::TcpSocketInfo& socket : *sockets) {
    struct tcp_info info;
    socklen_t len = sizeof(info);
    std::memset(&info, 0, sizeof(info));
    if (getsockopt(socket.fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 &&
        len >= offsetof(struct tcp_info, tcpi_bytes_sent) + sizeof(info.tcpi_bytes_sent)) {
      total += static_cast<long long>(info.tcpi_bytes_sent);
    }
  }
  return total;
}

}  // namespace

int runDdpDemo(const DdpDemoCliOptions& options) {
  // `collie run` ends the whole job when a rank dies, unless --keep-going.
  const Config environment = Config::fromEnvironment();
  Result<LaunchKnobs> launch = LaunchKnobs::parse(environment);
  Result<ToolKnobs> tool = ToolKnobs::parse(environment);
  for (const Status& status : {launch.status(), tool.status()}) {
    if (!status.isOk()) {
      std::fprintf(stderr, "collie ddp-demo: %s\n", status.message().c_str());
      return 2;
    }
  }
  if (options.killRank >= 0 && !launch->uniqueId.empty() && !launch->keepGoing) {
    std::fprintf(stderr,
                 "collie ddp-demo: --kill-rank needs `collie run --keep-going`: without it the "
                 "launcher ends the whole job when rank %d dies\n",
                 options.killRank);
    return 2;
  }
  Result<std::unique_ptr<Communicator>> comm = Communicator::createFromEnvironment();
  if (!comm.isOk()) {
    std::fprintf(stderr, "collie ddp-demo: %s\n", comm.status().toString().c_str());
    return 1;
  }
  ddp::demo::DemoOptions demoOptions = options;
  if (demoOptions.tracePath.empty()) demoOptions.tracePath = tool->tracePath;
  demoOptions.tcpBytesSent = &tcpBytesSent;
  ddp::demo::Demo demo(std::move(*comm), demoOptions);
  Status status = demo.run();
  if (!status.isOk()) {
    std::fprintf(stderr, "collie ddp-demo: rank %d: %s\n", demo.comm().rank(),
                 status.toString().c_str());
    demo.comm().abort();
    return 1;
  }
  return 0;
}

}  // namespace collie::tools
