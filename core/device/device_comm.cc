#include "core/device/device_comm.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>

#include "core/device/device_comm_parts.h"
#include "core/log/log.h"
#include "core/plan/algorithm_spec.h"
#include "core/plan/fingerprint.h"

namespace collie {
namespace {

using Clock = std::chrono::steady_clock;

// How long past the device-side deadline the host waits for a stream before it
// reports the collective as stuck (e.g. behind other work on the caller's stream).
constexpr auto kHostGrace = std::chrono::seconds(2);

}  // namespace

DeviceComm::DeviceComm(DeviceRuntime* runtime, const DeviceCommConfig& config)
    : runtime_(runtime),
      config_(config),
      peerRegions_(config.nranks, nullptr),
      outcome_(std::make_shared<Outcome>()),
      counters_(nullptr) {
  outcome_->runtime = runtime;
  outcome_->timeout = config.timeout;
}

DeviceComm::Outcome::~Outcome() {
  if (mapped != nullptr) runtime->freeMapped(mapped);
}

size_t DeviceComm::windowBytes(int nranks, size_t slotBytes, size_t boardBytes,
                               size_t ringSliceBytes) {
  return Region::bytes(nranks, slotBytes, boardBytes, ringSliceBytes);
}

Status DeviceComm::Outcome::sticky() {
  std::lock_guard<std::mutex> lock(mutex);
  return failed;
}

Status DeviceComm::Outcome::fail(Status status) {
  std::lock_guard<std::mutex> lock(mutex);
  if (failed.isOk()) failed = std::move(status);
  return failed;
}

Result<std::unique_ptr<DeviceComm>> DeviceComm::create(DeviceRuntime* runtime,
                                                       const DeviceCommConfig& config,
                                                       std::unique_ptr<DeviceWindows> windows) {
  const std::string where =
      "rank " + std::to_string(config.rank) + " device path (" + runtime->name() + " runtime)";
  if (config.workFromPoller == nullptr) {
    return invalidArgument(where + ": no workFromPoller (DeviceCommConfig) to return Work with");
  }
  if (config.slotBytes < kMinSlotBytes || config.slotBytes % kMinSlotBytes != 0) {
    return invalidArgument(where + ": slots of " + std::to_string(config.slotBytes) +
                           " bytes; they must be a multiple of " + std::to_string(kMinSlotBytes));
  }
  if (config.boardBytes % kMinSlotBytes != 0) {
    return invalidArgument(where + ": board slots of " + std::to_string(config.boardBytes) +
                           " bytes; they must be a multiple of " + std::to_string(kMinSlotBytes));
  }
  if (config.ringSliceBytes % kMinSlotBytes != 0) {
    return invalidArgument(where + ": ring slices of " + std::to_string(config.ringSliceBytes) +
                           " bytes; they must be a multiple of " + std::to_string(kMinSlotBytes));
  }
  const size_t regionBytes =
      Region::bytes(config.nranks, config.slotBytes, config.boardBytes, config.ringSliceBytes);
  if (windows == nullptr || windows->bytes() < regionBytes) {
    return invalidArgument(where + ": device windows of " +
                           std::to_string(windows ? windows->bytes() : 0) + " bytes, need " +
                           std::to_string(regionBytes));
  }
  Result<int> device = runtime->currentDevice();
  if (!device.isOk()) return device.status().withContext(where);
  std::unique_ptr<DeviceComm> comm(new DeviceComm(runtime, config));
  comm->device_ = *device;
  for (int r = 0; r < config.nranks; ++r) comm->peerRegions_[r] = windows->window(r);
  comm->region_ = comm->peerRegions_[config.rank];
  comm->windows_ = std::move(windows);
  // The error word and, 8 and 16 bytes on, the peer's and this rank's fingerprint of a
  // mismatch.
  Result<void*> mapped = runtime->allocateMapped(3 * sizeof(uint64_t));
  if (!mapped.isOk()) return mapped.status().withContext(where);
  comm->outcome_->mapped = *mapped;
  comm->outcome_->error = static_cast<int32_t*>(*mapped);
  comm->outcome_->peerFingerprint = static_cast<uint64_t*>(*mapped) + 1;
  comm->outcome_->ownFingerprint = static_cast<uint64_t*>(*mapped) + 2;
  // The message counts and the sequence number, in device memory (zero-filled).
  Result<void*> counters = runtime->allocate(Counters::bytes(config.nranks));
  if (!counters.isOk()) return counters.status().withContext(where + ": message counts");
  comm->counters_ = static_cast<uint64_t*>(*counters);
  comm->outcome_->rank = config.rank;
  Result<DeviceStream> stream = runtime->createStream();
  if (!stream.isOk()) return stream.status().withContext(where);
  comm->ownStream_ = *stream;
  if (config.profile) {
    Result<void*> profile = runtime->allocate(2 * sizeof(uint64_t));
    if (!profile.isOk()) return profile.status().withContext(where + ": profile counters");
    comm->profile_ = static_cast<uint64_t*>(*profile);
  }
  COLLIE_LOG(INFO, INIT) << where << ": " << config.nranks << " ranks, " << regionBytes
                         << " bytes of flags, inboxes, boards and ring FIFOs per rank (slots of "
                         << config.slotBytes << " bytes, board slots of " << config.boardBytes
                         << ", ring slices of " << config.ringSliceBytes << ")";
  return comm;
}

DeviceComm::~DeviceComm() {
  // Kernels of this rank read and write peers' regions: let them drain first (they
  // end at their own device-side deadline at worst).
  if (lastEvent_ &&
      !waitForEvent(*runtime_, lastEvent_.get(), Clock::now() + config_.timeout + kHostGrace)) {
    COLLIE_LOG(WARN, INIT) << "rank " << config_.rank
                           << ": device work still running at communicator destruction";
  }
  lastEvent_.reset();
  if (profile_ != nullptr) logProfile();
  if (ownStream_ != nullptr) runtime_->destroyStream(ownStream_);
  if (profile_ != nullptr) runtime_->free(profile_);
  if (counters_ != nullptr) runtime_->free(counters_);
  for (uint8_t* old : retiredScratch_) runtime_->free(old);
  if (scratch_.data != nullptr) runtime_->free(scratch_.data);
  if (premulScratch_.data != nullptr) runtime_->free(premulScratch_.data);
  for (const UserWindow& window : userWindows_) closeWindow(window);
  windows_.reset();  // this rank's window and the mappings of the peers'
}

// COLLIE_DEVICE_PROFILE's line: the step kernels' waits for their peers' flags (block 0's
// view), against the kernels' count; the rest of a collective's time is launching,
// scheduling and moving the data.
void DeviceComm::logProfile() {
  uint64_t counters[2] = {0, 0};
  Status copied = runtime_->memcpyAsync(counters, profile_, sizeof(counters), ownStream_);
  Result<DeviceEvent> event =
      copied.isOk() ? runtime_->recordEvent(ownStream_) : Result<DeviceEvent>(copied);
  if (!event.isOk() || !waitForEvent(*runtime_, *event, Clock::now() + std::chrono::seconds(10))) {
    COLLIE_LOG(WARN, INIT) << "rank " << config_.rank << ": device profile not read back";
    if (event.isOk()) runtime_->destroyEvent(*event);
    return;
  }
  runtime_->destroyEvent(*event);
  const double waitedUs = static_cast<double>(counters[0]) / 1000.0;
  COLLIE_LOG(INFO, INIT) << "rank " << config_.rank << " device profile: " << counters[1]
                         << " kernels waited " << waitedUs << " us for peers' flags ("
                         << (counters[1] > 0 ? waitedUs / static_cast<double>(counters[1]) : 0)
                         << " us per kernel)";
}

// The stream a submission launches on (null: the communicator's own), made to wait
// first for the previous submission when that went to another stream. Not while the
// stream is being captured: a graph cannot wait for an event recorded outside it, and
// its launches run when the caller launches the graph, ordered by the caller.
Result<DeviceStream> DeviceComm::orderAfterPrevious(DeviceStream stream, bool captured) {
  if (stream == nullptr) stream = ownStream_;
  if (!captured && lastEvent_ && stream != lastStream_) {
    COLLIE_RETURN_IF_ERROR(runtime_->streamWaitEvent(stream, lastEvent_.get()));
  }
  return stream;
}

// What every submission checks first, under mutex_ and with the communicator's device
// made current by `scope`: the sticky failure, the scope's own status, and whether work
// enqueued on `stream` now is captured into a CUDA graph (captured kernels replay
// correctly: every count they depend on lives in device memory, Launcher).
Result<bool> DeviceComm::begin(const DeviceScope& scope, DeviceStream stream) {
  COLLIE_RETURN_IF_ERROR(outcome_->poll());
  COLLIE_RETURN_IF_ERROR(scope.status());
  if (stream == nullptr) return false;  // the communicator's own stream: never captured
  return runtime_->isCapturing(stream);
}

Status DeviceComm::ensureScratch(Scratch* scratch, size_t bytes, bool captured) {
  if (bytes <= scratch->bytes) return Status();
  if (captured) {
    // cudaMalloc would end the capture with an error (and a captured kernel would keep
    // the old scratch's address anyway).
    return unsupported("this collective needs " + std::to_string(bytes) +
                       " bytes of device scratch, which cannot be allocated while the stream "
                       "is captured; run it once outside the capture first (the scratch "
                       "stays, and is reused)");
  }
  Result<void*> fresh = runtime_->allocate(bytes);
  if (!fresh.isOk()) return fresh.status().withContext("device scratch");
  if (scratch->data != nullptr) retiredScratch_.push_back(scratch->data);
  scratch->data = static_cast<uint8_t*>(*fresh);
  scratch->bytes = bytes;
  return Status();
}

// PREMUL_SUM's elements of this rank's input (the whole input of all-reduce, reduce and
// reduce-scatter), or InvalidArgument.
Result<size_t> DeviceComm::preMultiplyCount(const CollectiveArgs& args) const {
  if (!args.scalar.present) return invalidArgument("premulsum needs this rank's scalar factor");
  if (args.kind == CollectiveKind::kReduceScatter) {
    return args.count * static_cast<size_t>(config_.nranks);
  }
  if (args.kind != CollectiveKind::kAllReduce && args.kind != CollectiveKind::kReduce) {
    return invalidArgument("premulsum is an op of all-reduce, reduce and reduce-scatter only");
  }
  return args.count;
}

// PREMUL_SUM: this rank's input times its factor, into scratch of its own (never the
// output: the fingerprint check launched before it may still fail, and a Mismatch must
// leave the output untouched), on the collective's stream; the SUM schedule then reads
// the scaled copy. premulScratch_ holds `count` elements already.
Status DeviceComm::launchPreMultiply(const CollectiveArgs& args, size_t count, const void* input,
                                     DeviceStream stream) {
  DeviceScaleStep scale;
  scale.src = input;
  scale.dst = premulScratch_.data;
  scale.count = count;
  scale.dtype = args.dtype;
  std::memcpy(&scale.factor, args.scalar.bytes, sizeof(scale.factor));
  scale.factorAt = args.scalar.device;  // ncclScalarDevice: read when the kernel runs
  return runtime_->launchScale(scale, stream);
}

// Each collective opens with the fingerprint check against every peer, in launches of
// at most kDeviceMaxCheckPeers peers (the first one also publishes, the last one
// advances the sequence number). The sequence number lives in device memory: the
// kernel picks the slots, completes `fingerprint` (made with sequence 0) and the
// posted value from it.
DeviceFingerprintCheck DeviceComm::checkOf(uint64_t fingerprint) const {
  const int n = config_.nranks;
  DeviceFingerprintCheck check;
  check.ownSlot = reinterpret_cast<uint64_t*>(region_ + Region::checkSlot(n, 0));
  check.ownPosted = reinterpret_cast<uint64_t*>(region_ + Region::checkPosted(n));
  check.fingerprint = fingerprint;
  check.posted = 1;
  check.error = outcome_->error;
  check.peerFingerprint = outcome_->peerFingerprint;
  check.ownFingerprint = outcome_->ownFingerprint;
  check.timeoutNs = static_cast<uint64_t>(config_.timeout.count()) * 1000;
  check.timeoutBase = kPeerTimeoutBase;
  check.mismatchBase = kPeerMismatchBase;
  check.sequence = counters_ + Counters::sequence(n);
  check.sequenceShift = kFingerprintSequenceShift;
  return check;
}

int DeviceComm::addCheckPeer(DeviceFingerprintCheck& check, int peer) const {
  const int n = config_.nranks;
  const int i = check.npeers++;
  check.peerSlot[i] =
      reinterpret_cast<const uint64_t*>(peerRegions_[peer] + Region::checkSlot(n, 0));
  check.peerPosted[i] =
      reinterpret_cast<const uint64_t*>(peerRegions_[peer] + Region::checkPosted(n));
  check.peerRank[i] = peer;
  return i;
}

DeviceFingerprintCheck DeviceComm::checkWithEveryPeer(uint64_t fingerprint, size_t blockFlagsAt,
                                                      const uint64_t** peerBlockFlags) const {
  const int n = config_.nranks;
  DeviceFingerprintCheck check = checkOf(fingerprint);
  for (int peer = 0; peer < n; ++peer) {
    if (peer == config_.rank) continue;
    const int i = addCheckPeer(check, peer);
    peerBlockFlags[i] = reinterpret_cast<const uint64_t*>(peerRegions_[peer] + blockFlagsAt);
  }
  return check;
}

Status DeviceComm::launchCheck(uint64_t fingerprint, DeviceStream stream) {
  const int n = config_.nranks;
  DeviceFingerprintCheck check = checkOf(fingerprint);
  int remaining = n - 1;  // peers not yet in a launch
  for (int peer = 0; peer < n; ++peer) {
    if (peer == config_.rank) continue;
    addCheckPeer(check, peer);
    --remaining;
    if (check.npeers == kDeviceMaxCheckPeers || remaining == 0) {
      check.advanceSequence = remaining == 0;
      COLLIE_RETURN_IF_ERROR(runtime_->launchFingerprintCheck(check, stream));
      check.ownSlot = nullptr;
      check.ownPosted = nullptr;
      check.npeers = 0;
    }
  }
  if (check.ownSlot != nullptr) {  // a single rank: publish only
    check.advanceSequence = true;
    COLLIE_RETURN_IF_ERROR(runtime_->launchFingerprintCheck(check, stream));
  }
  return Status();
}

Status DeviceComm::launchSchedule(const Schedule& schedule, const void* input, void* output,
                                  DeviceStream stream) {
  const size_t elem = dataTypeSize(schedule.args.dtype);
  auto at = [&](const Slice& slice) -> uint8_t* {
    switch (slice.buffer) {
      case BufferId::kInput:
        return const_cast<uint8_t*>(static_cast<const uint8_t*>(input)) + slice.offset;
      case BufferId::kOutput:
        return static_cast<uint8_t*>(output) + slice.offset;
      case BufferId::kScratch:
        return scratch_.data + slice.offset;
    }
    return nullptr;
  };
  Launcher launcher(*this);
  for (const std::vector<Step>& channel : schedule.channels) {
    for (const Step& step : channel) {
      const bool moves = step.sendPeer >= 0 || step.recvPeer >= 0;
      if (moves && step.bytes > config_.slotBytes) {
        return internalError("device path: a step of " + std::to_string(step.bytes) +
                             " bytes does not fit a " + std::to_string(config_.slotBytes) +
                             "-byte slot (the planner did not chunk it)");
      }
      Status launched;
      DeviceStepSync sync = launcher.baseSync();
      switch (step.kind) {
        case StepKind::kSend:
        case StepKind::kSendRecv: {
          DeviceCopyStep copy{at(step.src), nullptr, nullptr, step.bytes, sync};
          copy.peerOut = launcher.send(step.sendPeer, &copy.sync, 0);
          launched = runtime_->launchCopy(copy, stream);
          if (step.kind == StepKind::kSend || !launched.isOk()) break;
          DeviceCopyStep receive{nullptr, at(step.dst), nullptr, step.bytes, launcher.baseSync()};
          receive.src = launcher.recv(step.recvPeer, &receive.sync, 0);
          launched = runtime_->launchCopy(receive, stream);
          break;
        }
        case StepKind::kRecv:
        case StepKind::kRecvCopySend: {
          DeviceCopyStep copy{nullptr, at(step.dst), nullptr, step.bytes, sync};
          copy.src = launcher.recv(step.recvPeer, &copy.sync, 0);
          if (step.kind == StepKind::kRecvCopySend) {
            copy.peerOut = launcher.send(step.sendPeer, &copy.sync, 1);
          }
          launched = runtime_->launchCopy(copy, stream);
          break;
        }
        case StepKind::kRecvReduceSend:
        case StepKind::kRecvReduceCopy: {
          DeviceReduceStep reduce;
          reduce.sync = sync;
          reduce.local = at(step.src);
          reduce.incoming = launcher.recv(step.recvPeer, &reduce.sync, 0);
          reduce.out = at(step.dst);
          if (step.kind == StepKind::kRecvReduceSend) {
            reduce.peerOut = launcher.send(step.sendPeer, &reduce.sync, 1);
          }
          reduce.count = step.bytes / elem;
          reduce.dtype = schedule.args.dtype;
          reduce.op = schedule.args.op;
          reduce.divisor = step.divisor;
          launched = runtime_->launchReduce(reduce, stream);
          break;
        }
        case StepKind::kCopy: {
          if (at(step.src) == at(step.dst) || step.bytes == 0) break;
          launched =
              runtime_->launchCopy({at(step.src), at(step.dst), nullptr, step.bytes, sync}, stream);
          break;
        }
        case StepKind::kTeam:  // submit() never plans one
          return internalError("device path: a team step in a device schedule");
      }
      if (!launched.isOk()) return launched;
    }
  }
  return Status();
}

Status DeviceComm::Outcome::finish(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex);
  return describeLocked(what);
}

Status DeviceComm::Outcome::poll() {
  std::lock_guard<std::mutex> lock(mutex);
  if (!failed.isOk() || error == nullptr) return failed;
  return describeLocked("a collective on rank " + std::to_string(rank) + " (device buffers)");
}

Status DeviceComm::Outcome::describeLocked(const std::string& what) {
  if (!failed.isOk()) return failed;
  const int32_t code = std::atomic_ref<int32_t>(*error).load(std::memory_order_acquire);
  if (code == 0) return Status();
  if (code == kAbortedCode) {
    failed = abortedError(what + ": the communicator was aborted");
    return failed;
  }
  if (code >= kPeerMismatchBase) {
    const int peer = code - kPeerMismatchBase;
    const uint64_t theirs =
        std::atomic_ref<uint64_t>(*peerFingerprint).load(std::memory_order_acquire);
    // The check kernel stores this rank's side (with the sequence number it used).
    const uint64_t fingerprint =
        std::atomic_ref<uint64_t>(*ownFingerprint).load(std::memory_order_acquire);
    // The root field of an all-reduce, reduce-scatter, all-gather or all-to-all carries
    // the direct kernel's windows and offsets (device_direct.cc) and nothing else.
    const uint64_t rootField = uint64_t{0xFFF} << 20;
    const CollectiveKind kind = decodeFingerprint(fingerprint).kind;
    const bool windowsDiffer =
        ((fingerprint ^ theirs) & rootField) != 0 &&
        (kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter ||
         kind == CollectiveKind::kAllGather || kind == CollectiveKind::kAllToAll);
    std::string fields = windowsDiffer
                             ? describeMismatch(fingerprint & ~rootField, theirs & ~rootField, peer)
                             : describeMismatch(fingerprint, theirs, peer);
    if (windowsDiffer) {
      fields += std::string(fields.empty() ? "" : "; ") +
                "the buffers lie in registered device windows on one rank and not on the other, "
                "or at other offsets of them (every rank passes buffers at the same offset of "
                "the same window, or none does)";
    }
    failed = mismatchError(
        what + ": rank " + std::to_string(rank) + " and rank " + std::to_string(peer) +
            " run different collectives: " + (fields.empty() ? "(fields equal)" : fields) +
            " (this rank " + describeFingerprint(fingerprint) + ", rank " + std::to_string(peer) +
            " " + describeFingerprint(theirs) +
            "); no output was written. Every rank must issue the same "
            "collectives in the same order",
        peer);
    return failed;
  }
  const int peer = code >= kPeerTimeoutBase ? code - kPeerTimeoutBase : -1;
  const std::string who = peer >= 0 ? "rank " + std::to_string(peer) : "a peer";
  failed = timeoutError(what + ": a device step waited longer than the timeout (" +
                            std::to_string(timeout.count() / 1000) + " ms) for " + who +
                            ", which did not reach the same step; check that every rank issues "
                            "the same collectives, or raise COLLIE_TIMEOUT",
                        peer);
  static_assert(kGenericTimeout == 1 && kPeerTimeoutBase > kGenericTimeout);
  return failed;
}

void DeviceComm::abort() {
  std::lock_guard<std::mutex> lock(outcome_->mutex);
  std::atomic_ref<int32_t>(*outcome_->error).store(kAbortedCode, std::memory_order_release);
  if (outcome_->failed.isOk()) {
    outcome_->failed = abortedError("rank " + std::to_string(config_.rank) +
                                    ": the communicator was aborted (device path)");
  }
}

Result<Work> DeviceComm::submit(const CollectiveArgs& args, const void* input, void* output,
                                DeviceStream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string what = std::string(collectiveName(args.kind)) + " on rank " +
                           std::to_string(config_.rank) + " (device buffers)";
  DeviceScope onDevice(*runtime_, device_);
  Result<bool> captured = begin(onDevice, stream);
  if (!captured.isOk()) return captured.status().withContext(what);
  PlanParams params;
  params.rank = config_.rank;
  params.nranks = config_.nranks;
  params.nchannels = 1;
  params.chunkBytes = config_.slotBytes;
  params.agreeOnRoot = false;  // launchCheck() compares every rank's fingerprint first
  if (isTeamAlgorithm(config_.algorithm) && config_.algorithm != Algorithm::kBoard &&
      config_.algorithm != Algorithm::kDirect) {
    return unsupported("algorithm " + std::string(algorithmName(config_.algorithm)) +
                       " is a team collective of host buffers (shm); device buffers run board, "
                       "direct, ring, tree, chain or auto")
        .withContext(what);
  }
  // Scratch is allocated before any launch: allocation waits for the default stream,
  // which a blocking stream's queued collective would hold up.
  size_t premulCount = 0;
  if (args.op == ReduceOp::kPreMulSum && args.count > 0) {
    Result<size_t> count = preMultiplyCount(args);
    if (!count.isOk()) return count.status().withContext(what);
    premulCount = *count;
    COLLIE_RETURN_IF_ERROR(
        ensureScratch(&premulScratch_, premulCount * dataTypeSize(args.dtype), *captured)
            .withContext(what));
  }
  // What the steps read: the input, or PREMUL_SUM's scaled copy of it.
  const void* source = premulCount > 0 ? premulScratch_.data : input;
  const bool onBoard = runsOnBoard(args);
  // Beyond the board: the direct kernel when the buffers lie in user windows (PREMUL_SUM's
  // scaled copy does not).
  DeviceDirectStep direct;
  uint64_t directMark = 0;
  const bool onDirect = !onBoard && directStepOf(args, input, output, &direct, &directMark);
  // A forced algorithm that lacks this collective, or does not run on these ranks, gives
  // way to the kind's robust default (no tuner here), by the host path's rule.
  const AlgorithmSpec* forced = AlgorithmRegistry::instance().forcedSchedule(
      config_.algorithm, args.kind, CommShape{config_.nranks});
  params.algorithm = forced != nullptr ? forced->id() : Algorithm::kAuto;
  const bool ringShaped = params.algorithm == Algorithm::kAuto ||
                          params.algorithm == Algorithm::kRing ||
                          params.algorithm == Algorithm::kChain;
  // Otherwise the schedule in one round as a ring program when it is ring-shaped, else in
  // chunks of a slot, one step kernel each.
  Result<Schedule> schedule = Result<Schedule>(Schedule());
  DeviceRingProgram ring;
  bool onRing = false;
  if (!onBoard && !onDirect && ringShaped && mayRunRingProgram(args)) {
    PlanParams whole = params;
    whole.chunkBytes = ringPlanBytes(args, config_.nranks);
    schedule = buildSchedule(args, whole);
    if (!schedule.isOk()) return schedule.status().withContext(what);
    onRing = ringProgramOf(*schedule, source, output, &ring);
  }
  if (!onBoard && !onDirect && !onRing) {
    schedule = buildSchedule(args, params);
    if (!schedule.isOk()) return schedule.status().withContext(what);
    COLLIE_RETURN_IF_ERROR(
        ensureScratch(&scratch_, schedule->scratchBytesPerChannel, *captured).withContext(what));
  }
  Result<DeviceStream> ordered = orderAfterPrevious(stream, *captured);
  if (!ordered.isOk()) return ordered.status().withContext(what);
  stream = *ordered;
  // The board and direct kernels run the fingerprint check themselves.
  const uint64_t fingerprint = makeFingerprint(0, args) | directMark;
  Status launched = onBoard || onDirect ? Status() : launchCheck(fingerprint, stream);
  if (launched.isOk() && premulCount > 0) {
    launched = launchPreMultiply(args, premulCount, input, stream);
  }
  if (launched.isOk()) {
    launched = onBoard    ? launchBoard(args, source, output, stream)
               : onDirect ? launchDirect(direct, fingerprint, stream)
               : onRing   ? runtime_->launchRingProgram(ring, stream)
                          : launchSchedule(*schedule, source, output, stream);
  }
  return complete(launched, stream, what, *captured);
}

// The Work of what was just launched on `stream` (`launched`: how the launches went).
// A captured submission ran nothing yet: its Work is complete at once, and the graph's
// launches complete with their streams.
Result<Work> DeviceComm::complete(const Status& launched, DeviceStream stream,
                                  const std::string& what, bool captured) {
  if (captured && launched.isOk()) {
    return config_.workFromPoller([]() -> std::optional<Status> { return Status(); });
  }
  Result<DeviceEvent> event =
      launched.isOk() ? runtime_->recordEvent(stream) : Result<DeviceEvent>(launched);
  if (!event.isOk()) {
    // Some launches are on the stream and will advance this rank's message counts
    // alone: the communicator cannot continue.
    return outcome_->fail(event.status().withContext(what));
  }
  DeviceRuntime* runtime = runtime_;
  std::shared_ptr<void> done(*event, [runtime](void* e) { runtime->destroyEvent(e); });
  lastEvent_ = done;
  lastStream_ = stream;
  const Clock::time_point hostDeadline = Clock::now() + 2 * config_.timeout + kHostGrace;
  auto poller = [outcome = outcome_, done, what, hostDeadline]() -> std::optional<Status> {
    if (outcome->runtime->queryEvent(done.get())) return outcome->finish(what);
    if (Clock::now() > hostDeadline) {
      return outcome->fail(
          timeoutError(what + ": the device stream did not reach the end of the "
                              "collective in time (is other work on the stream blocked?)"));
    }
    return std::nullopt;
  };
  return config_.workFromPoller(std::move(poller));
}

}  // namespace collie
