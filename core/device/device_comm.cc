#include "core/device/device_comm.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <thread>

#include "core/engine/engine.h"
#include "core/log/log.h"
#include "core/plan/fingerprint.h"

namespace collie {
namespace {

using Clock = std::chrono::steady_clock;

// Error word codes: kGenericTimeout, kPeerTimeoutBase + peer (the peer a step waited
// for), kPeerMismatchBase + peer (the peer whose fingerprint differs), or kAbortedCode
// (DeviceComm::abort). Matches kStepErrorTimeout = 1 of kernels/cuda/device_handles.h.
constexpr int32_t kGenericTimeout = 1;
constexpr int32_t kPeerTimeoutBase = 2;
constexpr int32_t kPeerMismatchBase = 1 << 24;
constexpr int32_t kAbortedCode = 1 << 30;

// How long past the device-side deadline the host waits for a stream before it
// reports the collective as stuck (e.g. behind other work on the caller's stream).
constexpr auto kHostGrace = std::chrono::seconds(2);

size_t alignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Polls a device event until it completes or the deadline passes.
bool waitEvent(DeviceRuntime& runtime, void* event, Clock::time_point deadline) {
  while (!runtime.queryEvent(event)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

}  // namespace

// One rank's region: flags, the fingerprint check, the block counter, the inboxes.
struct DeviceComm::Region {
  static size_t sent(int peer) { return static_cast<size_t>(peer) * sizeof(uint64_t); }
  static size_t consumed(int nranks, int peer) { return sent(nranks) + sent(peer); }
  static size_t checkPosted(int nranks) { return sent(2 * nranks); }
  static size_t checkSlot(int nranks, uint64_t sequence) {
    return sent(2 * nranks + 1 + static_cast<int>(sequence % 2));
  }
  static size_t counter(int nranks) { return sent(2 * nranks + 3); }
  static size_t inbox(int nranks, size_t slotBytes, int from, uint64_t slot) {
    return alignUp(counter(nranks) + sizeof(uint32_t), 256) +
           (static_cast<size_t>(from) * kSlots + slot) * slotBytes;
  }
  static size_t bytes(int nranks, size_t slotBytes) { return inbox(nranks, slotBytes, nranks, 0); }
};

DeviceComm::DeviceComm(DeviceRuntime* runtime, const DeviceCommConfig& config)
    : runtime_(runtime),
      config_(config),
      peerRegions_(config.nranks, nullptr),
      outcome_(std::make_shared<Outcome>()),
      sentCount_(config.nranks, 0),
      recvCount_(config.nranks, 0) {
  outcome_->runtime = runtime;
  outcome_->timeout = config.timeout;
}

DeviceComm::Outcome::~Outcome() {
  if (mapped != nullptr) runtime->freeMapped(mapped);
}

size_t DeviceComm::windowBytes(int nranks, size_t slotBytes) {
  return Region::bytes(nranks, slotBytes);
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
  if (config.slotBytes < kMinSlotBytes || config.slotBytes % kMinSlotBytes != 0) {
    return invalidArgument(where + ": slots of " + std::to_string(config.slotBytes) +
                           " bytes; they must be a multiple of " + std::to_string(kMinSlotBytes));
  }
  const size_t regionBytes = Region::bytes(config.nranks, config.slotBytes);
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
  // The error word and, 8 bytes on, the peer's fingerprint of a mismatch.
  Result<void*> mapped = runtime->allocateMapped(2 * sizeof(uint64_t));
  if (!mapped.isOk()) return mapped.status().withContext(where);
  comm->outcome_->mapped = *mapped;
  comm->outcome_->error = static_cast<int32_t*>(*mapped);
  comm->outcome_->peerFingerprint = static_cast<uint64_t*>(*mapped) + 1;
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
                         << " bytes of flags and inboxes per rank (slots of " << config.slotBytes
                         << " bytes)";
  return comm;
}

DeviceComm::~DeviceComm() {
  // Kernels of this rank read and write peers' regions: let them drain first (they
  // end at their own device-side deadline at worst).
  if (lastEvent_ &&
      !waitEvent(*runtime_, lastEvent_.get(), Clock::now() + config_.timeout + kHostGrace)) {
    COLLIE_LOG(WARN, INIT) << "rank " << config_.rank
                           << ": device work still running at communicator destruction";
  }
  lastEvent_.reset();
  if (profile_ != nullptr) logProfile();
  if (ownStream_ != nullptr) runtime_->destroyStream(ownStream_);
  if (profile_ != nullptr) runtime_->free(profile_);
  for (uint8_t* old : retiredScratch_) runtime_->free(old);
  if (scratch_.data != nullptr) runtime_->free(scratch_.data);
  if (premulScratch_.data != nullptr) runtime_->free(premulScratch_.data);
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
  if (!event.isOk() || !waitEvent(*runtime_, *event, Clock::now() + std::chrono::seconds(10))) {
    COLLIE_LOG(WARN, INIT) << "rank " << config_.rank << ": device profile not read back";
    if (event.isOk()) runtime_->destroyEvent(*event);
    return;
  }
  runtime_->destroyEvent(*event);
  const double waitedUs = static_cast<double>(counters[0]) / 1000.0;
  COLLIE_LOG(INFO, INIT) << "rank " << config_.rank << " device profile: " << counters[1]
                         << " step kernels waited " << waitedUs << " us for peers' flags ("
                         << (counters[1] > 0 ? waitedUs / static_cast<double>(counters[1]) : 0)
                         << " us per kernel)";
}

// The stream a submission launches on (null: the communicator's own), made to wait
// first for the previous submission when that went to another stream.
Result<DeviceStream> DeviceComm::orderAfterPrevious(DeviceStream stream) {
  if (stream == nullptr) stream = ownStream_;
  if (lastEvent_ && stream != lastStream_) {
    COLLIE_RETURN_IF_ERROR(runtime_->streamWaitEvent(stream, lastEvent_.get()));
  }
  return stream;
}

// Graph capture would record kernels whose flag values and inbox slots belong to this
// call's message counts; a replay would reuse them against peers that moved on.
Status DeviceComm::refuseCapture(DeviceStream stream) const {
  if (stream == nullptr) return Status();  // the communicator's own stream: never captured
  Result<bool> capturing = runtime_->isCapturing(stream);
  if (!capturing.isOk()) return capturing.status();
  if (*capturing) {
    return unsupported(
        "the stream is being captured into a CUDA graph; collie's device collectives cannot "
        "be captured yet (their kernels carry this call's message counts, which a replay "
        "would reuse): issue the collective outside the capture");
  }
  return Status();
}

Status DeviceComm::ensureScratch(Scratch* scratch, size_t bytes) {
  if (bytes <= scratch->bytes) return Status();
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
// the scaled copy. premulScratch_ holds `count` elements already. Returns the copy.
Result<const void*> DeviceComm::launchPreMultiply(const CollectiveArgs& args, size_t count,
                                                  const void* input, DeviceStream stream) {
  DeviceScaleStep scale;
  scale.src = input;
  scale.dst = premulScratch_.data;
  scale.count = count;
  scale.dtype = args.dtype;
  std::memcpy(&scale.factor, args.scalar.bytes, sizeof(scale.factor));
  COLLIE_RETURN_IF_ERROR(runtime_->launchScale(scale, stream));
  return static_cast<const void*>(premulScratch_.data);
}

// Builds the flag waits and posts of one step from the per-pair message counts.
class DeviceComm::Launcher {
 public:
  explicit Launcher(DeviceComm& comm) : c_(comm) {}

  DeviceStepSync baseSync() const {
    DeviceStepSync sync;
    sync.blockCounter =
        reinterpret_cast<uint32_t*>(c_.region_ + Region::counter(c_.config_.nranks));
    sync.error = c_.outcome_->error;
    sync.timeoutNs = static_cast<uint64_t>(c_.config_.timeout.count()) * 1000;
    sync.profile = c_.profile_;
    return sync;
  }

  // The next message to `peer`: waits until its slot is free, posts "sent". Returns
  // the slot in the peer's inbox.
  uint8_t* send(int peer, DeviceStepSync* sync, int index) {
    const uint64_t m = c_.sentCount_[peer]++;
    const int n = c_.config_.nranks;
    if (m + 1 > kSlots) {
      sync->waits[index] = {flag(peer, Region::consumed(n, c_.config_.rank)), m + 1 - kSlots,
                            kPeerTimeoutBase + peer};
    }
    sync->posts[index] = {flag(c_.config_.rank, Region::sent(peer)), m + 1};
    return c_.peerRegions_[peer] +
           Region::inbox(n, c_.config_.slotBytes, c_.config_.rank, m % kSlots);
  }

  // The next message from `peer`: waits until it was sent, posts "consumed". Returns
  // its slot in this rank's inbox.
  const uint8_t* recv(int peer, DeviceStepSync* sync, int index) {
    const uint64_t m = c_.recvCount_[peer]++;
    const int n = c_.config_.nranks;
    sync->waits[index] = {flag(peer, Region::sent(c_.config_.rank)), m + 1,
                          kPeerTimeoutBase + peer};
    sync->posts[index] = {flag(c_.config_.rank, Region::consumed(n, peer)), m + 1};
    return c_.region_ + Region::inbox(n, c_.config_.slotBytes, peer, m % kSlots);
  }

 private:
  uint64_t* flag(int owner, size_t offset) const {
    return reinterpret_cast<uint64_t*>(c_.peerRegions_[owner] + offset);
  }
  DeviceComm& c_;
};

// Collective number sequence_ opens with the fingerprint check against every peer, in
// launches of at most kDeviceMaxCheckPeers peers (the first one also publishes).
Status DeviceComm::launchCheck(uint64_t fingerprint, DeviceStream stream) {
  const int n = config_.nranks;
  DeviceFingerprintCheck check;
  check.ownSlot = reinterpret_cast<uint64_t*>(region_ + Region::checkSlot(n, sequence_));
  check.ownPosted = reinterpret_cast<uint64_t*>(region_ + Region::checkPosted(n));
  check.fingerprint = fingerprint;
  check.posted = sequence_ + 1;
  check.error = outcome_->error;
  check.peerFingerprint = outcome_->peerFingerprint;
  check.timeoutNs = static_cast<uint64_t>(config_.timeout.count()) * 1000;
  check.timeoutBase = kPeerTimeoutBase;
  check.mismatchBase = kPeerMismatchBase;
  int remaining = n - 1;  // peers not yet in a launch
  for (int peer = 0; peer < n; ++peer) {
    if (peer == config_.rank) continue;
    const int i = check.npeers++;
    check.peerSlot[i] =
        reinterpret_cast<const uint64_t*>(peerRegions_[peer] + Region::checkSlot(n, sequence_));
    check.peerPosted[i] =
        reinterpret_cast<const uint64_t*>(peerRegions_[peer] + Region::checkPosted(n));
    check.peerRank[i] = peer;
    --remaining;
    if (check.npeers == kDeviceMaxCheckPeers || remaining == 0) {
      COLLIE_RETURN_IF_ERROR(runtime_->launchFingerprintCheck(check, stream));
      check.ownSlot = nullptr;
      check.ownPosted = nullptr;
      check.npeers = 0;
    }
  }
  if (check.ownSlot != nullptr) {  // a single rank: publish only
    COLLIE_RETURN_IF_ERROR(runtime_->launchFingerprintCheck(check, stream));
  }
  ++sequence_;
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

Status DeviceComm::Outcome::finish(const std::string& what, uint64_t fingerprint) {
  std::lock_guard<std::mutex> lock(mutex);
  return describeLocked(what, fingerprint);
}

void DeviceComm::Outcome::remember(uint64_t sequence, uint64_t fingerprint) {
  std::lock_guard<std::mutex> lock(mutex);
  recent[sequence % kRecent] = fingerprint;
}

Status DeviceComm::Outcome::poll() {
  std::lock_guard<std::mutex> lock(mutex);
  if (!failed.isOk() || error == nullptr) return failed;
  const int32_t code = std::atomic_ref<int32_t>(*error).load(std::memory_order_acquire);
  if (code == 0) return Status();
  // A mismatch names the collective by the sequence number in the peer's fingerprint;
  // this rank's fingerprint of that collective is one of the recent ones.
  uint64_t mine = 0;
  if (code >= kPeerMismatchBase && code != kAbortedCode) {
    const uint64_t theirs =
        std::atomic_ref<uint64_t>(*peerFingerprint).load(std::memory_order_acquire);
    const uint64_t sequence = decodeFingerprint(theirs).sequence;
    for (uint64_t candidate : recent) {
      if (candidate != 0 && decodeFingerprint(candidate).sequence == sequence) mine = candidate;
    }
  }
  return describeLocked("a collective on rank " + std::to_string(rank) + " (device buffers)", mine);
}

Status DeviceComm::Outcome::describeLocked(const std::string& what, uint64_t fingerprint) {
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
    std::string fields = describeMismatch(fingerprint, theirs, peer);
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

namespace {
// Makes the communicator's device current on this thread for a scope, restoring the
// caller's after (ncclCommInitRank binds a communicator to the device current then).
class DeviceScope {
 public:
  DeviceScope(DeviceRuntime& runtime, int device) : runtime_(runtime) {
    Result<int> current = runtime.currentDevice();
    if (!current.isOk()) {
      status_ = current.status();
      return;
    }
    previous_ = *current;
    if (previous_ != device) status_ = runtime.setCurrentDevice(device);
  }
  ~DeviceScope() {
    Result<int> current = runtime_.currentDevice();
    if (status_.isOk() && current.isOk() && *current != previous_) {
      (void)runtime_.setCurrentDevice(previous_);
    }
  }
  const Status& status() const { return status_; }

 private:
  DeviceRuntime& runtime_;
  int previous_ = 0;
  Status status_;
};
}  // namespace

Result<Work> DeviceComm::submit(const CollectiveArgs& args, const void* input, void* output,
                                DeviceStream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string what = std::string(collectiveName(args.kind)) + " on rank " +
                           std::to_string(config_.rank) + " (device buffers)";
  COLLIE_RETURN_IF_ERROR(outcome_->poll());
  DeviceScope onDevice(*runtime_, device_);
  COLLIE_RETURN_IF_ERROR(onDevice.status().withContext(what));
  COLLIE_RETURN_IF_ERROR(refuseCapture(stream).withContext(what));
  PlanParams params;
  params.rank = config_.rank;
  params.nranks = config_.nranks;
  params.nchannels = 1;
  params.chunkBytes = config_.slotBytes;
  params.algorithm = config_.algorithm;
  params.agreeOnRoot = false;  // launchCheck() compares every rank's fingerprint first
  if (isTeamAlgorithm(params.algorithm)) {
    return unsupported("algorithm " + std::string(algorithmName(params.algorithm)) +
                       " is a team collective of host buffers (shm); device buffers run ring, "
                       "tree, chain or auto")
        .withContext(what);
  }
  Result<Schedule> schedule = buildSchedule(args, params);
  if (!schedule.isOk()) return schedule.status().withContext(what);
  COLLIE_RETURN_IF_ERROR(ensureScratch(&scratch_, schedule->scratchBytesPerChannel));
  // Allocated before any launch: allocation waits for the default stream, which a
  // blocking stream's queued collective would hold up.
  size_t premulCount = 0;
  if (args.op == ReduceOp::kPreMulSum && args.count > 0) {
    Result<size_t> count = preMultiplyCount(args);
    if (!count.isOk()) return count.status().withContext(what);
    premulCount = *count;
    COLLIE_RETURN_IF_ERROR(ensureScratch(&premulScratch_, premulCount * dataTypeSize(args.dtype)));
  }
  Result<DeviceStream> ordered = orderAfterPrevious(stream);
  if (!ordered.isOk()) return ordered.status().withContext(what);
  stream = *ordered;
  const uint64_t fingerprint = makeFingerprint(sequence_, args);
  outcome_->remember(sequence_, fingerprint);
  Status launched = launchCheck(fingerprint, stream);
  const void* source = input;
  if (launched.isOk() && premulCount > 0) {
    Result<const void*> scaled = launchPreMultiply(args, premulCount, input, stream);
    if (scaled.isOk()) source = *scaled;
    launched = scaled.status();
  }
  if (launched.isOk()) launched = launchSchedule(*schedule, source, output, stream);
  return complete(launched, stream, what, fingerprint);
}

// The Work of what was just launched on `stream` (`launched`: how the launches went).
Result<Work> DeviceComm::complete(const Status& launched, DeviceStream stream,
                                  const std::string& what, uint64_t fingerprint) {
  Result<DeviceEvent> event =
      launched.isOk() ? runtime_->recordEvent(stream) : Result<DeviceEvent>(launched);
  if (!event.isOk()) {
    // Message counts moved on this rank only: the communicator cannot continue.
    return outcome_->fail(event.status().withContext(what));
  }
  DeviceRuntime* runtime = runtime_;
  std::shared_ptr<void> done(*event, [runtime](void* e) { runtime->destroyEvent(e); });
  lastEvent_ = done;
  lastStream_ = stream;
  const Clock::time_point hostDeadline = Clock::now() + 2 * config_.timeout + kHostGrace;
  auto poller = [outcome = outcome_, done, what, hostDeadline,
                 fingerprint]() -> std::optional<Status> {
    if (outcome->runtime->queryEvent(done.get())) return outcome->finish(what, fingerprint);
    if (Clock::now() > hostDeadline) {
      return outcome->fail(
          timeoutError(what + ": the device stream did not reach the end of the "
                              "collective in time (is other work on the stream blocked?)"));
    }
    return std::nullopt;
  };
  return Work(std::make_shared<WorkState>(std::move(poller)));
}

}  // namespace collie

namespace collie {

// Point-to-point over the inboxes. A message is one chunk of at most slotBytes; the
// chunks to and from each peer are numbered in the order of the operations. Round j
// launches the j-th message to every peer, then receives the j-th message from every
// peer. With two slots per pair, the j-th send waits only for the peer to have read
// message j - 2, which it did in round j - 2, so every rank finishes its sends of
// round j and then its receives: no order of operations across ranks can deadlock.
// Sends to this rank must pair up with receives from it, in order and by size.
Status DeviceComm::checkSelfMoves(const std::vector<Move>& moves) const {
  std::vector<size_t> sends, recvs;
  for (const Move& move : moves) {
    if (move.peer == config_.rank && move.bytes > 0) {
      (move.isSend ? sends : recvs).push_back(move.bytes);
    }
  }
  if (sends.size() != recvs.size()) {
    return invalidArgument(std::to_string(sends.size()) + " send(s) to this rank but " +
                           std::to_string(recvs.size()) + " receive(s) from it");
  }
  for (size_t i = 0; i < sends.size(); ++i) {
    if (sends[i] != recvs[i]) {
      return invalidArgument("send " + std::to_string(i) + " to this rank has " +
                             std::to_string(sends[i]) + " bytes but its receive has " +
                             std::to_string(recvs[i]));
    }
  }
  return Status();
}

Status DeviceComm::launchMoves(const std::vector<Move>& moves, DeviceStream stream) {
  const int n = config_.nranks;
  const int self = config_.rank;
  struct Chunk {
    uint8_t* at;
    size_t bytes;
  };
  std::vector<std::vector<Chunk>> out(n), in(n);
  std::vector<const Move*> selfSends, selfRecvs;
  for (const Move& move : moves) {
    if (move.bytes == 0) continue;
    if (move.peer == self) {
      (move.isSend ? selfSends : selfRecvs).push_back(&move);
      continue;
    }
    std::vector<Chunk>& chunks = (move.isSend ? out : in)[move.peer];
    for (size_t offset = 0; offset < move.bytes; offset += config_.slotBytes) {
      chunks.push_back({move.buffer + offset, std::min(config_.slotBytes, move.bytes - offset)});
    }
  }
  for (size_t i = 0; i < selfSends.size() && i < selfRecvs.size(); ++i) {
    COLLIE_RETURN_IF_ERROR(runtime_->memcpyAsync(selfRecvs[i]->buffer, selfSends[i]->buffer,
                                                 selfSends[i]->bytes, stream));
  }
  size_t rounds = 0;
  for (int p = 0; p < n; ++p) rounds = std::max({rounds, out[p].size(), in[p].size()});
  Launcher launcher(*this);
  for (size_t j = 0; j < rounds; ++j) {
    for (int p = 0; p < n; ++p) {
      if (j >= out[p].size()) continue;
      DeviceCopyStep copy{out[p][j].at, nullptr, nullptr, out[p][j].bytes, launcher.baseSync()};
      copy.peerOut = launcher.send(p, &copy.sync, 0);
      COLLIE_RETURN_IF_ERROR(runtime_->launchCopy(copy, stream));
    }
    for (int p = 0; p < n; ++p) {
      if (j >= in[p].size()) continue;
      DeviceCopyStep copy{nullptr, in[p][j].at, nullptr, in[p][j].bytes, launcher.baseSync()};
      copy.src = launcher.recv(p, &copy.sync, 0);
      COLLIE_RETURN_IF_ERROR(runtime_->launchCopy(copy, stream));
    }
  }
  return Status();
}

Result<Work> DeviceComm::submitPointToPoint(const std::vector<PointToPoint>& ops,
                                            DeviceStream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string what =
      "send/recv group on rank " + std::to_string(config_.rank) + " (device buffers)";
  COLLIE_RETURN_IF_ERROR(outcome_->poll());
  DeviceScope onDevice(*runtime_, device_);
  COLLIE_RETURN_IF_ERROR(onDevice.status().withContext(what));
  COLLIE_RETURN_IF_ERROR(refuseCapture(stream).withContext(what));
  std::vector<Move> moves;
  moves.reserve(ops.size());
  for (const PointToPoint& op : ops) {
    moves.push_back(
        {op.isSend, static_cast<uint8_t*>(op.buffer), op.count * dataTypeSize(op.dtype), op.peer});
  }
  COLLIE_RETURN_IF_ERROR(checkSelfMoves(moves).withContext(what));
  Result<DeviceStream> ordered = orderAfterPrevious(stream);
  if (!ordered.isOk()) return ordered.status().withContext(what);
  return complete(launchMoves(moves, *ordered), *ordered, what, 0);
}

// All-to-all: the fingerprint check (every rank agrees on count and dtype before a
// byte moves), then block p of the input to rank p and block p of the output from it.
Result<Work> DeviceComm::submitAllToAll(const CollectiveArgs& args, const void* input, void* output,
                                        DeviceStream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string what = std::string(collectiveName(args.kind)) + " on rank " +
                           std::to_string(config_.rank) + " (device buffers)";
  COLLIE_RETURN_IF_ERROR(outcome_->poll());
  DeviceScope onDevice(*runtime_, device_);
  COLLIE_RETURN_IF_ERROR(onDevice.status().withContext(what));
  COLLIE_RETURN_IF_ERROR(refuseCapture(stream).withContext(what));
  const size_t block = args.count * dataTypeSize(args.dtype);
  std::vector<Move> moves;
  for (int p = 0; p < config_.nranks; ++p) {
    const size_t at = static_cast<size_t>(p) * block;
    moves.push_back(
        {true, const_cast<uint8_t*>(static_cast<const uint8_t*>(input)) + at, block, p});
    moves.push_back({false, static_cast<uint8_t*>(output) + at, block, p});
  }
  Result<DeviceStream> ordered = orderAfterPrevious(stream);
  if (!ordered.isOk()) return ordered.status().withContext(what);
  stream = *ordered;
  const uint64_t fingerprint = makeFingerprint(sequence_, args);
  outcome_->remember(sequence_, fingerprint);
  Status launched = launchCheck(fingerprint, stream);
  if (launched.isOk()) launched = launchMoves(moves, stream);
  return complete(launched, stream, what, fingerprint);
}

}  // namespace collie
