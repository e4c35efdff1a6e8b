#include "tools/perf_args.h"

#include <CLI/CLI.hpp>
#include <algorithm>

#include "core/config/config.h"

namespace collie::tools {

CLI::App* addPerfCommand(CLI::App& app, PerfCliOptions* raw) {
  CLI::App* cmd = app.add_subcommand(
      "perf",
      "Measure a collective's time and bandwidth (nccl-tests style); run it under "
      "`collie run -n N --`");
  cmd->add_option("collective", raw->collective,
                  "allreduce, reducescatter, allgather, broadcast or reduce")
      ->required();
  cmd->add_option("-b,--minbytes", raw->minBytes, "smallest size (bytes; K/M/G suffixes)")
      ->capture_default_str();
  cmd->add_option("-e,--maxbytes", raw->maxBytes, "largest size")->capture_default_str();
  cmd->add_option("-i,--stepbytes", raw->stepBytes, "size increment when -f is 1")
      ->capture_default_str();
  cmd->add_option("-f,--stepfactor", raw->stepFactor, "size multiplier (> 1 overrides -i)")
      ->capture_default_str();
  cmd->add_option("-n,--iters", raw->iters, "timed iterations per size")->capture_default_str();
  cmd->add_option("-w,--warmup_iters", raw->warmup, "untimed iterations before timing")
      ->capture_default_str();
  cmd->add_option("-c,--check", raw->check, "check results (0 or 1)")->capture_default_str();
  cmd->add_option("-d,--datatype", raw->dtype,
                  "int8 uint8 int32 uint32 int64 uint64 half float double bfloat16")
      ->capture_default_str();
  cmd->add_option("-o,--op", raw->op, "sum prod min max avg band bor bxor")->capture_default_str();
  cmd->add_option("-r,--root", raw->root, "root rank (broadcast, reduce)")->capture_default_str();
  cmd->add_option("-R,--local_register", raw->registered,
                  "1: registered buffers: allocShared host memory (single-copy shm), or with "
                  "--device 1 device windows (the direct kernel)")
      ->capture_default_str();
  cmd->add_option("--device", raw->device,
                  "1: buffers in device memory (CUDA, or COLLIE_DEVICE_EMULATION=1)")
      ->capture_default_str();
  cmd->add_option("-u,--unalign", raw->unalign,
                  "start send and receive buffers this many elements past alignment")
      ->capture_default_str();
  cmd->add_option("--unalign_bytes", raw->unalignBytes,
                  "and this many bytes more (may misalign them for the datatype)")
      ->capture_default_str();
  cmd->add_option("--algo", raw->algo, algorithmNames())->capture_default_str();
  cmd->add_option("--transport", raw->transport,
                  "force a transport (shm, ibverbs, ucx, tcp); default: per pair");
  cmd->add_option("--json", raw->jsonPath, "also write the results as JSON to this file");
  return cmd;
}

Result<CollectiveKind> parseCollective(const std::string& name) {
  if (name == "allreduce" || name == "all_reduce") return CollectiveKind::kAllReduce;
  if (name == "reducescatter" || name == "reduce_scatter") return CollectiveKind::kReduceScatter;
  if (name == "allgather" || name == "all_gather") return CollectiveKind::kAllGather;
  if (name == "broadcast") return CollectiveKind::kBroadcast;
  if (name == "reduce") return CollectiveKind::kReduce;
  if (name == "alltoall" || name == "all_to_all") return CollectiveKind::kAllToAll;
  if (name == "gather") return CollectiveKind::kGather;
  if (name == "scatter") return CollectiveKind::kScatter;
  return invalidArgument("unknown collective '" + name +
                         "': use allreduce, reducescatter, allgather, broadcast, reduce, "
                         "alltoall, gather or scatter");
}

bool hasReduction(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter ||
         kind == CollectiveKind::kReduce;
}

bool hasRoot(CollectiveKind kind) {
  return kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce ||
         kind == CollectiveKind::kGather || kind == CollectiveKind::kScatter;
}

namespace {

// Larger shifts measure nothing that a shift modulo 64 bytes does not.
constexpr int64_t kMaxUnalign = 4096;

Result<int64_t> sizeFlag(const char* flag, const std::string& text) {
  Result<int64_t> value = parseSize(text);
  if (!value.isOk()) return invalidArgument(std::string(flag) + ": " + value.status().message());
  return value;
}

}  // namespace

Result<PerfArgs> resolvePerfArgs(const PerfCliOptions& raw) {
  PerfArgs args;
  Result<CollectiveKind> kind = parseCollective(raw.collective);
  if (!kind.isOk()) return kind.status();
  args.collective = *kind;

  Result<int64_t> minBytes = sizeFlag("-b/--minbytes", raw.minBytes);
  if (!minBytes.isOk()) return minBytes.status();
  Result<int64_t> maxBytes = sizeFlag("-e/--maxbytes", raw.maxBytes);
  if (!maxBytes.isOk()) return maxBytes.status();
  Result<int64_t> stepBytes = sizeFlag("-i/--stepbytes", raw.stepBytes);
  if (!stepBytes.isOk()) return stepBytes.status();
  args.minBytes = *minBytes;
  args.maxBytes = *maxBytes;
  args.stepBytes = *stepBytes;
  args.stepFactor = raw.stepFactor;
  if (args.minBytes > args.maxBytes) {
    return invalidArgument("-b (" + raw.minBytes + ") is larger than -e (" + raw.maxBytes + ")");
  }
  if (args.stepFactor < 1) return invalidArgument("-f must be at least 1");
  if (args.stepFactor == 1 && args.stepBytes <= 0 && args.minBytes != args.maxBytes) {
    return invalidArgument("-i must be positive when -f is 1");
  }
  if (args.stepFactor > 1 && args.minBytes == 0) {
    return invalidArgument("-b must be positive when -f is larger than 1");
  }

  if (raw.iters < 1) return invalidArgument("-n/--iters must be at least 1");
  if (raw.warmup < 0) return invalidArgument("-w/--warmup_iters must not be negative");
  args.iters = raw.iters;
  args.warmup = raw.warmup;
  if (raw.check != 0 && raw.check != 1) return invalidArgument("-c/--check must be 0 or 1");
  args.check = raw.check == 1;

  std::optional<DataType> dtype = parseDataType(raw.dtype);
  if (!dtype) return invalidArgument("unknown datatype '" + raw.dtype + "' (-d)");
  args.dtype = *dtype;
  const auto elemBytes = static_cast<int64_t>(dataTypeSize(args.dtype));
  if (args.maxBytes < elemBytes) {
    return invalidArgument("-e/--maxbytes (" + raw.maxBytes + ") is smaller than one " + raw.dtype +
                           " element (" + std::to_string(elemBytes) +
                           " bytes): there is no size to run");
  }
  std::optional<ReduceOp> op = parseReduceOp(raw.op);
  if (!op)
    return invalidArgument("unknown reduction op '" + raw.op +
                           "' (-o): use sum, prod, min, max, avg, band, bor or bxor");
  if (*op == ReduceOp::kPreMulSum) {
    return invalidArgument(
        "-o premulsum needs a scalar per rank, which collie perf does not pass; use sum (the "
        "multiply is one pass over the input, docs/decisions/premul-sum.md)");
  }
  if (!isValidFor(*op, args.dtype)) {
    return invalidArgument("-o " + raw.op + " needs an integer datatype (-d), not " + raw.dtype);
  }
  args.op = *op;
  if (raw.root < 0) return invalidArgument("-r/--root must not be negative");
  args.root = raw.root;
  if (raw.registered != 0 && raw.registered != 1) return invalidArgument("-R must be 0 or 1");
  args.registered = raw.registered == 1;
  if (raw.device != 0 && raw.device != 1) return invalidArgument("--device must be 0 or 1");
  args.device = raw.device == 1;
  std::optional<Algorithm> algo = parseAlgorithm(raw.algo);
  if (!algo) {
    return invalidArgument("unknown --algo '" + raw.algo + "': use one of " + algorithmNames());
  }
  args.algorithm = *algo;
  args.transport = raw.transport;
  args.jsonPath = raw.jsonPath;
  if (raw.unalign < 0 || raw.unalign > kMaxUnalign) {
    return invalidArgument("-u/--unalign must be between 0 and " + std::to_string(kMaxUnalign));
  }
  if (raw.unalignBytes < 0 || raw.unalignBytes > kMaxUnalign) {
    return invalidArgument("--unalign_bytes must be between 0 and " + std::to_string(kMaxUnalign));
  }
  args.unalign = raw.unalign;
  args.unalignBytes = raw.unalignBytes;
  return args;
}

size_t bufferOffsetBytes(const PerfArgs& args) {
  return static_cast<size_t>(args.unalign) * dataTypeSize(args.dtype) +
         static_cast<size_t>(args.unalignBytes);
}

std::vector<int64_t> perfSizes(const PerfArgs& args) {
  std::vector<int64_t> sizes;
  for (int64_t size = args.minBytes; size <= args.maxBytes;) {
    sizes.push_back(size);
    int64_t next = args.stepFactor > 1 ? size * args.stepFactor : size + args.stepBytes;
    if (next <= size) break;  // zero step or overflow
    size = next;
  }
  return sizes;
}

PerfShape perfShape(CollectiveKind kind, int64_t bytes, DataType dtype, int nranks, int rank) {
  PerfShape shape;
  size_t elemSize = dataTypeSize(dtype);
  if (elemSize == 0 || nranks < 1 || bytes < 0) return shape;
  size_t count = static_cast<size_t>(bytes) / elemSize;
  size_t n = static_cast<size_t>(nranks);
  switch (kind) {
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kScatter:  // the root's send is laid out as reduce-scatter's
      shape.callCount = count / n;
      shape.sendElems = shape.callCount * n;
      shape.recvElems = shape.callCount;
      shape.inPlaceRecvOffset = shape.callCount * static_cast<size_t>(rank);
      break;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather:  // the root's receive is laid out as all-gather's
      shape.callCount = count / n;
      shape.sendElems = shape.callCount;
      shape.recvElems = shape.callCount * n;
      shape.inPlaceSendOffset = shape.callCount * static_cast<size_t>(rank);
      break;
    case CollectiveKind::kAllToAll:
      // nccl-tests: size / nranks per peer; in place, send == recv (host buffers only).
      shape.callCount = count / n;
      shape.sendElems = shape.callCount * n;
      shape.recvElems = shape.callCount * n;
      break;
    default:
      shape.callCount = count;
      shape.sendElems = count;
      shape.recvElems = count;
      break;
  }
  shape.countColumn = std::max(shape.sendElems, shape.recvElems);
  shape.sizeBytes = shape.countColumn * elemSize;
  return shape;
}

double busBwFactor(CollectiveKind kind, int nranks) {
  double n = nranks;
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return nranks > 0 ? 2.0 * (n - 1) / n : 0.0;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kGather:
    case CollectiveKind::kScatter:
      return nranks > 0 ? (n - 1) / n : 0.0;
    default:
      return 1.0;
  }
}

double algBwGBs(double bytes, double seconds) {
  return seconds > 0 ? bytes / 1.0e9 / seconds : 0.0;
}

}  // namespace collie::tools
