// ProgressQueue: the submission order of one communicator and its progress thread.
//
// Submitters give each operation its tag (the sequence number in its fingerprint:
// one counter for collectives, one per peer and direction for point-to-point, so that
// ranks not involved do not drift, and one per peer, direction and user tag for tagged
// point-to-point, core/engine/tag_matcher.h) and queue it; the progress thread takes queued
// operations in order and hands each to the Runner, one at a time. Once a failure is
// sticky (FailurePolicy) nothing runs any more: an operation submitted or taken after
// it completes at once with that failure ("... not run").
//
// The inline claim: `running` says that some thread drives the connections. The
// progress thread claims it with a compare-exchange before it runs anything or closes
// the connections; a submitter may claim it the same way (claimIdle) when nothing is
// queued, running or failing, run a small collective on its own thread and release it
// (releaseInline), which saves the two thread hand-offs that dominate small messages.
// claimIdle() and releaseInline() take no lock and make no syscall unless the progress
// thread must be woken. A caller waiting for the next queued collective may claim it too
// and run that collective itself (runIfNext), before the progress thread wakes for it.
// A point-to-point operation's run returns once its own operations are done, so that its
// Work completes then; what its batch took in from the queue and is still in flight
// stays parked with the runner (Runner::hasParked) and is the first thing the next claim
// holder drives: the progress thread (resumeParked) or the batch of a waiter running the
// next point-to-point operation. While something is parked, no collective starts.
//
// Quiet pushes: a point-to-point operation whose submitter is known to wait for it at
// once (WaitPattern) is queued without waking the progress thread when that thread is
// not asleep for good, since the waiter will run it; the progress thread, after any
// quiet push in the last kQuietSpan, sleeps kQuietTick at most between looks at the
// queue, so an operation nobody waits for after all starts within kQuietTick.
//
// abort() and stop() raise the abort flag under the queue's lock, so the progress
// thread, when idle, wakes to close the connections (Runner::closeIdle) and, when
// running, sees the flag on its next turn. stop() then joins the thread and fails
// what is left with Aborted.
//
// Thread safety: every method may be called from any thread, except start() and
// stop() (once each, by the owner). Runner methods run on the progress thread (or, run(),
// on a caller in runIfNext) with the running claim held and the lock released.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/engine/failure_policy.h"
#include "core/engine/flight_recorder.h"
#include "core/engine/pending.h"

namespace collie {

class ProgressQueue : public PointToPointSource {
 public:
  class Runner {
   public:
    virtual ~Runner() = default;
    // Runs one taken operation; returns its final status (errors already given up on).
    // The queue then releases the claim and completes its Work.
    // A point-to-point batch returns when `pending`'s own operations are done, parking
    // the rest (below).
    virtual Status run(Pending& pending) = 0;
    // Whether a waiter's batch left operations in flight, and runs them to their end.
    virtual bool hasParked() const = 0;
    virtual void resumeParked() = 0;
    // Aborted (publish) or destroyed (not) while idle: close the connections.
    virtual void closeIdle(const Status& reason, bool publish) = 0;
  };

  // `failures` and `recorder` must outlive the queue.
  ProgressQueue(int nranks, FailurePolicy* failures, FlightRecorder* recorder);
  ~ProgressQueue();

  void start(Runner* runner);
  // Aborts with `reason`, joins the progress thread and completes what is still
  // queued with Aborted ("communicator destroyed before ... ran").
  void stop(const Status& reason);
  // Aborts with `reason` and wakes the progress thread.
  void abort(const Status& reason);

  // Tags `pending` (and each part of its group, in order) and queues it, recorded in
  // the flight recorder as `algorithm`; or, after a failure, completes its Work with
  // the failure.
  // `quietAt` set: the submitter is known to wait for it at once (see above); the
  // time of the push, which the submitter read.
  void push(Pending pending, const char* algorithm,
            std::optional<std::chrono::steady_clock::time_point> quietAt = std::nullopt);
  // Queues a tagged and recorded operation ahead of everything queued; called with the
  // running claim held (releaseInline() then wakes the progress thread).
  void pushFront(Pending pending);
  // The tag of a collective run inline (a counter, no lock; point-to-point locks).
  uint64_t tagInline(const CollectiveArgs& args);

  // See above. claimIdle() is false, claiming nothing, while anything is queued,
  // running or failing.
  bool claimIdle() {
    if (failures_->failing() || queuedCount_.load() != 0 || parked_.load()) return false;
    bool idle = false;
    if (!running_.compare_exchange_strong(idle, true)) return false;
    // Checked again now that the progress thread cannot start anything (nor close the
    // connections and the team after a failure) until running_ is released.
    if (failures_->failing() || queuedCount_.load() != 0 || parked_.load()) {
      releaseInline();
      return false;
    }
    return true;
  }
  void releaseInline() {
    // A release store, not a sequentially consistent one (an xchg on x86, ~5% of an 8 B
    // all-reduce): the progress thread may have found running_ set and gone back to
    // sleep, and this load may miss the push that woke it (a store-load reordering);
    // wake it when it does not, and where it does, the progress thread tries its claim
    // again within kClaimRetry (loop()). Otherwise no futex call and no context switch
    // per collective.
    releaseWithoutWake();
    if (queuedCount_.load(std::memory_order_relaxed) != 0 || failures_->aborted()) wake();
  }
  // releaseInline() as it is when its look for a push misses one (tests).
  void releaseWithoutWake() { running_.store(false, std::memory_order_release); }

  // With nothing running or failing: if `work` belongs to the next queued collective,
  // takes the running claim, runs it on the calling thread as the progress thread would
  // (Runner::run) and completes `work`; false, having done nothing, otherwise.
  bool runIfNext(const WorkState* work);
  // How many collectives runIfNext() ran in this process (tests, benchmarks).
  static uint64_t waiterRunCount();

  bool takePointToPoint(Pending* out) override;
  size_t queued() const { return queuedCount_.load(); }

 private:
  // Point-to-point requires mutex_; a tagged one (p2p->tagged) gets its sequence number
  // in p2p->sequence.
  uint64_t nextTag(const CollectiveArgs& args, PointToPointTag* p2p = nullptr);
  void wake();  // takes the mutex (so that no wake-up falls between check and wait)
  void loop();

  FailurePolicy* const failures_;
  FlightRecorder* const recorder_;
  Runner* runner_ = nullptr;
  // How long the progress thread sleeps at most when it has work but an inline caller
  // holds the running claim: the bound on what a missed wake-up (releaseInline) costs.
  static constexpr std::chrono::microseconds kClaimRetry{200};
  // Quiet pushes (above): how long an operation nobody waits for may sit in the queue,
  // and for how long after the last quiet push the progress thread keeps looking.
  static constexpr std::chrono::milliseconds kQuietTick{10};
  static constexpr std::chrono::seconds kQuietSpan{1};

  std::mutex mutex_;  // guards the members below
  std::condition_variable queued_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  // A caller runs a queued collective (runIfNext): it wakes the progress thread when it
  // is done if anything is left to do, so the progress thread need not retry meanwhile.
  bool waiterRunning_ = false;
  // The progress thread sleeps until woken (no quiet push may go unwoken then).
  bool sleepsForGood_ = false;
  std::chrono::steady_clock::time_point lastQuietPush_;
  std::vector<uint64_t> sendSequence_;  // per peer, point-to-point
  std::vector<uint64_t> recvSequence_;
  std::vector<std::map<int64_t, uint64_t>> taggedSendSequence_;  // per peer, per user tag
  std::vector<std::map<int64_t, uint64_t>> taggedRecvSequence_;

  std::atomic<bool> running_{false};    // some thread drives the connections
  std::atomic<bool> parked_{false};     // Runner::hasParked(), set by the claim holder
  std::atomic<size_t> queuedCount_{0};  // queue_.size(), written under mutex_
  std::atomic<uint64_t> collectiveSequence_{0};
  std::thread thread_;
};

// The running claim of a submitter that runs a collective on its own thread: taken
// (ProgressQueue::claimIdle) when constructed, if the queue is idle, and released
// (releaseInline) when it goes out of scope, on every path. Not thread-safe: one thread
// holds it, on its stack.
class InlineClaim {
 public:
  explicit InlineClaim(ProgressQueue* queue) : queue_(queue->claimIdle() ? queue : nullptr) {}
  ~InlineClaim() {
    if (queue_ != nullptr) queue_->releaseInline();
  }
  InlineClaim(const InlineClaim&) = delete;
  InlineClaim& operator=(const InlineClaim&) = delete;
  // Whether the claim was taken.
  explicit operator bool() const { return queue_ != nullptr; }

 private:
  ProgressQueue* const queue_;  // null: not claimed
};

}  // namespace collie
