// Arguments of `collie perf` (nccl-tests flags) and the per-size buffer shapes.
//
// addPerfCommand() registers the subcommand and its options on a CLI11 app;
// resolvePerfArgs() turns the raw strings into validated PerfArgs (InvalidArgument or
// Unsupported with a message naming the flag on failure). perfSizes(), perfShape() and
// busBwFactor() follow nccl-tests' definitions (docs/PERFORMANCE.md there): `size` is
// the larger of the send and receive buffers, and for allgather / reducescatter /
// gather / scatter each rank's chunk (for alltoall each peer's block) is size /
// elemsize / nranks elements.
// Pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collie/status.h"
#include "collie/types.h"

namespace CLI {
class App;
}

namespace collie::tools {

// Flag values as typed by the user, before validation.
struct PerfCliOptions {
  std::string collective;
  std::string minBytes = "32M";
  std::string maxBytes = "32M";
  std::string stepBytes = "1M";
  int64_t stepFactor = 1;
  int iters = 20;
  int warmup = 5;
  int check = 1;
  std::string dtype = "float";
  std::string op = "sum";
  int root = 0;
  int registered = 0;
  int device = 0;
  std::string algo = "auto";
  std::string transport;
  std::string jsonPath;
  int64_t unalign = 0;
  int64_t unalignBytes = 0;
};

struct PerfArgs {
  CollectiveKind collective = CollectiveKind::kAllReduce;
  int64_t minBytes = 0;
  int64_t maxBytes = 0;
  int64_t stepBytes = 0;
  int64_t stepFactor = 1;  // > 1: multiply; else add stepBytes
  int iters = 20;
  int warmup = 5;
  bool check = true;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  Algorithm algorithm = Algorithm::kAuto;
  std::string transport;  // "" = per-pair choice (COLLIE_TRANSPORT)
  std::string jsonPath;   // "" = no JSON
  // -R 1: allocShared buffers registered on the communicator; with --device 1, the
  // device buffers registered as device windows (Communicator::registerDeviceWindow).
  bool registered = false;
  // --device 1: buffers in device memory of the communicator's device runtime (CUDA, or
  // the emulated one with COLLIE_DEVICE_EMULATION=1); filled and checked through host
  // copies outside the timed runs.
  bool device = false;
  // Every send and receive pointer starts this far past a 64-byte boundary: -u elements
  // (nccl-tests' --unalign) plus --unalign_bytes, which may leave buffers misaligned for
  // their dtype.
  int64_t unalign = 0;
  int64_t unalignBytes = 0;
};

// The byte offset of every buffer from its 64-byte aligned allocation.
size_t bufferOffsetBytes(const PerfArgs& args);

// Registers `perf` on `app`; `raw` must outlive parsing.
CLI::App* addPerfCommand(CLI::App& app, PerfCliOptions* raw);

Result<PerfArgs> resolvePerfArgs(const PerfCliOptions& raw);

// "allreduce", "reducescatter" (or "reduce_scatter"), "allgather" (or "all_gather"),
// "broadcast", "reduce".
Result<CollectiveKind> parseCollective(const std::string& name);

bool hasReduction(CollectiveKind kind);  // takes a ReduceOp
bool hasRoot(CollectiveKind kind);       // takes a root rank

// The message sizes to run, in bytes, from minBytes to maxBytes inclusive.
std::vector<int64_t> perfSizes(const PerfArgs& args);

// What one size means for one collective on `nranks` ranks (counts in elements).
struct PerfShape {
  size_t callCount = 0;    // the count argument of the collective call
  size_t sendElems = 0;    // send buffer length
  size_t recvElems = 0;    // receive buffer length
  size_t sizeBytes = 0;    // the "size" column: max(send, recv) bytes
  size_t countColumn = 0;  // the "count" column: sizeBytes / elemsize
  // In-place layout: one buffer of max(send, recv) elements; the call's send and recv
  // pointers are buffer + these offsets (elements).
  size_t inPlaceSendOffset = 0;
  size_t inPlaceRecvOffset = 0;
  bool inPlace = true;  // false: the collective has no in-place form
};

PerfShape perfShape(CollectiveKind kind, int64_t bytes, DataType dtype, int nranks, int rank);

// busbw = algbw * busBwFactor, as nccl-tests: allreduce 2(n-1)/n, reducescatter,
// allgather, alltoall, gather and scatter (n-1)/n, broadcast and reduce 1.
double busBwFactor(CollectiveKind kind, int nranks);
// Algorithm bandwidth in GB/s (1e9 bytes per second) of `bytes` moved in `seconds`.
double algBwGBs(double bytes, double seconds);

}  // namespace collie::tools
