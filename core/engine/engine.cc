#include "core/engine/engine.h"

#include "core/engine/fingerprint.h"
#include "core/log/log.h"

namespace collie {

void WorkState::complete(Status status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    status_ = std::move(status);
    done_ = true;
  }
  cv_.notify_all();
}

Status WorkState::wait(std::chrono::milliseconds timeout) {
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
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

Status WorkState::status() {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

Status Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_) return invalidArgument("wait() on an empty Work handle");
  return state_->wait(timeout);
}
bool Work::test() const { return state_ ? state_->test() : true; }
Status Work::status() const { return state_ ? state_->status() : Status(); }

Engine::Engine(EngineConfig config, TransportSet transports)
    : config_(config),
      transports_(std::move(transports)),
      channelMemory_(config.nchannels),
      sendSequence_(config.nranks, 0),
      recvSequence_(config.nranks, 0) {
  if (transports_.transports.size() == 1 && config_.nranks > 1) {
    offload_ = transports_.transports[0]->collectiveOffload();
  }
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (Pending& pending : queue_) {
    pending.work->complete(
        abortedError("communicator destroyed before " + describeFingerprint(pending.tag) + " ran"));
  }
  // Connections first: they may still point at completions of failed executions.
  transports_.connections.clear();
  transports_.transports.clear();
  failedExecutions_.clear();
}

void Engine::abort() {
  aborted_ = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_.isOk()) failed_ = abortedError("communicator aborted");
  }
  queued_.notify_all();
}

std::string Engine::transportTo(int peer) const {
  if (peer == config_.rank) return "self";
  if (peer < 0 || peer >= config_.nranks) return "none";
  int index = transports_.transportOfPeer[peer];
  return index < 0 ? "none" : transports_.transports[index]->name();
}

void Engine::setTuneConstants(const TuneConstants& constants) {
  std::lock_guard<std::mutex> lock(mutex_);
  tune_ = constants;
  cache_.clear();
}

TuneConstants Engine::tuneConstants() {
  std::lock_guard<std::mutex> lock(mutex_);
  return tune_;
}

Result<std::shared_ptr<const Schedule>> Engine::plan(const CollectiveArgs& args) {
  TuneLimits limits;
  limits.maxChannels = config_.nchannels;
  limits.channelsFixed = config_.channelsFixed;
  limits.chunkBytes = config_.chunkBytes;
  limits.forced = config_.algorithm;
  const size_t bytes =
      args.count *
      dataTypeSize(args.kind == CollectiveKind::kBarrier ? DataType::kUint8 : args.dtype);
  std::unique_lock<std::mutex> lock(mutex_);
  const TuneDecision decision = decide(args.kind, bytes, config_.nranks, limits, tune_);
  auto key =
      std::make_tuple(static_cast<int>(args.kind), args.count, static_cast<int>(args.dtype),
                      static_cast<int>(args.op), args.root, static_cast<int>(decision.algorithm),
                      decision.chunkBytes, decision.nchannels);
  auto found = cache_.find(key);
  if (found != cache_.end()) return found->second;
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
  lock.lock();
  if (cache_.size() >= 256) cache_.clear();
  cache_[key] = shared;
  return shared;
}

Result<Work> Engine::submit(const CollectiveArgs& args, const void* input, void* output) {
  Result<std::shared_ptr<const Schedule>> schedule = plan(args);
  if (!schedule.isOk()) return schedule.status();
  auto work = std::make_shared<WorkState>();
  {
    std::unique_lock<std::mutex> lock(mutex_);
    uint64_t sequence;
    if (args.kind == CollectiveKind::kSend) {
      sequence = sendSequence_[args.root]++;
    } else if (args.kind == CollectiveKind::kRecv) {
      sequence = recvSequence_[args.root]++;
    } else {
      sequence = collectiveSequence_++;
    }
    uint64_t tag = makeFingerprint(sequence, args);
    if (!failed_.isOk()) {
      work->complete(failed_.withContext(describeFingerprint(tag) + " not run"));
      return Work(work);
    }
    // A forced algorithm (COLLIE_ALGO, Options::algorithm) runs as asked, not offloaded.
    const bool offloaded = offload_ != nullptr && config_.algorithm == Algorithm::kAuto &&
                           offload_->accepts(args);
    Pending pending{*schedule, input, output, tag, work, offloaded};
    if (!offloaded || running_ || !queue_.empty()) {
      queue_.push_back(std::move(pending));
      lock.unlock();
      queued_.notify_one();
      return Work(work);
    }
    running_ = true;
    lock.unlock();
    Status status = runOffloaded(pending);
    lock.lock();
    running_ = false;
    if (!status.isOk()) recordFailureLocked(status);
    lock.unlock();
    work->complete(std::move(status));
  }
  queued_.notify_one();
  return Work(work);
}

Status Engine::runOffloaded(const Pending& pending) {
  Status status = offload_->run(pending.schedule->args, pending.tag, pending.input,
                                pending.output, Clock::now() + config_.timeout, aborted_);
  return status.withContext(describeFingerprint(pending.tag) + " (one-shot) on rank " +
                            std::to_string(config_.rank));
}

void Engine::recordFailureLocked(const Status& status) {
  COLLIE_LOG(WARN, COLL) << status.toString();
  if (failed_.isOk()) failed_ = status;
}

void Engine::run() {
  while (true) {
    Pending pending;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queued_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !running_); });
      if (queue_.empty() || running_) return;
      pending = std::move(queue_.front());
      queue_.pop_front();
      if (!failed_.isOk()) {
        Status failed = failed_;
        lock.unlock();
        pending.work->complete(failed.withContext(describeFingerprint(pending.tag) + " not run"));
        continue;
      }
      running_ = true;
    }
    Status status = pending.offloaded ? runOffloaded(pending) : execute(pending);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_ = false;
      if (!status.isOk()) recordFailureLocked(status);
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

Status Engine::execute(Pending& pending) {
  auto execution =
      std::make_unique<Execution>(pending.schedule, pending.input, pending.output, pending.tag,
                                  &transports_.connections, &channelMemory_);
  std::vector<Connection*> active;
  auto lastProgress = Clock::now();
  auto idleSince = lastProgress;
  Status status;
  while (true) {
    bool progressed = false;
    status = execution->advance(&progressed);
    if (!status.isOk()) break;
    if (execution->finished()) return Status();
    active.clear();
    execution->activeConnections(&active);
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
    auto now = Clock::now();
    if (progressed) {
      lastProgress = idleSince = now;
      continue;
    }
    if (aborted_) {
      status = abortedError(describeFingerprint(pending.tag) + " aborted on rank " +
                            std::to_string(config_.rank));
      break;
    }
    if (now - lastProgress > config_.timeout) {
      status = timeoutError(
          describeFingerprint(pending.tag) + " on rank " + std::to_string(config_.rank) +
              " made no progress for " +
              std::to_string(
                  std::chrono::duration_cast<std::chrono::milliseconds>(config_.timeout).count()) +
              " ms: " + execution->describeWaits() +
              ". The peer may be dead, stuck or running a different collective; raise "
              "COLLIE_TIMEOUT if it is only slow.",
          execution->firstWaitedPeer());
      break;
    }
    if (now - idleSince > config_.busyPoll) {
      waitForActivity(active);
    } else {
      std::this_thread::yield();  // lets a peer sharing this core run; free when idle
    }
  }
  failedExecutions_.push_back(std::move(execution));
  return status;
}

}  // namespace collie
