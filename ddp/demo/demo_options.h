// The options of the ddp demo (ddp/demo/demo.h), one per `collie ddp-demo` flag
// (tools/ddp_demo_command.cc), apart from the measurement hook the tool plugs in.
#pragma once

#include <cstdint>
#include <string>

namespace collie::ddp::demo {

struct DemoOptions {
  // Defaults: 16 layers of 16 MiB (256 MiB of gradients, 9 buckets of <= 25 MiB) and
  // 25 ms per backward layer (batch 1 per rank), topped up by sleeping (the host idles as it does
  // while an accelerator computes): on a 2-core box, 2 ranks spend about half as long on
  // communication as on compute, so the overlap is plain in the timeline.
  int layers = 16;
  int64_t paramsPerLayer = 4 << 20;
  double msPerLayer = 25.0;
  std::string compute = "sleep";
  int steps = 5;
  int batch = 1;
  int64_t datasetSize = 4096;
  double bucketCapMb = 25.0;
  double firstBucketMb = 1.0;
  std::string bucketMemory = "shared";  // shared (collie shared memory) or heap
  std::string optimizer = "sgd";
  double lr = 0.01;
  uint64_t seed = 1234;
  std::string checkpointDir;
  bool resume = false;
  int checkpointEvery = 5;  // with --checkpoint: also after every N-th step (0: only at the end)
  // Elastic run: on a rank's failure the others shrink the communicator, reload the last
  // checkpoint and go on (implied by killRank >= 0).
  bool shrinkOnFailure = false;
  int killRank = -1;        // this rank SIGKILLs itself ...
  int64_t killAtStep = -1;  // ... in the backward pass of this step (default: mid-run)
  std::string tracePath;    // Chrome trace ("": none; the CLI defaults it to COLLIE_TRACE)
  std::string svgPath;      // SVG timeline of the last step ("": none)
  // Bytes this process has sent on its TCP sockets so far, or -1 when unknown: the
  // sent_bytes column. Null: the column reads n/a.
  long long (*tcpBytesSent)() = nullptr;
};

}  // namespace collie::ddp::demo
