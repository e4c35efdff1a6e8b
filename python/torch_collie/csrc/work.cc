#include "work.h"

#include <c10/util/Exception.h>

namespace torch_collie {

namespace {
// collie::Work::wait slices; the engine's own deadline ends an operation.
constexpr std::chrono::milliseconds kWaitSlice{200};
}  // namespace

std::exception_ptr makeBackendError(const std::string& message) {
  try {
    C10_THROW_ERROR(DistBackendError, message);
  } catch (...) {
    return std::current_exception();
  }
}

CollieWork::CollieWork(int rank, c10d::OpType type, const char* title,
                       std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type, title),
      outputs_(std::move(outputs)),
      // No devices: CPU futures carry none (c10 rejects index-less devices).
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

void CollieWork::complete(std::exception_ptr error) {
  // The Work first (Python's wait() returns), then the Future (DDP's callbacks run
  // here, on the completion thread).
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

CompletionQueue::CompletionQueue(int rank) : rank_(rank), thread_([this] { run(); }) {}

CompletionQueue::~CompletionQueue() { stop(); }

void CompletionQueue::push(PendingCall call) {
  bool inlineFinish = true;
  for (collie::Work& op : call.ops) inlineFinish = inlineFinish && op.test();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Finished already (collie ran it on this thread) and nothing older is pending:
    // complete it here, without a hop to the completion thread.
    inlineFinish = inlineFinish && inFlight_ == 0 && !stopping_;
    if (!inlineFinish) queue_.push_back(std::move(call));
    ++inFlight_;
  }
  if (inlineFinish) {
    finishCall(call);
    call = PendingCall();
    std::lock_guard<std::mutex> lock(mutex_);
    --inFlight_;
  }
  cv_.notify_all();
}

bool CompletionQueue::drain(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return cv_.wait_for(lock, timeout, [this] { return inFlight_ == 0; });
}

void CompletionQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CompletionQueue::run() {
  for (;;) {
    PendingCall call;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and nothing left
      call = std::move(queue_.front());
      queue_.pop_front();
    }
    finishCall(call);
    call = PendingCall();  // release tensors before announcing completion
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --inFlight_;
    }
    cv_.notify_all();
  }
}

void CompletionQueue::finishCall(PendingCall& call) {
  std::exception_ptr error;
  for (collie::Work& op : call.ops) {
    // collie's engine bounds every operation by COLLIE_TIMEOUT, so this ends.
    while (!op.test()) {
      op.wait(kWaitSlice);
    }
    collie::Status status = op.status();
    if (!status.isOk() && !error) {
      error = makeBackendError("collie: " + call.what + " failed on rank " + std::to_string(rank_) +
                               ": " + status.toString());
    }
  }
  if (call.cleanup) call.cleanup();
  if (!error && call.onSuccess) {
    try {
      call.onSuccess();
    } catch (const std::exception& e) {
      error = makeBackendError("collie: " + call.what + " on rank " + std::to_string(rank_) +
                               ": copying the result failed: " + e.what());
    }
  }
  call.work->complete(error);
}

}  // namespace torch_collie
