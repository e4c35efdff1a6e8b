#include "core/engine/work_state.h"

#include <algorithm>
#include <string>
#include <thread>

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
  const bool mayRun = runner_ && timeout >= runnerMinWait_;
  if (mayRun) runner_->waiting(this);
  if (finished_.load(std::memory_order_acquire)) return status_;
  if (mayRun && runner_->runIfNext(this) && finished_.load(std::memory_order_acquire)) {
    return status_;
  }
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

}  // namespace collie
