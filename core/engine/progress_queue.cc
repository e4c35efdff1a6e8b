#include "core/engine/progress_queue.h"

#include "core/plan/fingerprint.h"

namespace collie {

ProgressQueue::ProgressQueue(int nranks, FailurePolicy* failures, FlightRecorder* recorder)
    : failures_(failures),
      recorder_(recorder),
      sendSequence_(nranks, 0),
      recvSequence_(nranks, 0),
      taggedSendSequence_(nranks),
      taggedRecvSequence_(nranks) {}

ProgressQueue::~ProgressQueue() {
  if (thread_.joinable()) stop(abortedError("progress queue destroyed"));
}

void ProgressQueue::start(Runner* runner) {
  runner_ = runner;
  thread_ = std::thread([this] { loop(); });
}

void ProgressQueue::abort(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failures_->abort(reason);
  }
  queued_.notify_all();
}

void ProgressQueue::stop(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    failures_->abort(reason);
  }
  queued_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (Pending& pending : queue_) {
    recorder_->finished(pending.flightId, false);
    pending.work->complete(
        abortedError("communicator destroyed before " +
                     describeOperation(pending.tag, pending.schedule->args, pending.p2p) + " ran"));
  }
  queue_.clear();
  queuedCount_.store(0);
}

uint64_t ProgressQueue::nextTag(const CollectiveArgs& args, PointToPointTag* p2p) {
  if (p2p != nullptr && p2p->tagged) {
    auto& sequences = args.kind == CollectiveKind::kSend ? taggedSendSequence_[args.peer]
                                                         : taggedRecvSequence_[args.peer];
    p2p->sequence = sequences[p2p->value]++;
    return makeTaggedFingerprint(p2p->sequence, args.dtype, args.count);
  }
  uint64_t sequence;
  if (args.kind == CollectiveKind::kSend) {
    sequence = sendSequence_[args.peer]++;
  } else if (args.kind == CollectiveKind::kRecv) {
    sequence = recvSequence_[args.peer]++;
  } else {
    sequence = collectiveSequence_.fetch_add(1, std::memory_order_relaxed);
  }
  return makeFingerprint(sequence, args);
}

uint64_t ProgressQueue::tagInline(const CollectiveArgs& args) {
  if (args.kind != CollectiveKind::kSend && args.kind != CollectiveKind::kRecv) {
    return nextTag(args);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return nextTag(args);
}

void ProgressQueue::push(Pending pending, const char* algorithm,
                         std::optional<std::chrono::steady_clock::time_point> quietAt) {
  bool wake = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const CollectiveArgs& args = pending.schedule->args;
    pending.tag = nextTag(args, &pending.p2p);
    for (Pending::Part& part : pending.group) {
      part.tag = nextTag(part.schedule->args, &part.p2p);
    }
    if (failures_->failing()) {
      // The connections (and the team, which belongs to a transport) may be gone.
      recorder_->finished(recorder_->queued(args, pending.tag, algorithm), false);
      pending.work->complete(failures_->failure().withContext(
          describeOperation(pending.tag, args, pending.p2p) + " not run"));
      return;
    }
    pending.flightId = recorder_->queued(args, pending.tag, algorithm);
    queue_.push_back(std::move(pending));
    queuedCount_.store(queue_.size());
    if (quietAt) {
      lastQuietPush_ = *quietAt;
      wake = sleepsForGood_;
    }
  }
  if (wake) queued_.notify_one();
}

void ProgressQueue::pushFront(Pending pending) {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.push_front(std::move(pending));
  queuedCount_.store(queue_.size());
}

bool ProgressQueue::takePointToPoint(Pending* out) {
  if (queuedCount_.load() == 0) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  if (queue_.empty() || !isPointToPoint(queue_.front()) || failures_->failing()) return false;
  *out = std::move(queue_.front());
  queue_.pop_front();
  queuedCount_.store(queue_.size());
  return true;
}

namespace {
std::atomic<uint64_t> gWaiterRuns{0};
}  // namespace

uint64_t ProgressQueue::waiterRunCount() { return gWaiterRuns.load(std::memory_order_relaxed); }

bool ProgressQueue::runIfNext(const WorkState* work) {
  if (failures_->failing() || queuedCount_.load() == 0) return false;
  bool idle = false;
  if (!running_.compare_exchange_strong(idle, true)) return false;
  Pending pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ || failures_->failing() || queue_.empty() || queue_.front().work.get() != work ||
        (parked_.load() && !isPointToPoint(queue_.front()))) {
      // The progress thread may have found running_ taken meanwhile and gone to sleep.
      running_.store(false);
      queued_.notify_all();
      return false;
    }
    pending = std::move(queue_.front());
    queue_.pop_front();
    queuedCount_.store(queue_.size());
    waiterRunning_ = true;
  }
  gWaiterRuns.fetch_add(1, std::memory_order_relaxed);
  Status status = runner_->run(pending);
  {
    // Notified under the lock (once it is released the queue may be destroyed), and
    // only when the progress thread has something to do: a needless wake-up costs a
    // context switch on the core another rank may be using.
    std::lock_guard<std::mutex> lock(mutex_);
    parked_.store(runner_->hasParked());
    running_ = false;
    waiterRunning_ = false;
    if (stopping_ || !queue_.empty() || failures_->aborted() || parked_.load()) {
      queued_.notify_all();
    }
  }
  pending.work->complete(std::move(status));
  return true;
}

void ProgressQueue::wake() {
  { std::lock_guard<std::mutex> lock(mutex_); }
  queued_.notify_all();
}

void ProgressQueue::loop() {
  // Aborted (or destroyed) and the connections not yet closed.
  auto mustClose = [&] { return failures_->aborted() && !failures_->closed(); };
  while (true) {
    Pending pending;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // The progress thread claims running_ before it starts a collective or closes
      // the connections; while a collective runs inline on a caller's thread (which
      // claimed it), it waits.
      auto hasWork = [&] { return stopping_ || !queue_.empty() || mustClose() || parked_.load(); };
      auto claimed = [&] {
        bool idle = false;
        return hasWork() && running_.compare_exchange_strong(idle, true);
      };
      while (!claimed()) {
        // With work but the claim taken, a caller runs a collective inline; its release
        // wakes this thread, or this retry finds it released (releaseInline()). A waiter
        // running a queued collective always wakes it when work is left.
        if (hasWork() && !waiterRunning_) {
          queued_.wait_for(lock, kClaimRetry);
        } else if (std::chrono::steady_clock::now() - lastQuietPush_ < kQuietSpan) {
          queued_.wait_for(lock, kQuietTick);  // a quiet push does not wake it
        } else {
          sleepsForGood_ = true;
          queued_.wait(lock);
          sleepsForGood_ = false;
        }
      }
      if (parked_.load()) {
        // Left in flight by a point-to-point batch: before anything else, and before the
        // connections close (an abort fails them at once).
        lock.unlock();
        runner_->resumeParked();
        parked_.store(runner_->hasParked());
        running_.store(false);
        continue;
      }
      if (mustClose()) {
        // Aborted or destroyed while idle. An explicit abort() is news for the peers;
        // the destruction of an idle communicator is not.
        Status reason = failures_->failure();
        bool publish = !stopping_;
        lock.unlock();
        runner_->closeIdle(reason, publish);
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
      if (failures_->failing()) {
        running_.store(false);
        Status failed = failures_->failure();
        lock.unlock();
        recorder_->finished(pending.flightId, false);
        pending.work->complete(failed.withContext(
            describeOperation(pending.tag, pending.schedule->args, pending.p2p) + " not run"));
        continue;
      }
    }
    Status status = runner_->run(pending);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      parked_.store(runner_->hasParked());
      running_ = false;
    }
    queued_.notify_all();
    pending.work->complete(std::move(status));
  }
}

}  // namespace collie
