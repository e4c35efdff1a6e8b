#include "core/engine/engine.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/engine/cycle_clock.h"
#include "core/engine/fingerprint.h"
#include "core/log/log.h"

namespace collie {

void WorkState::complete(Status status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    status_ = std::move(status);
    done_ = true;
    finished_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

bool WorkState::poll() {
  if (finished_.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> pollLock(pollMutex_);
  if (finished_.load(std::memory_order_acquire)) return true;
  std::optional<Status> result = poller_();
  if (!result) return false;
  complete(std::move(*result));
  return true;
}

std::shared_ptr<WorkState> WorkState::succeeded() {
  static WorkState* const state = [] {
    auto* done = new WorkState();  // never freed: handles may outlive static destruction
    done->complete(Status());
    return done;
  }();
  // Aliasing constructor with no owner: copies and destruction touch no reference count.
  return std::shared_ptr<WorkState>(std::shared_ptr<WorkState>(), state);
}

Status WorkState::wait(std::chrono::milliseconds timeout) {
  if (finished_.load(std::memory_order_acquire)) return status_;
  if (poller_) {
    // Back off from a tight poll to 1 ms: device work takes microseconds to seconds.
    const auto start = std::chrono::steady_clock::now();
    auto pause = std::chrono::microseconds(2);
    while (!poll()) {
      if (timeout != std::chrono::milliseconds::max() &&
          std::chrono::steady_clock::now() - start >= timeout) {
        return timeoutError("collective still running after " + std::to_string(timeout.count()) +
                            " ms (Work::wait deadline)");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
    }
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == std::chrono::milliseconds::max()) {
    cv_.wait(lock, [&] { return done_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
    return timeoutError("collective still running after " + std::to_string(timeout.count()) +
                        " ms (Work::wait deadline)");
  }
  return status_;
}

bool WorkState::test() {
  if (finished_.load(std::memory_order_acquire)) return true;
  return poller_ ? poll() : false;
}

Status WorkState::status() {
  if (finished_.load(std::memory_order_acquire)) return status_;
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

Status Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_) return invalidArgument("wait() on an empty Work handle");
  return state_->wait(timeout);
}
bool Work::test() const { return state_ ? state_->test() : true; }
Status Work::status() const { return state_ ? state_->status() : Status(); }

namespace {
// How long a failing rank waits for the store to take its reason, and how long a rank
// waits for a peer's reason; both bound abort() and the failure path.
constexpr auto kPublishWait = std::chrono::milliseconds(300);
constexpr auto kLookupWait = std::chrono::milliseconds(200);
// abort() waits this long at most for the progress thread to close the connections
// (it normally takes a few milliseconds plus kPublishWait at worst).
constexpr auto kCloseWait = std::chrono::seconds(2);
// Busy polling yields the core after this long without progress.
constexpr auto kPureSpin = std::chrono::microseconds(5);
// Collectives up to this many bytes per rank run on the submitting thread when the
// engine is idle (without an offload): at that size the two thread hand-offs cost more
// than the wire, and blocking the caller for that long loses no useful overlap.
constexpr size_t kScheduleInlineMaxBytes = 64 * 1024;
}  // namespace

Engine::Engine(EngineConfig config, TransportSet transports, std::unique_ptr<FailureBoard> board)
    : config_(config),
      transports_(std::move(transports)),
      board_(std::move(board)),
      recorder_(config.traceDepth),
      channelMemory_(config.nchannels),
      sendSequence_(config.nranks, 0),
      recvSequence_(config.nranks, 0),
      planChannels_(config.nchannels) {
  transportNames_.assign(config_.nranks, "none");
  usefulChannels_ = config_.nchannels;
  for (const std::unique_ptr<Transport>& transport : transports_.transports) {
    const int useful = transport->caps().usefulChannels;
    if (useful > 0) usefulChannels_ = std::min(usefulChannels_, useful);
  }
  for (int peer = 0; peer < config_.nranks; ++peer) {
    int index = peer < static_cast<int>(transports_.transportOfPeer.size())
                    ? transports_.transportOfPeer[peer]
                    : -1;
    if (peer == config_.rank) {
      transportNames_[peer] = "self";
    } else if (index >= 0) {
      transportNames_[peer] = transports_.transports[index]->name();
    }
  }
  if (transports_.transports.size() == 1 && config_.nranks > 1) {
    offload_ = transports_.transports[0]->collectiveOffload();
  }
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    aborted_ = true;
    if (failed_.isOk()) {
      failed_ =
          abortedError("communicator of rank " + std::to_string(config_.rank) + " was destroyed");
    }
    failing_ = true;
  }
  queued_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (Pending& pending : queue_) {
    recorder_.finished(pending.flightId, false);
    pending.work->complete(
        abortedError("communicator destroyed before " + describeFingerprint(pending.tag) + " ran"));
  }
  closeConnections();
  writeFlightRecorder("communicator destroyed");
}

std::string Engine::dumpFlightRecorder() {
  std::string error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failed_.isOk()) error = failed_.toString();
  }
  return recorder_.toJson(config_.rank, config_.nranks, error);
}

void Engine::writeFlightRecorder(const char* why) {
  if (config_.traceDump.empty() || config_.traceDepth == 0) return;
  std::string text = dumpFlightRecorder();
  if (config_.traceDump == "stderr" || config_.traceDump == "-") {
    std::fprintf(stderr, "collie flight recorder of rank %d (%s):\n%s\n", config_.rank, why,
                 text.c_str());
    return;
  }
  std::string path;
  for (size_t i = 0; i < config_.traceDump.size(); ++i) {
    if (config_.traceDump[i] == '%' && i + 1 < config_.traceDump.size() &&
        config_.traceDump[i + 1] == 'r') {
      path += std::to_string(config_.rank);
      ++i;
    } else {
      path += config_.traceDump[i];
    }
  }
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    COLLIE_LOG(WARN, ENGINE) << "cannot write the flight recorder to " << path
                             << " (COLLIE_TRACE_DUMP): " << std::strerror(errno);
    return;
  }
  std::fwrite(text.data(), 1, text.size(), file);
  std::fputc('\n', file);
  std::fclose(file);
  COLLIE_LOG(INFO, ENGINE) << "flight recorder of rank " << config_.rank << " written to " << path
                           << " (" << why << ")";
}

void Engine::abort() {
  std::unique_lock<std::mutex> lock(mutex_);
  aborted_ = true;
  if (failed_.isOk()) {
    failed_ = abortedError("communicator of rank " + std::to_string(config_.rank) +
                           " was aborted (abort() called)");
  }
  failing_ = true;
  queued_.notify_all();
  if (!closedCv_.wait_for(lock, kCloseWait, [&] { return closed_; })) {
    COLLIE_LOG(WARN, ENGINE) << "abort() on rank " << config_.rank
                             << ": the progress thread did not close the connections within "
                             << kCloseWait.count() << " s; returning anyway";
  }
}

std::string Engine::transportTo(int peer) const {
  if (peer < 0 || peer >= config_.nranks) return "none";
  return transportNames_[peer];
}

void Engine::closeConnections() {
  // Connections first: they may still point at completions of failed executions.
  // Destroying them is what tells the peers (closed sockets, shm segment marked closed).
  transports_.connections.clear();
  transports_.transports.clear();
  failedExecutions_.clear();
}

Status Engine::giveUp(Status status, bool publish) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return status;
  }
  if (board_ && status.code() != StatusCode::kAborted) {
    status = board_->explain(status, kLookupWait);
  }
  Status sticky;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_.isOk()) failed_ = status;
    failing_ = true;
    sticky = failed_;
  }
  if (publish) {
    COLLIE_LOG(WARN, ENGINE) << "rank " << config_.rank
                             << " closes its connections: " << sticky.toString();
    if (board_) board_->publish(sticky, kPublishWait);
  }
  closeConnections();
  if (publish) writeFlightRecorder(sticky.toString().c_str());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  closedCv_.notify_all();
  return status;
}

void Engine::setTuneConstants(const TuneConstants& constants) {
  std::lock_guard<std::mutex> lock(mutex_);
  tune_ = constants;
  cache_.clear();
}

void Engine::setPlanChannels(int channels) {
  std::lock_guard<std::mutex> lock(mutex_);
  planChannels_ = std::clamp(channels, 1, config_.nchannels);
  cache_.clear();
}

TuneConstants Engine::tuneConstants() {
  std::lock_guard<std::mutex> lock(mutex_);
  return tune_;
}

Result<std::shared_ptr<const Schedule>> Engine::plan(const CollectiveArgs& args) {
  TuneLimits limits;
  limits.channelsFixed = config_.channelsFixed;
  limits.chunkBytes = config_.chunkBytes;
  limits.forced = config_.algorithm;
  const size_t bytes =
      args.count *
      dataTypeSize(args.kind == CollectiveKind::kBarrier ? DataType::kUint8 : args.dtype);
  std::unique_lock<std::mutex> lock(mutex_);
  limits.maxChannels = config_.channelsFixed ? config_.nchannels : planChannels_;
  const TuneDecision decision = decide(args.kind, bytes, config_.nranks, limits, tune_);
  const ScheduleKey key =
      std::make_tuple(static_cast<int>(args.kind), args.count, static_cast<int>(args.dtype),
                      static_cast<int>(args.op), args.root, static_cast<int>(decision.algorithm),
                      decision.chunkBytes, decision.nchannels);
  if (std::shared_ptr<const Schedule> cached = cache_.find(key)) return cached;
  lock.unlock();
  PlanParams params;
  params.rank = config_.rank;
  params.nranks = config_.nranks;
  params.nchannels = decision.nchannels;
  params.chunkBytes = decision.chunkBytes;
  params.algorithm = decision.algorithm;
  Result<Schedule> schedule = buildSchedule(args, params);
  if (!schedule.isOk()) return schedule.status();
  auto shared = std::make_shared<const Schedule>(std::move(schedule).value());
  COLLIE_LOG(INFO, TUNE) << "rank " << config_.rank << ": " << collectiveName(args.kind) << " of "
                         << bytes << " bytes on " << config_.nranks << " ranks -> "
                         << algorithmName(decision.algorithm) << ", chunk " << decision.chunkBytes
                         << ", " << decision.nchannels << " channel(s), predicted "
                         << decision.predictedUs << " us"
                         << (offload_ != nullptr && config_.algorithm == Algorithm::kAuto &&
                                     offload_->accepts(args)
                                 ? " (offered to the one-shot board first)"
                                 : "");
  lock.lock();
  cache_.insert(key, shared);
  return shared;
}

uint64_t Engine::nextTag(const CollectiveArgs& args) {
  uint64_t sequence;
  if (args.kind == CollectiveKind::kSend) {
    sequence = sendSequence_[args.root]++;
  } else if (args.kind == CollectiveKind::kRecv) {
    sequence = recvSequence_[args.root]++;
  } else {
    sequence = collectiveSequence_.fetch_add(1, std::memory_order_relaxed);
  }
  return makeFingerprint(sequence, args);
}

Result<Work> Engine::submitGroup(const std::vector<GroupOp>& ops) {
  std::vector<Pending::Part> parts;
  parts.reserve(ops.size());
  for (const GroupOp& op : ops) {
    if (op.args.kind != CollectiveKind::kSend && op.args.kind != CollectiveKind::kRecv) {
      return invalidArgument("a group may hold only send and recv operations, got " +
                             std::string(collectiveName(op.args.kind)));
    }
    Result<std::shared_ptr<const Schedule>> schedule = plan(op.args);
    if (!schedule.isOk()) return schedule.status();
    parts.push_back(Pending::Part{*schedule, op.input, op.output, 0});
  }
  auto work = std::make_shared<WorkState>();
  if (parts.empty()) {
    work->complete(Status());
    return Work(work);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Pending::Part& part : parts) part.tag = nextTag(part.schedule->args);
    const uint64_t flightId =
        recorder_.queued(parts.front().schedule->args, parts.front().tag, "group");
    if (!failed_.isOk()) {
      recorder_.finished(flightId, false);
      work->complete(failed_.withContext(describeFingerprint(parts.front().tag) + " not run"));
      return Work(work);
    }
    Pending pending;
    pending.schedule = parts.front().schedule;
    pending.input = parts.front().input;
    pending.output = parts.front().output;
    pending.tag = parts.front().tag;
    pending.work = work;
    pending.flightId = flightId;
    pending.group.assign(parts.begin() + 1, parts.end());
    queue_.push_back(std::move(pending));
    queuedCount_.store(queue_.size());
  }
  queued_.notify_one();
  return Work(work);
}

Status Engine::failure() {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_;
}

Engine::Pending Engine::makePending(std::shared_ptr<const Schedule> schedule, const void* input,
                                    void* output, uint64_t tag, std::shared_ptr<WorkState> work) {
  Pending pending;
  pending.schedule = std::move(schedule);
  pending.input = input;
  pending.output = output;
  pending.tag = tag;
  pending.work = std::move(work);
  return pending;
}

Result<Work> Engine::submit(const CollectiveArgs& args, const void* input, void* output) {
  Result<Work> result = Work();
  if (offload_ != nullptr && config_.algorithm == Algorithm::kAuto) {
    if (submitInline(args, input, output, &result)) return result;
  } else if (submitScheduleInline(args, input, output, &result)) {
    return result;
  }
  Result<std::shared_ptr<const Schedule>> schedule = plan(args);
  if (!schedule.isOk()) return schedule.status();
  auto work = std::make_shared<WorkState>();
  {
    std::unique_lock<std::mutex> lock(mutex_);
    uint64_t tag = nextTag(args);
    const char* algorithm = algorithmName((*schedule)->algorithm).data();
    if (!failed_.isOk()) {
      // The connections (and offload_, which belongs to a transport) may be gone.
      recorder_.finished(recorder_.queued(args, tag, algorithm), false);
      work->complete(failed_.withContext(describeFingerprint(tag) + " not run"));
      return Work(work);
    }
    // A forced algorithm (COLLIE_ALGO, Options::algorithm) runs as asked, not offloaded.
    const bool offloaded =
        offload_ != nullptr && config_.algorithm == Algorithm::kAuto && offload_->accepts(args);
    Pending pending = makePending(*schedule, input, output, tag, work);
    pending.offloaded = offloaded;
    pending.flightId = recorder_.queued(args, tag, offloaded ? "oneshot" : algorithm);
    queue_.push_back(std::move(pending));
    queuedCount_.store(queue_.size());
  }
  queued_.notify_one();
  return Work(work);
}

bool Engine::claimIdle() {
  if (failing_.load(std::memory_order_acquire) || queuedCount_.load() != 0) return false;
  bool idle = false;
  if (!running_.compare_exchange_strong(idle, true)) return false;
  // Checked again now that the progress thread cannot start anything (nor close the
  // connections and offload_ after a failure) until running_ is released.
  if (failing_.load() || queuedCount_.load() != 0) {
    releaseInline();
    return false;
  }
  return true;
}

bool Engine::claimInline(const CollectiveArgs& args, const void* input, const void* output) {
  if (!claimIdle()) return false;
  if (!offload_->accepts(args) || !offload_->runsInline(args, input, output)) {
    releaseInline();
    return false;
  }
  return true;
}

Work Engine::inlineResult(Status status) {
  if (status.isOk()) return Work(WorkState::succeeded());
  auto work = std::make_shared<WorkState>();
  work->complete(std::move(status));
  return Work(std::move(work));
}

void Engine::releaseInline() {
  running_.store(false);
  // The progress thread sleeps until work is queued or it is stopped or aborted; it
  // may have found running_ set and gone back to sleep, so wake it then (taking the
  // mutex so that the wake-up cannot fall between its check and its wait). Otherwise
  // no futex call and no context switch per collective.
  if (queuedCount_.load() == 0 && !aborted_.load()) return;
  { std::lock_guard<std::mutex> lock(mutex_); }
  queued_.notify_all();
}

bool Engine::submitInline(const CollectiveArgs& args, const void* input, void* output,
                          Result<Work>* result) {
  // No lock, allocation, clock read or syscall unless it fails or is declined: running_
  // claimed with one compare-exchange, a sequence number, the board, running_ released.
  if (!claimInline(args, input, output)) return false;
  const uint64_t tag = nextTag(args);
  const uint64_t start = CycleClock::now();
  Result<OffloadOutcome> outcome = offload(args, tag, input, output);
  if (outcome.isOk() && *outcome == OffloadOutcome::kDeclined) {
    // Every rank declined it: it runs its schedule on the progress thread, ahead of
    // anything queued meanwhile. Planning fails alike on every rank, if at all.
    Result<std::shared_ptr<const Schedule>> schedule = plan(args);
    auto work = std::make_shared<WorkState>();
    if (schedule.isOk()) {
      Pending pending = makePending(*schedule, input, output, tag, work);
      pending.flightId = recorder_.queued(args, tag, algorithmName((*schedule)->algorithm).data());
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_front(std::move(pending));
      queuedCount_.store(queue_.size());
    }
    releaseInline();
    *result = schedule.isOk() ? Result<Work>(Work(work)) : Result<Work>(schedule.status());
    return true;
  }
  Status status = outcome.status();
  recorder_.recordInline(args, tag, "oneshot", start, status.isOk());
  if (!status.isOk()) status = giveUp(std::move(status), true);
  releaseInline();
  *result = inlineResult(std::move(status));
  return true;
}

bool Engine::submitScheduleInline(const CollectiveArgs& args, const void* input, void* output,
                                  Result<Work>* result) {
  // Point-to-point never: a send blocking its caller until the peer receives could
  // deadlock a program that posts the matching receive later on the same thread.
  if (args.kind == CollectiveKind::kSend || args.kind == CollectiveKind::kRecv ||
      args.count * dataTypeSize(args.dtype) > kScheduleInlineMaxBytes) {
    return false;
  }
  if (!claimIdle()) return false;
  Result<std::shared_ptr<const Schedule>> schedule = plan(args);
  if (!schedule.isOk()) {
    releaseInline();
    *result = schedule.status();
    return true;
  }
  Pending pending = makePending(*schedule, input, output, nextTag(args), nullptr);
  pending.flightId =
      recorder_.queued(args, pending.tag, algorithmName((*schedule)->algorithm).data());
  recorder_.running(pending.flightId);
  Status status = execute(pending);
  recorder_.finished(pending.flightId, status.isOk());
  if (!status.isOk()) {
    COLLIE_LOG(WARN, COLL) << status.toString();
    status = giveUp(std::move(status), true);
  }
  releaseInline();
  *result = inlineResult(std::move(status));
  return true;
}

Result<OffloadOutcome> Engine::offload(const CollectiveArgs& args, uint64_t tag, const void* input,
                                       void* output) {
  Result<OffloadOutcome> outcome =
      offload_->run(args, tag, input, output, config_.timeout, aborted_);
  if (outcome.isOk()) return outcome;
  return outcome.status().withContext(describeFingerprint(tag) + " (one-shot) on rank " +
                                      std::to_string(config_.rank));
}

Status Engine::runOffloaded(Pending& pending) {
  Result<OffloadOutcome> outcome =
      offload(pending.schedule->args, pending.tag, pending.input, pending.output);
  if (!outcome.isOk()) return outcome.status();
  if (*outcome == OffloadOutcome::kDeclined) pending.offloaded = false;
  return Status();
}

void Engine::run() {
  while (true) {
    Pending pending;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // The progress thread claims running_ before it starts a collective or closes
      // the connections; while a collective runs inline on a caller's thread (which
      // claimed it), it waits.
      queued_.wait(lock, [&] {
        if (!stopping_ && queue_.empty() && !(aborted_ && !closed_)) return false;
        bool idle = false;
        return running_.compare_exchange_strong(idle, true);
      });
      if (aborted_ && !closed_) {
        // Aborted or destroyed while idle. An explicit abort() is news for the peers;
        // the destruction of an idle communicator is not.
        Status reason = failed_;
        bool publish = !stopping_;
        lock.unlock();
        giveUp(reason, publish);
        running_.store(false);
        continue;
      }
      if (queue_.empty()) {
        running_.store(false);
        return;
      }
      pending = std::move(queue_.front());
      queue_.pop_front();
      queuedCount_.store(queue_.size());
      if (!failed_.isOk()) {
        running_.store(false);
        Status failed = failed_;
        lock.unlock();
        recorder_.finished(pending.flightId, false);
        pending.work->complete(failed.withContext(describeFingerprint(pending.tag) + " not run"));
        continue;
      }
    }
    recorder_.running(pending.flightId);
    Status status;
    if (pending.offloaded) status = runOffloaded(pending);
    if (status.isOk() && !pending.offloaded) status = execute(pending);  // or declined
    recorder_.finished(pending.flightId, status.isOk());
    if (!status.isOk()) {
      COLLIE_LOG(WARN, COLL) << status.toString();
      status = giveUp(std::move(status), true);
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_ = false;
    }
    queued_.notify_all();
    pending.work->complete(std::move(status));
  }
}

void Engine::waitForActivity(const std::vector<Connection*>& active) {
  // Block in the transports that serve the waiting connections; one transport can
  // sleep longer than several that must take turns.
  std::vector<Transport*> involved;
  for (Connection* connection : active) {
    Transport* transport =
        transports_.transports[transports_.transportOfPeer[connection->peer()]].get();
    bool known = false;
    for (Transport* t : involved) known = known || t == transport;
    if (!known) involved.push_back(transport);
  }
  auto slice =
      involved.size() <= 1 ? std::chrono::microseconds(5000) : std::chrono::microseconds(500);
  for (Transport* transport : involved) transport->waitForActivity(slice);
}

bool Engine::isPointToPoint(const Pending& pending) {
  auto p2p = [](const Schedule& schedule) {
    return schedule.args.kind == CollectiveKind::kSend ||
           schedule.args.kind == CollectiveKind::kRecv;
  };
  if (pending.offloaded || !p2p(*pending.schedule)) return false;
  for (const Pending::Part& part : pending.group) {
    if (!p2p(*part.schedule)) return false;
  }
  return true;
}

void Engine::appendExecutions(const Pending& pending,
                              std::vector<std::unique_ptr<Execution>>* executions) {
  executions->push_back(std::make_unique<Execution>(pending.schedule, pending.input, pending.output,
                                                    pending.tag, &transports_.connections,
                                                    &channelMemory_, config_.reduceOnReceive));
  for (const Pending::Part& part : pending.group) {
    executions->push_back(std::make_unique<Execution>(part.schedule, part.input, part.output,
                                                      part.tag, &transports_.connections,
                                                      &channelMemory_, config_.reduceOnReceive));
  }
}

void Engine::adoptPointToPoint(std::vector<std::unique_ptr<Execution>>* executions,
                               std::vector<Adopted>* adopted) {
  if (queuedCount_.load() == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  // Only from the front: a collective queued in between keeps its place, and so does
  // everything behind it.
  while (!queue_.empty() && isPointToPoint(queue_.front()) && failed_.isOk()) {
    Adopted entry;
    entry.pending = std::move(queue_.front());
    queue_.pop_front();
    entry.first = executions->size();
    appendExecutions(entry.pending, executions);
    entry.count = executions->size() - entry.first;
    recorder_.running(entry.pending.flightId);
    adopted->push_back(std::move(entry));
  }
  queuedCount_.store(queue_.size());
}

Status Engine::execute(Pending& pending) {
  // The operations of a group run side by side: every turn advances each, so all sends
  // and receives of a group are in flight before any is waited for. Point-to-point
  // operations also take in those queued behind them while they run (adoptPointToPoint):
  // torch's batch_isend_irecv posts every irecv before its isend, one call at a time.
  std::vector<std::unique_ptr<Execution>> executions;
  appendExecutions(pending, &executions);
  const bool pointToPoint = isPointToPoint(pending);
  std::vector<Adopted> adopted;
  // Completes the adopted operations that finished (all of them, with `status`, when the
  // batch failed).
  auto completeAdopted = [&](const Status& status) {
    for (Adopted& entry : adopted) {
      if (entry.done) continue;
      bool finished = true;
      for (size_t i = entry.first; i < entry.first + entry.count; ++i) {
        finished = finished && executions[i]->finished();
      }
      if (!finished && status.isOk()) continue;
      entry.done = true;
      recorder_.finished(entry.pending.flightId, status.isOk());
      entry.pending.work->complete(finished ? Status() : status);
    }
  };
  std::vector<Connection*> active;
  auto lastProgress = Clock::now();
  auto idleSince = lastProgress;
  Status status;
  while (true) {
    if (pointToPoint) adoptPointToPoint(&executions, &adopted);
    bool progressed = false;
    bool finished = true;
    for (auto& execution : executions) {
      status = execution->advance(&progressed);
      if (!status.isOk()) break;
      finished = finished && execution->finished();
    }
    if (!status.isOk()) break;
    completeAdopted(Status());
    if (finished) return Status();
    active.clear();
    for (auto& execution : executions) execution->activeConnections(&active);
    for (Connection* connection : active) {
      bool moved = false;
      status = connection->progress(&moved);
      if (!status.isOk()) break;
      progressed = progressed || moved;
    }
    if (!status.isOk()) {
      status = status.withContext(describeFingerprint(pending.tag) + " on rank " +
                                  std::to_string(config_.rank));
      break;
    }
    // Checked on every turn: a collective that keeps moving must still stop at once.
    if (aborted_) {
      status = abortedError(describeFingerprint(pending.tag) + " aborted on rank " +
                            std::to_string(config_.rank));
      break;
    }
    auto now = Clock::now();
    if (progressed) {
      lastProgress = idleSince = now;
      continue;
    }
    if (now - lastProgress > config_.timeout) {
      std::string waits;
      int waited = -1;
      for (auto& execution : executions) {
        if (execution->finished()) continue;
        waits += (waits.empty() ? "" : "; ") + execution->describeWaits();
        if (waited < 0) waited = execution->firstWaitedPeer();
      }
      std::string what = describeFingerprint(pending.tag);
      if (executions.size() > 1) {
        what += " (group of " + std::to_string(executions.size()) + " operations)";
      }
      status = timeoutError(
          what + " on rank " + std::to_string(config_.rank) + " made no progress for " +
              std::to_string(
                  std::chrono::duration_cast<std::chrono::milliseconds>(config_.timeout).count()) +
              " ms: " + waits +
              ". The peer may be dead, stuck or running a different collective; raise "
              "COLLIE_TIMEOUT if it is only slow.",
          waited);
      break;
    }
    if (now - idleSince > config_.busyPoll) {
      waitForActivity(active);
    } else if (now - idleSince > kPureSpin) {
      // On a busy host the peer we wait for may be queued behind us on this core:
      // spinning without yielding made every step cost a whole busy-poll period
      // (8 B over tcp at load 9 on 2 cores: 115 us median, 19 us with no spin).
      std::this_thread::yield();
    }
  }
  if (status.code() == StatusCode::kMismatch) {
    for (auto& execution : executions) {
      uint64_t peerTag = 0;
      int peer = -1;
      if (!execution->rejectedTag(&peerTag, &peer)) continue;
      std::string fields = describeMismatch(execution->tag(), peerTag, peer);
      if (!fields.empty()) {
        status = mismatchError("rank " + std::to_string(config_.rank) + " and rank " +
                                   std::to_string(peer) + " run different collectives: " + fields +
                                   ". " + status.message(),
                               peer);
      }
      break;
    }
  }
  completeAdopted(status);
  for (auto& execution : executions) failedExecutions_.push_back(std::move(execution));
  return status;
}

}  // namespace collie
