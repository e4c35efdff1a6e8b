// WorkState: the shared state behind a Work handle (include/collie/communicator.h).
//
// A WorkState is created pending and completed exactly once, with the collective's
// final Status. Host collectives are completed by whoever ran them (the progress
// thread, or the engine for a collective that failed before it ran): complete().
// Device collectives have no thread of their own: they are created with a poller that
// wait() and test() call until it returns a status; the poller must be cheap, thread
// safe and bounded by its own deadline. A collective that finished on the caller's
// thread returns succeeded(), one process-wide completed state (no allocation, no
// reference counting).
//
// wait(timeout) returns the final status, or Timeout ("Work::wait deadline") when the
// collective is still running after `timeout`; the collective itself goes on.
//
// A queued host collective or point-to-point operation may carry a WaitRunner: a caller
// that waits for it with no deadline shorter than the collective's own (`runnerMinWait`)
// first asks the runner to run it on the caller's thread when it is next in line and
// nothing runs, which saves the two thread hand-offs (a futex wake and a context switch
// each way) of an operation that its caller waits for at once. A shorter deadline never runs it
// there: the wait must return by its deadline. Such a wait also tells the runner who waits and when
// (WaitRunner::waiting, with the Submission the engine recorded), from which the engine
// learns whether to run its callers' next collectives at submit (wait_pattern.h).
//
// Thread safety: every method may be called from any thread. Once complete, wait(),
// test() and status() take no lock (the status is immutable from then on); one
// poller call runs at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "collie/communicator.h"
#include "core/engine/wait_pattern.h"

namespace collie {

class WorkState;

// Who queued a collective that carries a WaitRunner, and when: what the runner learns
// the callers' way of waiting from.
struct Submission {
  std::thread::id thread;     // the submitting thread
  uint64_t index = 0;         // the runner's number for it
  ThreadMark submitted;       // the submitting thread just after the submission
  bool pointToPoint = false;  // counted in the point-to-point pattern, not the collectives'
};

// Runs a queued collective on the thread that waits for it (see above). Thread safe.
class WaitRunner {
 public:
  virtual ~WaitRunner() = default;
  // Called by every wait() that may run the collective (no deadline shorter than the
  // collective's own), finished or not, before anything else.
  virtual void waiting(const WorkState* work) = 0;
  // Called by a thread that waits for unfinished `work` with no deadline shorter than the
  // collective's own, after waiting(). Runs `work`'s collective to its end on the calling
  // thread, completing `work`, if it is the next one queued and nothing is running; false
  // (having done nothing) if not.
  virtual bool runIfNext(const WorkState* work) = 0;
};

class WorkState {
 public:
  using Poller = std::function<std::optional<Status>()>;
  WorkState() = default;
  explicit WorkState(Poller poller) : poller_(std::move(poller)) {}
  WorkState(std::shared_ptr<WaitRunner> runner, std::chrono::milliseconds runnerMinWait,
            Submission submission)
      : runner_(std::move(runner)), runnerMinWait_(runnerMinWait), submission_(submission) {}
  // Completes the collective with `status` (call once) and wakes every waiter.
  void complete(Status status);
  Status wait(std::chrono::milliseconds timeout);
  // True once the collective finished (polling it once if it has a poller).
  bool test();
  // OK while running or after success; the error once it failed.
  Status status();
  // One process-wide state that is complete and OK: what a collective that finished
  // on the caller's thread returns, with no allocation and no reference counting.
  static std::shared_ptr<WorkState> succeeded();
  // With a WaitRunner: who submitted it and when.
  const Submission& submission() const { return submission_; }
  // Sets submission().submitted. Only the submitting thread calls it, before its submit
  // returns, and only that thread reads the mark (WaitRunner::waiting checks the thread
  // first), so it needs no lock.
  void markSubmitted(const ThreadMark& mark) { submission_.submitted = mark; }

 private:
  bool poll();  // true once done

  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;                  // guarded by mutex_ (the condition variable's)
  std::atomic<bool> finished_{false};  // set with release once status_ is final
  Status status_;
  const Poller poller_;
  std::mutex pollMutex_;  // one poller call at a time
  const std::shared_ptr<WaitRunner> runner_;
  const std::chrono::milliseconds runnerMinWait_{0};
  Submission submission_;  // `submitted` set once by markSubmitted(), the rest fixed
};

}  // namespace collie
