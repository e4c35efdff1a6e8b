#include "core/engine/failure_policy.h"

#include "core/log/log.h"

namespace collie {

FailurePolicy::FailurePolicy(int rank, std::unique_ptr<FailureReasons> reasons)
    : rank_(rank), reasons_(std::move(reasons)) {}

Status FailurePolicy::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_;
}

void FailurePolicy::abort(Status reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  aborted_ = true;
  if (failed_.isOk()) failed_ = std::move(reason);
  failing_ = true;
}

bool FailurePolicy::closed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closed_;
}

bool FailurePolicy::waitClosed(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return closedCv_.wait_for(lock, timeout, [&] { return closed_; });
}

Status FailurePolicy::giveUp(Status status, bool publish,
                             const std::function<void(const Status&)>& close) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return status;
  }
  if (reasons_ && status.code() != StatusCode::kAborted) {
    status = reasons_->explain(status, kLookupWait);
  }
  Status sticky;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_.isOk()) failed_ = status;
    failing_ = true;
    sticky = failed_;
  }
  if (publish) {
    COLLIE_LOG(WARN, ENGINE) << "rank " << rank_
                             << " closes its connections: " << sticky.toString();
    if (reasons_) reasons_->publish(sticky, kPublishWait);
  }
  close(sticky);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  closedCv_.notify_all();
  return status;
}

}  // namespace collie
