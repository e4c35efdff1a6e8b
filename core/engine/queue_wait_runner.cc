#include "core/engine/queue_wait_runner.h"

#include <thread>

namespace collie {

void QueueWaitRunner::waiting(const WorkState* work) {
  const Submission& s = work->submission();
  if (s.thread != std::this_thread::get_id()) return;
  (s.pointToPoint ? p2pPattern_ : pattern_).waitedBySubmitter(s.index, s.submitted);
}

bool QueueWaitRunner::runIfNext(const WorkState* work) {
  if (!waitersRun_) return false;
  ProgressQueue* queue;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_ == nullptr) return false;
    queue = queue_;  // detach() may clear queue_ meanwhile; it waits for inside_ first
    ++inside_;
  }
  const bool ran = queue->runIfNext(work);
  std::lock_guard<std::mutex> lock(mutex_);
  if (--inside_ == 0) left_.notify_all();
  return ran;
}

void QueueWaitRunner::detach() {
  std::unique_lock<std::mutex> lock(mutex_);
  queue_ = nullptr;
  left_.wait(lock, [&] { return inside_ == 0; });
}

}  // namespace collie
