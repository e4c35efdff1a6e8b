// `collie perf`: one rank's side of an nccl-tests style benchmark.
//
// Per size, out-of-place then in-place: an optional checked run (outputs reset to a
// sentinel, inputs refilled, every element compared bit for bit), `-w` warmup runs,
// then `-n` timed runs, each issued and waited for, back to back. Timing is by batch, as
// nccl-tests and OSU do it: the -n runs are split into up to kBatches batches, each
// timed by one pair of clock reads, so the clock costs nothing per call. Reported:
// avg = total time / runs (the "time" column: nccl-tests' and OSU's figure), median and
// min over the batches' per-run averages (JSON). Each is the slowest rank's (a float64
// max all-reduce over the communicator); #wrong is summed over ranks. With -u /
// --unalign_bytes every send and receive pointer starts that far into its allocation.
// With --device 1 the buffers are device memory; the fill and the check then go
// through host copies, outside the timed runs, and a device copy timed before the
// table gives each size's memory bound, printed after it (perf_device_bound.h); with -R
// 1 as well they are registered as device windows, so that all-reduce, reduce-scatter
// and all-gather run as the direct kernel.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "collie/communicator.h"
#include "collie/shared_memory.h"
#include "core/config/config.h"
#include "core/device/device_knobs.h"
#include "core/device/device_runtime.h"
#include "tools/commands.h"
#include "tools/perf_data.h"
#include "tools/perf_device_bound.h"
#include "tools/perf_report.h"

namespace collie::tools {
namespace {

// Timed runs are split into this many batches (fewer when -n is smaller).
constexpr int kBatches = 20;

// A 64-byte aligned, zero-initialised byte buffer: heap memory, or (-R 1) memory from
// allocShared registered on the communicator for single-copy collectives.
class AlignedBuffer {
 public:
  AlignedBuffer(size_t bytes, Communicator* registerOn) : comm_(registerOn) {
    const size_t padded = (bytes + 63) / 64 * 64 + 64;
    if (comm_ == nullptr) {
      data_ = static_cast<uint8_t*>(std::aligned_alloc(64, padded));
      if (data_ != nullptr) std::memset(data_, 0, padded);
      return;
    }
    Result<void*> shared = allocShared(padded);  // zero-filled
    if (!shared.isOk()) return;
    data_ = static_cast<uint8_t*>(*shared);
    if (!comm_->registerBuffer(data_, padded).isOk()) {
      (void)freeShared(data_);
      data_ = nullptr;
    }
  }
  ~AlignedBuffer() {
    if (data_ == nullptr) return;
    if (comm_ == nullptr) {
      std::free(data_);
    } else {
      (void)comm_->deregisterBuffer(data_);
      (void)freeShared(data_);
    }
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  uint8_t* get() const { return data_; }

 private:
  Communicator* comm_;
  uint8_t* data_ = nullptr;
};

// --device 1: the send and receive buffers in device memory of the runtime the
// communicator uses, and a stream for copies to and from their host mirrors.
class DeviceBuffers {
 public:
  ~DeviceBuffers() {
    if (runtime_ == nullptr) return;
    if (windowsOn_ != nullptr) {
      (void)windowsOn_->deregisterDeviceWindow(send_);
      (void)windowsOn_->deregisterDeviceWindow(recv_);
    }
    if (send_ != nullptr) runtime_->free(send_);
    if (recv_ != nullptr) runtime_->free(recv_);
    if (stream_ != nullptr) runtime_->destroyStream(stream_);
  }
  Status open(size_t sendBytes, size_t recvBytes) {
    Result<DeviceKnobs> knobs = DeviceKnobs::parse(Config::fromEnvironment());
    if (!knobs.isOk()) return knobs.status().withContext("collie perf --device 1");
    Result<DeviceRuntime*> runtime = selectDeviceRuntime(knobs->emulation);
    if (!runtime.isOk()) return runtime.status().withContext("collie perf --device 1");
    runtime_ = *runtime;
    if (runtime_ == nullptr) {
      return unsupported(
          "collie perf --device 1: no CUDA device (COLLIE_DEVICE_EMULATION=1 emulates one)");
    }
    Result<DeviceStream> stream = runtime_->createStream();
    if (!stream.isOk()) return stream.status();
    stream_ = *stream;
    Result<void*> send = runtime_->allocate(sendBytes);
    if (!send.isOk()) return send.status();
    send_ = static_cast<uint8_t*>(*send);
    Result<void*> recv = runtime_->allocate(recvBytes);
    if (!recv.isOk()) return recv.status();
    recv_ = static_cast<uint8_t*>(*recv);
    sendBytes_ = sendBytes;
    recvBytes_ = recvBytes;
    return Status();
  }
  // -R 1: both buffers as device windows of `comm` (collective), closed at destruction.
  Status registerWindows(Communicator& comm) {
    COLLIE_RETURN_IF_ERROR(comm.registerDeviceWindow(send_, sendBytes_));
    windowsOn_ = &comm;
    Status status = comm.registerDeviceWindow(recv_, recvBytes_);
    if (!status.isOk()) {
      (void)comm.deregisterDeviceWindow(send_);
      windowsOn_ = nullptr;
    }
    return status;
  }
  uint8_t* send() const { return send_; }
  uint8_t* recv() const { return recv_; }
  DeviceRuntime& runtime() const { return *runtime_; }
  // Copies between host and device memory and waits for the copy.
  Status copy(void* dst, const void* src, size_t bytes) {
    COLLIE_RETURN_IF_ERROR(runtime_->memcpyAsync(dst, src, bytes, stream_));
    return drainStream(*runtime_, stream_);
  }

 private:
  DeviceRuntime* runtime_ = nullptr;
  DeviceStream stream_ = nullptr;
  uint8_t* send_ = nullptr;
  uint8_t* recv_ = nullptr;
  size_t sendBytes_ = 0;
  size_t recvBytes_ = 0;
  Communicator* windowsOn_ = nullptr;
};

class PerfRunner {
 public:
  PerfRunner(Communicator& comm, const PerfArgs& args) : comm_(comm), args_(args) {}

  Status run(std::vector<PerfRow>* rows);
  // With --device 1: the memory bound of each row (perf_device_bound.h); null otherwise.
  nlohmann::json deviceBoundJson() const { return boundJson_; }

 private:
  Result<Work> issue(const PerfShape& shape, const void* send, void* recv);
  Status runOnce(const PerfShape& shape, const void* send, void* recv, const char* what);
  Result<PerfMeasurement> measure(const PerfShape& shape, bool inPlace);
  Status maxOverRanks(double* values, size_t n);
  Status sumOverRanks(uint64_t* value);
  Result<std::vector<std::string>> rankLines();
  // Times a device copy on each rank in turn and gathers every rank's device and rate.
  Result<DeviceBound> measureDeviceBound(size_t largestBytes);
  PerfCase perfCase(const PerfShape& shape) const {
    return {args_.collective, args_.dtype, args_.op, comm_.size(), comm_.rank(), args_.root, shape};
  }

  Communicator& comm_;
  const PerfArgs& args_;
  size_t elemSize_ = 0;
  size_t offset_ = 0;                    // -u / --unalign_bytes: every buffer starts this far in
  std::unique_ptr<AlignedBuffer> send_;  // with --device 1: the host mirrors
  std::unique_ptr<AlignedBuffer> recv_;
  std::unique_ptr<DeviceBuffers> device_;
  // perf's own all-reduces (the slowest rank's times, the wrong-element count) run on
  // this, registered like the measured buffers (-R 1): a forced team algorithm (--algo
  // direct) applies to them too.
  std::unique_ptr<AlignedBuffer> stats_;
  static constexpr size_t kStatsBytes = 64;
  nlohmann::json boundJson_;
};

Result<Work> PerfRunner::issue(const PerfShape& shape, const void* send, void* recv) {
  size_t n = shape.callCount;
  switch (args_.collective) {
    case CollectiveKind::kAllReduce:
      return comm_.allReduce(send, recv, n, args_.dtype, args_.op);
    case CollectiveKind::kReduceScatter:
      return comm_.reduceScatter(send, recv, n, args_.dtype, args_.op);
    case CollectiveKind::kAllGather:
      return comm_.allGather(send, recv, n, args_.dtype);
    case CollectiveKind::kBroadcast:
      return comm_.broadcast(send, recv, n, args_.dtype, args_.root);
    case CollectiveKind::kReduce:
      return comm_.reduce(send, recv, n, args_.dtype, args_.op, args_.root);
    case CollectiveKind::kAllToAll:
      return comm_.allToAll(send, recv, n, args_.dtype);
    case CollectiveKind::kGather:
      return comm_.gather(send, recv, n, args_.dtype, args_.root);
    case CollectiveKind::kScatter:
      return comm_.scatter(send, recv, n, args_.dtype, args_.root);
    default:
      return internalError("collie perf: unexpected collective");
  }
}

Status PerfRunner::runOnce(const PerfShape& shape, const void* send, void* recv, const char* what) {
  Result<Work> work = issue(shape, send, recv);
  Status status = work.isOk() ? work->wait() : work.status();
  if (status.isOk()) return status;
  return status.withContext(std::string(collectiveName(args_.collective)) + " of " +
                            std::to_string(shape.sizeBytes) + " bytes (" + what + ")");
}

Status PerfRunner::maxOverRanks(double* values, size_t n) {
  if (n * sizeof(double) > kStatsBytes) return internalError("collie perf: too many statistics");
  auto* shared = reinterpret_cast<double*>(stats_->get());
  std::memcpy(shared, values, n * sizeof(double));
  Result<Work> work = comm_.allReduce(shared, shared, n, DataType::kFloat64, ReduceOp::kMax);
  Status status = work.isOk() ? work->wait() : work.status();
  std::memcpy(values, shared, n * sizeof(double));
  return status;
}

Status PerfRunner::sumOverRanks(uint64_t* value) {
  auto* shared = reinterpret_cast<uint64_t*>(stats_->get());
  *shared = *value;
  Result<Work> work = comm_.allReduce(shared, shared, 1, DataType::kUint64, ReduceOp::kSum);
  Status status = work.isOk() ? work->wait() : work.status();
  *value = *shared;
  return status;
}

Result<PerfMeasurement> PerfRunner::measure(const PerfShape& shape, bool inPlace) {
  PerfCase c = perfCase(shape);
  uint8_t* host = recv_->get() + offset_;  // buf itself, or its host mirror
  uint8_t* buf = (device_ ? device_->recv() : recv_->get()) + offset_;
  const size_t sendOffset = shape.inPlaceSendOffset * elemSize_;
  const size_t recvOffset = inPlace ? shape.inPlaceRecvOffset * elemSize_ : 0;
  const void* send =
      inPlace ? buf + sendOffset : (device_ ? device_->send() : send_->get()) + offset_;
  void* recv = buf + recvOffset;
  const char* what = inPlace ? "in-place" : "out-of-place";
  PerfMeasurement m;
  if (args_.check) {
    fillSentinel(host, shape.sizeBytes);
    if (inPlace) {
      bool hasInput = (args_.collective != CollectiveKind::kBroadcast &&
                       args_.collective != CollectiveKind::kScatter) ||
                      c.rank == c.root;
      if (hasInput) fillInput(c, host + sendOffset, 0, shape.sendElems);
    }
    if (device_) COLLIE_RETURN_IF_ERROR(device_->copy(buf, host, shape.sizeBytes));
    COLLIE_RETURN_IF_ERROR(runOnce(shape, send, recv, what));
    if (device_) COLLIE_RETURN_IF_ERROR(device_->copy(host, buf, shape.sizeBytes));
    m.wrong = countWrong(c, host + recvOffset);
    COLLIE_RETURN_IF_ERROR(sumOverRanks(&m.wrong));
  }
  for (int i = 0; i < args_.warmup; ++i) COLLIE_RETURN_IF_ERROR(runOnce(shape, send, recv, what));
  Result<Work> barrier = comm_.barrier();
  COLLIE_RETURN_IF_ERROR(barrier.isOk() ? barrier->wait() : barrier.status());

  const int batches = std::min(args_.iters, kBatches);
  std::vector<double> perCallUs;
  perCallUs.reserve(static_cast<size_t>(batches));
  double totalUs = 0;
  for (int b = 0; b < batches; ++b) {
    // Batch b holds runs [b * iters / batches, (b + 1) * iters / batches).
    const int calls = (b + 1) * args_.iters / batches - b * args_.iters / batches;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) COLLIE_RETURN_IF_ERROR(runOnce(shape, send, recv, what));
    std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
    totalUs += elapsed.count();
    perCallUs.push_back(elapsed.count() / calls);
  }
  m.timing = summarizeTimes(std::move(perCallUs));
  m.timing.avgUs = totalUs / args_.iters;
  double stats[3] = {m.timing.avgUs, m.timing.minUs, m.timing.medianUs};
  COLLIE_RETURN_IF_ERROR(maxOverRanks(stats, 3));
  m.timing = {stats[0], stats[1], stats[2]};
  computeBandwidth(args_, comm_.size(), shape.sizeBytes, &m);
  return m;
}

Result<DeviceBound> PerfRunner::measureDeviceBound(size_t largestBytes) {
  constexpr size_t kMinCopy = size_t{64} << 20, kMaxCopy = size_t{1} << 30;
  const size_t copyBytes = std::clamp(largestBytes, kMinCopy, kMaxCopy);
  // The record each rank contributes: its device's key, then its rate.
  struct Record {
    char key[120];
    double trafficBytesPerSec;
  };
  Record mine = {};
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  Result<int> ordinal = device_->runtime().currentDevice();
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::snprintf(mine.key, sizeof mine.key, "%s %s device %d%s%s", host,
                device_->runtime().name().c_str(), ordinal.isOk() ? *ordinal : -1,
                visible != nullptr ? " of CUDA_VISIBLE_DEVICES=" : "",
                visible != nullptr ? visible : "");
  // One rank at a time, so that ranks sharing a device each time it alone.
  for (int turn = 0; turn < comm_.size(); ++turn) {
    if (turn == comm_.rank()) {
      Result<double> rate = measureDeviceCopy(device_->runtime(), copyBytes, 5);
      if (rate.isOk()) {
        mine.trafficBytesPerSec = *rate;
      } else {
        std::fprintf(stderr, "collie perf: rank %d: no device bound: %s\n", comm_.rank(),
                     rate.status().toString().c_str());
      }
    }
    Result<Work> barrier = comm_.barrier();
    COLLIE_RETURN_IF_ERROR(barrier.isOk() ? barrier->wait() : barrier.status());
  }
  std::vector<Record> all(static_cast<size_t>(comm_.size()));
  Result<Work> work = comm_.allGather(&mine, all.data(), sizeof(Record), DataType::kUint8);
  COLLIE_RETURN_IF_ERROR(work.isOk() ? work->wait() : work.status());
  std::vector<std::pair<std::string, double>> perRank;
  for (Record& record : all) {
    record.key[sizeof record.key - 1] = '\0';
    perRank.emplace_back(record.key, record.trafficBytesPerSec);
  }
  return groupDevices(perRank, copyBytes);
}

Result<std::vector<std::string>> PerfRunner::rankLines() {
  constexpr size_t kLine = 160;
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  int next = (comm_.rank() + 1) % comm_.size();
  std::vector<char> all(kLine * static_cast<size_t>(comm_.size()));
  char mine[kLine] = {};
  std::snprintf(mine, sizeof mine, "Rank %2d Pid %6d on %10s device %s transport to rank %d: %s",
                comm_.rank(), static_cast<int>(getpid()), host, args_.device ? "gpu" : "host", next,
                comm_.transportTo(next).c_str());
  Result<Work> work = comm_.allGather(mine, all.data(), kLine, DataType::kUint8);
  COLLIE_RETURN_IF_ERROR(work.isOk() ? work->wait() : work.status());
  std::vector<std::string> lines;
  for (int r = 0; r < comm_.size(); ++r) {
    const char* line = all.data() + kLine * static_cast<size_t>(r);
    lines.emplace_back(line, strnlen(line, kLine));
  }
  return lines;
}

Status PerfRunner::run(std::vector<PerfRow>* rows) {
  const int nranks = comm_.size();
  const bool printer = comm_.rank() == 0;
  elemSize_ = dataTypeSize(args_.dtype);
  offset_ = bufferOffsetBytes(args_);
  std::vector<int64_t> sizes = perfSizes(args_);
  size_t maxSend = 0, maxBuf = 0;
  for (int64_t size : sizes) {
    PerfShape shape = perfShape(args_.collective, size, args_.dtype, nranks, comm_.rank());
    maxSend = std::max(maxSend, shape.sendElems * elemSize_);
    maxBuf = std::max(maxBuf, shape.sizeBytes);
  }
  Communicator* registerOn = args_.registered && !args_.device ? &comm_ : nullptr;
  send_ = std::make_unique<AlignedBuffer>(offset_ + maxSend, registerOn);
  recv_ = std::make_unique<AlignedBuffer>(offset_ + maxBuf, registerOn);
  stats_ = std::make_unique<AlignedBuffer>(kStatsBytes, registerOn);
  if (send_->get() == nullptr || recv_->get() == nullptr || stats_->get() == nullptr) {
    return systemError(
        "collie perf: allocating " + std::to_string(2 * offset_ + maxSend + maxBuf) + " bytes",
        ENOMEM);
  }
  // Inputs depend only on the element index, so one fill serves every size.
  PerfShape largest =
      perfShape(args_.collective, args_.maxBytes, args_.dtype, nranks, comm_.rank());
  fillInput(perfCase(largest), send_->get() + offset_, 0, maxSend / std::max<size_t>(elemSize_, 1));
  if (args_.device) {
    device_ = std::make_unique<DeviceBuffers>();
    COLLIE_RETURN_IF_ERROR(device_->open(offset_ + maxSend + 64, offset_ + maxBuf + 64));
    if (args_.registered) {
      COLLIE_RETURN_IF_ERROR(device_->registerWindows(comm_).withContext("collie perf -R 1"));
    }
    COLLIE_RETURN_IF_ERROR(
        device_->copy(device_->send() + offset_, send_->get() + offset_, maxSend));
  }

  DeviceBound bound;
  std::vector<double> boundUs;
  if (device_) {
    Result<DeviceBound> measured = measureDeviceBound(std::max(maxSend, maxBuf));
    if (!measured.isOk()) return measured.status();
    bound = *measured;
  }
  Result<std::vector<std::string>> lines = rankLines();
  if (!lines.isOk()) return lines.status();
  if (printer) {
    std::fputs(formatHeader(args_, nranks, *lines).c_str(), stdout);
    std::fflush(stdout);
  }
  for (int64_t size : sizes) {
    PerfShape shape = perfShape(args_.collective, size, args_.dtype, nranks, comm_.rank());
    if (shape.callCount == 0) continue;  // fewer elements than ranks: nothing to move
    PerfRow row;
    row.sizeBytes = shape.sizeBytes;
    row.count = shape.countColumn;
    Result<PerfMeasurement> out = measure(shape, false);
    if (!out.isOk()) return out.status();
    PerfMeasurement notRun;
    notRun.skipped = true;
    Result<PerfMeasurement> in = notRun;
    // All-to-all in place runs on host buffers only (Communicator::allToAll).
    const bool inPlace =
        shape.inPlace && !(device_ && args_.collective == CollectiveKind::kAllToAll);
    if (inPlace) in = measure(shape, true);
    if (!in.isOk()) return in.status();
    row.outOfPlace = *out;
    row.inPlace = *in;
    rows->push_back(row);
    // 0 (no fractions, in the text or the JSON) for collectives without a bound.
    if (device_) {
      boundUs.push_back(hasDeviceBound(args_.collective) ? deviceBoundUs(bound, shape, elemSize_)
                                                         : 0);
    }
    if (printer) {
      std::fputs(formatRow(args_, row).c_str(), stdout);
      std::fflush(stdout);
    }
  }
  if (printer) std::fputs(formatFooter(args_, *rows).c_str(), stdout);
  if (device_) {
    if (printer) std::fputs(formatDeviceBound(args_, bound, *rows, boundUs).c_str(), stdout);
    boundJson_ = tools::deviceBoundJson(bound, *rows, boundUs);
  }
  return Status();
}

}  // namespace

int runPerf(const PerfCliOptions& raw) {
  Result<PerfArgs> args = resolvePerfArgs(raw);
  if (!args.isOk()) {
    std::fprintf(stderr, "collie perf: %s\n", args.status().message().c_str());
    return 2;
  }
  Options options;
  options.algorithm = args->algorithm;
  options.transport = args->transport;
  Result<std::unique_ptr<Communicator>> comm = Communicator::createFromEnvironment(options);
  if (!comm.isOk()) {
    std::fprintf(stderr, "collie perf: joining the job failed: %s\n",
                 comm.status().toString().c_str());
    return 2;
  }
  Communicator& c = **comm;
  if (hasRoot(args->collective) && args->root >= c.size()) {
    std::fprintf(stderr, "collie perf: -r %d is not a rank of this %d-rank job\n", args->root,
                 c.size());
    return 2;
  }
  // Refuse, on every rank alike, what would only fail after the run: sizes that hold
  // no element per rank, and a --json file rank 0 cannot write.
  bool anyRow = false;
  for (int64_t size : perfSizes(*args)) {
    anyRow = anyRow || perfShape(args->collective, size, args->dtype, c.size(), 0).callCount > 0;
  }
  if (!anyRow) {
    std::fprintf(stderr,
                 "collie perf: no size from -b to -e holds one %s element per rank (%d ranks): "
                 "nothing to run\n",
                 std::string(dataTypeName(args->dtype)).c_str(), c.size());
    return 2;
  }
  {
    // Every rank takes part whether or not it was given --json: only rank 0 writes the
    // file, and launchers that start each rank on its own (compare.py's namespaces) give
    // it to rank 0 alone. Registered like the measured buffers (-R 1), as a forced --algo
    // direct needs.
    AlignedBuffer flag(sizeof(int32_t), args->registered && !args->device ? &c : nullptr);
    auto* writable = reinterpret_cast<int32_t*>(flag.get());
    if (writable == nullptr) {
      std::fprintf(stderr, "collie perf: allocating the --json check's buffer failed\n");
      return 2;
    }
    *writable = 1;
    if (c.rank() == 0 && !args->jsonPath.empty()) {
      *writable = std::ofstream(args->jsonPath, std::ios::app) ? 1 : 0;
      // Said before the agreement: once it completes, another rank may exit first and
      // its launcher end this one before it could print.
      if (*writable == 0) {
        std::fprintf(stderr, "collie perf: rank 0 cannot write --json %s\n",
                     args->jsonPath.c_str());
      }
    }
    const bool refusedHere = *writable == 0;
    auto agreed = c.allReduce(writable, writable, 1, DataType::kInt32, ReduceOp::kMin);
    Status st = agreed.isOk() ? agreed->wait() : agreed.status();
    if (!st.isOk() || *writable == 0) {
      if (!st.isOk()) {
        std::fprintf(stderr, "collie perf: %s\n", st.toString().c_str());
      } else if (!refusedHere) {
        std::fprintf(stderr, "collie perf: rank 0 cannot write its --json file\n");
      }
      return 2;
    }
  }
  PerfRunner runner(c, *args);
  std::vector<PerfRow> rows;
  Status status = runner.run(&rows);
  if (!status.isOk()) {
    std::fprintf(stderr, "collie perf: rank %d: %s\n", c.rank(), status.toString().c_str());
    c.abort();
    return 2;
  }
  if (c.rank() == 0 && !args->jsonPath.empty()) {
    std::string transport =
        args->transport.empty() ? c.transportTo((c.rank() + 1) % c.size()) : args->transport;
    std::ofstream file(args->jsonPath);
    nlohmann::json doc = toJson(*args, c.size(), transport, rows);
    if (args->device) doc["device_bound"] = runner.deviceBoundJson();
    file << doc.dump(2) << "\n";
    if (!file) {
      std::fprintf(stderr, "collie perf: cannot write %s\n", args->jsonPath.c_str());
      return 2;
    }
  }
  return totalWrong(rows) == 0 ? 0 : 1;
}

}  // namespace collie::tools
