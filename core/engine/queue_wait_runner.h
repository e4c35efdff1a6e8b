// QueueWaitRunner: the WaitRunner (work_state.h) of an engine's queued collectives. A
// thread that waits for its Work runs the collective itself when it is the next one
// queued and nothing runs (ProgressQueue::runIfNext), and every wait teaches the
// engine's WaitPatterns whether its callers wait at once (Engine::submit reads them):
// one for collectives, one for point-to-point operations.
//
// Handles may outlive the engine, and a waiter may be running its collective when the
// engine is destroyed: the engine stops its queue first (which aborts that collective),
// then calls detach(), which waits until no waiter is inside the queue; after it every
// runIfNext() returns false.
//
// Thread safety: waiting() and runIfNext() from any thread; detach() once, from the
// engine's destructor; pattern() and p2pPattern() are the WaitPattern's own
// (wait_pattern.h).
#pragma once

#include <condition_variable>
#include <mutex>

#include "core/engine/progress_queue.h"
#include "core/engine/wait_pattern.h"
#include "core/engine/work_state.h"

namespace collie {

class QueueWaitRunner final : public WaitRunner {
 public:
  // `waitersRun`: whether a waiter may run its collective (not where a host's ranks
  // outnumber its CPUs: see Engine::submit); the learning goes on either way.
  QueueWaitRunner(ProgressQueue* queue, bool waitersRun) : waitersRun_(waitersRun), queue_(queue) {}
  void waiting(const WorkState* work) override;
  bool runIfNext(const WorkState* work) override;
  void detach();
  WaitPattern& pattern() { return pattern_; }
  WaitPattern& p2pPattern() { return p2pPattern_; }
  bool waitersRun() const { return waitersRun_; }

 private:
  WaitPattern pattern_;
  WaitPattern p2pPattern_{/*backOff=*/true};  // its streak queues quietly (Engine::queuedWork)
  const bool waitersRun_;
  std::mutex mutex_;
  std::condition_variable left_;
  ProgressQueue* queue_;  // guarded by mutex_; null once detached
  int inside_ = 0;        // waiters in queue_->runIfNext(); guarded by mutex_
};

}  // namespace collie
