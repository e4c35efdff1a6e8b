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
    pending.work->complete(abortedError("communicator destroyed before " +
                                        describeFingerprint(pending.parts.front().tag) + " ran"));
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

Result<std::shared_ptr<const Schedule>> Engine::plan(const CollectiveArgs& args) {
  auto key = std::make_tuple(static_cast<int>(args.kind), args.count, static_cast<int>(args.dtype),
                             static_cast<int>(args.op), args.root);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = cache_.find(key);
    if (found != cache_.end()) return found->second;
  }
  PlanParams params;
  params.rank = config_.rank;
  params.nranks = config_.nranks;
  params.nchannels = config_.nchannels;
  params.chunkBytes = config_.chunkBytes;
  params.algorithm = config_.algorithm;
  Result<Schedule> schedule = buildSchedule(args, params);
  if (!schedule.isOk()) return schedule.status();
  auto shared = std::make_shared<const Schedule>(std::move(schedule).value());
  std::lock_guard<std::mutex> lock(mutex_);
  if (cache_.size() >= 256) cache_.clear();
  cache_[key] = shared;
  return shared;
}

uint64_t Engine::nextTag(const CollectiveArgs& args) {
  uint64_t sequence;
  if (args.kind == CollectiveKind::kSend) {
    sequence = sendSequence_[args.root]++;
  } else if (args.kind == CollectiveKind::kRecv) {
    sequence = recvSequence_[args.root]++;
  } else {
    sequence = collectiveSequence_++;
  }
  return makeFingerprint(sequence, args);
}

Result<Work> Engine::submit(const CollectiveArgs& args, const void* input, void* output) {
  Result<std::shared_ptr<const Schedule>> schedule = plan(args);
  if (!schedule.isOk()) return schedule.status();
  auto work = std::make_shared<WorkState>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t tag = nextTag(args);
    if (!failed_.isOk()) {
      work->complete(failed_.withContext(describeFingerprint(tag) + " not run"));
      return Work(work);
    }
    queue_.push_back(Pending{{Part{*schedule, input, output, tag}}, work});
  }
  queued_.notify_one();
  return Work(work);
}

Result<Work> Engine::submitGroup(const std::vector<GroupOp>& ops) {
  std::vector<Part> parts;
  parts.reserve(ops.size());
  for (const GroupOp& op : ops) {
    if (op.args.kind != CollectiveKind::kSend && op.args.kind != CollectiveKind::kRecv) {
      return invalidArgument("a group may hold only send and recv operations, got " +
                             std::string(collectiveName(op.args.kind)));
    }
    Result<std::shared_ptr<const Schedule>> schedule = plan(op.args);
    if (!schedule.isOk()) return schedule.status();
    parts.push_back(Part{*schedule, op.input, op.output, 0});
  }
  auto work = std::make_shared<WorkState>();
  if (parts.empty()) {
    work->complete(Status());
    return Work(work);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Part& part : parts) part.tag = nextTag(part.schedule->args);
    if (!failed_.isOk()) {
      work->complete(failed_.withContext(describeFingerprint(parts.front().tag) + " not run"));
      return Work(work);
    }
    queue_.push_back(Pending{std::move(parts), work});
  }
  queued_.notify_one();
  return Work(work);
}

Status Engine::failure() {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_;
}

void Engine::run() {
  while (true) {
    Pending pending;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      pending = std::move(queue_.front());
      queue_.pop_front();
      if (!failed_.isOk()) {
        Status failed = failed_;
        lock.unlock();
        pending.work->complete(
            failed.withContext(describeFingerprint(pending.parts.front().tag) + " not run"));
        continue;
      }
    }
    Status status = execute(pending);
    if (!status.isOk()) {
      COLLIE_LOG(WARN, COLL) << status.toString();
      std::lock_guard<std::mutex> lock(mutex_);
      if (failed_.isOk()) failed_ = status;
    }
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
  // The parts of a group run side by side: every advance() round posts what each can,
  // so all sends and receives of a group are in flight before any is waited for.
  std::vector<std::unique_ptr<Execution>> executions;
  for (const Part& part : pending.parts) {
    executions.push_back(std::make_unique<Execution>(part.schedule, part.input, part.output,
                                                     part.tag, &transports_.connections,
                                                     &channelMemory_));
  }
  const uint64_t tag = pending.parts.front().tag;
  std::vector<Connection*> active;
  auto lastProgress = Clock::now();
  auto idleSince = lastProgress;
  Status status;
  while (true) {
    bool progressed = false;
    bool finished = true;
    for (auto& execution : executions) {
      status = execution->advance(&progressed);
      if (!status.isOk()) break;
      finished = finished && execution->finished();
    }
    if (!status.isOk()) break;
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
      status =
          status.withContext(describeFingerprint(tag) + " on rank " + std::to_string(config_.rank));
      break;
    }
    auto now = Clock::now();
    if (progressed) {
      lastProgress = idleSince = now;
      continue;
    }
    if (aborted_) {
      status = abortedError(describeFingerprint(tag) + " aborted on rank " +
                            std::to_string(config_.rank));
      break;
    }
    if (now - lastProgress > config_.timeout) {
      std::string waits;
      int waited = -1;
      for (auto& execution : executions) {
        if (execution->finished()) continue;
        waits += (waits.empty() ? "" : "; ") + execution->describeWaits();
        if (waited < 0) waited = execution->firstWaitedPeer();
      }
      status = timeoutError(
          describeFingerprint(tag) +
              (executions.size() > 1
                   ? " (group of " + std::to_string(executions.size()) + " operations)"
                   : std::string()) +
              " on rank " + std::to_string(config_.rank) + " made no progress for " +
              std::to_string(
                  std::chrono::duration_cast<std::chrono::milliseconds>(config_.timeout).count()) +
              " ms: " + waits +
              ". The peer may be dead, stuck or running a different collective; raise "
              "COLLIE_TIMEOUT if it is only slow.",
          waited);
      break;
    }
    if (now - idleSince > config_.busyPoll) waitForActivity(active);
  }
  for (auto& execution : executions) failedExecutions_.push_back(std::move(execution));
  return status;
}

}  // namespace collie
