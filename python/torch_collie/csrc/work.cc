#include "work.h"

#include <ATen/record_function.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <algorithm>

namespace torch_collie {

namespace {
// collie::Work::wait slices; the engine's own deadline ends an operation.
constexpr std::chrono::milliseconds kWaitSlice{200};

std::atomic<uint64_t> gCompletedOnCaller{0};
std::atomic<uint64_t> gCompletedOnThread{0};
std::atomic<uint64_t> gCompletedByWaiter{0};
std::atomic<uint64_t> gNextCompletionKey{1};  // CollieWork::getCompletionKey, never reused

// A Future of the output list, or of the list of output lists.
c10::TypePtr futureType(size_t lists) {
  return lists > 1 ? c10::ListType::create(c10::ListType::ofTensors())
                   : c10::TypePtr(c10::ListType::ofTensors());
}

}  // namespace

std::exception_ptr makeBackendError(const std::string& message) {
  try {
    C10_THROW_ERROR(DistBackendError, message);
  } catch (...) {
    return std::current_exception();
  }
}

std::exception_ptr operationFailed(const std::string& what, int rank,
                                   const collie::Status& status) {
  return makeBackendError("collie: " + what + " failed on rank " + std::to_string(rank) + ": " +
                          status.toString());
}

std::exception_ptr operationTimedOut(const std::string& what, int rank,
                                     std::chrono::milliseconds timeout, const char* whose) {
  return makeBackendError("collie: " + what + " on rank " + std::to_string(rank) +
                          ": timed out after " + std::to_string(timeout.count()) + " ms (" + whose +
                          "); the group's communicator was aborted, since a collective cannot be "
                          "taken back half done");
}

CollieWork::CollieWork(int rank, c10d::OpType type, const char* profilingTitle,
                       c10::ArrayRef<at::Tensor> inputs, TensorLists outputs, uint64_t sequence,
                       std::vector<c10::Device> devices,
                       std::chrono::steady_clock::time_point started)
    : CollieWork(rank, type, profilingTitle, inputs, std::move(outputs), sequence,
                 std::move(devices), started, at::hasCallbacks()) {}

// The profiler event's title and inputs go to c10d::Work only while a profiler listens:
// it makes a RecordFunction for a title and copies the inputs, which an unprofiled call
// would pay for nothing.
CollieWork::CollieWork(int rank, c10d::OpType type, const char* profilingTitle,
                       c10::ArrayRef<at::Tensor> inputs, TensorLists outputs, uint64_t sequence,
                       std::vector<c10::Device> devices,
                       std::chrono::steady_clock::time_point started, bool profiled)
    : c10d::Work(rank, type, profiled ? profilingTitle : nullptr,
                 profiled ? std::optional<std::vector<at::Tensor>>(inputs.vec()) : std::nullopt),
      outputs_(std::move(outputs)),
      // No devices for CPU calls: CPU futures carry none (c10 rejects index-less devices).
      devices_(std::move(devices)),
      sequence_(sequence),
      completionKey_(gNextCompletionKey.fetch_add(1, std::memory_order_relaxed)),
      started_(started) {
  // A device Future records events on the current streams when it is marked, so it is
  // made now and marked by complete(), on the completion thread.
  if (!devices_.empty()) future_ = makeFuture();
}

c10::intrusive_ptr<c10::ivalue::Future> CollieWork::makeFuture() const {
  return c10::make_intrusive<c10::ivalue::Future>(futureType(outputs_.size()), devices_);
}

void CollieWork::markFuture(c10::ivalue::Future& future, const std::exception_ptr& error) const {
  if (error) {
    future.setError(error);
  } else if (outputs_.size() > 1) {
    std::vector<std::vector<at::Tensor>> lists;
    for (const TensorList& list : outputs_) lists.emplace_back(list.begin(), list.end());
    future.markCompleted(c10::IValue(std::move(lists)));
  } else {
    future.markCompleted(c10::IValue(firstOutputs()));
  }
}

c10::intrusive_ptr<c10::ivalue::Future> CollieWork::getFuture() {
  std::lock_guard<std::mutex> lock(futureMutex_);
  if (!future_) {
    future_ = makeFuture();
    // A fresh Future has no callbacks yet: marking it here runs nothing under the lock.
    if (completed_) markFuture(*future_, error_);
  }
  return future_;
}

std::vector<at::Tensor> CollieWork::firstOutputs() const {
  if (outputs_.empty()) return {};
  return std::vector<at::Tensor>(outputs_[0].begin(), outputs_[0].end());
}

std::vector<at::Tensor> CollieWork::result() { return firstOutputs(); }

float CollieWork::getDuration() const {
  const float ms = durationMs_.load();
  TORCH_CHECK(ms >= 0, "collie: getDuration() of a work that has not completed");
  return ms;
}

bool CollieWork::wait(std::chrono::milliseconds timeout) {
  if (const std::shared_ptr<c10::Event> event = deviceEvent_.load()) {
    // A device call: the caller's current stream waits, not the host (ProcessGroupNCCL).
    const c10::Device device = event->device();
    event->block(c10::impl::getDeviceGuardImpl(device.type())->getStream(device));
    if (isCompleted()) return c10d::Work::wait(timeout);  // rethrows a failure
    return true;
  }
  // collie bounds every operation by COLLIE_TIMEOUT, and the completion thread aborts the
  // communicator when the call's own deadline passes, so these waits end; their status
  // is the completion's to report.
  if (timeout == ::kNoTimeout && !isCompleted()) {
    if (link_) {
      link_->waitBegins(pushed_);
      waiterInside_.store(true);
    }
    for (const collie::Work& op : ops_) (void)op.wait();
    if (link_) link_->finishIfNext(this);
  }
  return c10d::Work::wait(timeout);
}

void CollieWork::complete(std::exception_ptr error) {
  // The Future first (DDP's callbacks run here, on the completion thread), then the
  // Work, as gloo does: once wait() returns, getFuture().value() is there (made
  // completed, if nobody asked for it before).
  durationMs_.store(
      std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - started_)
          .count());
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(futureMutex_);
    completed_ = true;
    error_ = error;
    future = future_;
  }
  if (future) markFuture(*future, error);
  finish(error);
}

bool QueueLink::finishIfNext(CollieWork* work) {
  CompletionQueue* queue;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_ == nullptr) return false;
    queue = queue_;  // detach() waits for inside_ before the queue goes
    ++inside_;
  }
  const bool finished = queue->finishIfNext(work);
  std::lock_guard<std::mutex> lock(mutex_);
  if (--inside_ == 0) left_.notify_all();
  return finished;
}

void QueueLink::detach() {
  std::unique_lock<std::mutex> lock(mutex_);
  queue_ = nullptr;
  left_.wait(lock, [&] { return inside_ == 0; });
}

CompletionQueue::CompletionQueue(int rank, BackendHooks& hooks)
    : rank_(rank),
      hooks_(hooks),
      link_(std::make_shared<QueueLink>(this)),
      thread_([this] { run(); }) {}

CompletionQueue::~CompletionQueue() { stop(); }

void CompletionQueue::push(PendingCall call) {
  bool inlineFinish = true;
  for (collie::Work& op : call.ops) inlineFinish = inlineFinish && op.test();
  // Operations still running are the caller's to wait for (CollieWork::wait); finished
  // ones are not worth the copy. A call with a deadline of its own is waited for by the
  // completion thread alone, which enforces it.
  const bool waitable = !inlineFinish && !call.deadline;
  if (waitable) call.work->setOps(call.ops, link_, std::chrono::steady_clock::now());
  bool wake = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Finished already (collie ran it on this thread) and nothing older is pending:
    // complete it here, without a hop to the completion thread.
    inlineFinish = inlineFinish && inFlight_ == 0 && !stopping_;
    ++inFlight_;
    if (!inlineFinish) {
      // Not a coalesced batch: a wait on one of its followers finishes nothing itself.
      call.quiet =
          waitable && call.followers.empty() && !call.work->onDevice() && link_->waitsAtOnce();
      if (call.quiet) {
        lastQuietPush_ = std::chrono::steady_clock::now();
        wake = sleepsForGood_;
      }
      queue_.push_back(std::move(call));
    }
  }
  if (!inlineFinish) {
    // After the lock is released: the woken thread takes the mutex at once.
    if (wake) queued_.notify_one();
    return;
  }
  gCompletedOnCaller.fetch_add(1, std::memory_order_relaxed);
  finishCall(call);
  call = PendingCall();
  std::lock_guard<std::mutex> lock(mutex_);
  if (--inFlight_ == 0) drained_.notify_all();
}

uint64_t CompletionQueue::completedOnCaller() {
  return gCompletedOnCaller.load(std::memory_order_relaxed);
}

uint64_t CompletionQueue::completedOnThread() {
  return gCompletedOnThread.load(std::memory_order_relaxed);
}

uint64_t CompletionQueue::completedByWaiter() {
  return gCompletedByWaiter.load(std::memory_order_relaxed);
}

bool CompletionQueue::finishIfNext(CollieWork* work) {
  PendingCall call;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.empty() || queue_.front().work.get() != work) {
      // Taken by the thread, or an older call is pending: the thread finishes it, and
      // must not leave it to this waiter any more.
      work->clearWaiterInside();
      if (!queue_.empty()) queued_.notify_one();
      return false;
    }
    call = std::move(queue_.front());
    queue_.pop_front();
    // Calls behind it the thread left alone while this one was at the front.
    if (!queue_.empty()) queued_.notify_one();
  }
  gCompletedByWaiter.fetch_add(1, std::memory_order_relaxed);
  finishCall(call);
  call = PendingCall();
  std::lock_guard<std::mutex> lock(mutex_);
  if (--inFlight_ == 0) drained_.notify_all();
  return true;
}

bool CompletionQueue::frontIsTakeable() const {
  if (queue_.empty()) return false;
  return stopping_ || !queue_.front().work->waiterInside();
}

bool CompletionQueue::drain(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return drained_.wait_for(lock, timeout, [this] { return inFlight_ == 0; });
}

void CompletionQueue::stop() {
  link_->detach();  // waiters now leave their calls to the thread
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) return;
    stopping_ = true;
  }
  queued_.notify_all();
  thread_.join();
}

void CompletionQueue::run() {
  for (;;) {
    PendingCall call;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      while (!(stopping_ || frontIsTakeable())) {
        if (std::chrono::steady_clock::now() - lastQuietPush_ < kQuietSpan) {
          queued_.wait_for(lock, kQuietTick);  // a quiet push does not wake it
        } else {
          sleepsForGood_ = true;
          queued_.wait(lock);
          sleepsForGood_ = false;
        }
      }
      if (queue_.empty()) return;  // stopping and nothing left
      call = std::move(queue_.front());
      queue_.pop_front();
      // Pushed quietly, yet not waited for at once: the streak ends, and a longer one is
      // asked for.
      if (call.quiet) link_->missedQuiet();
    }
    gCompletedOnThread.fetch_add(1, std::memory_order_relaxed);
    finishCall(call);
    call = PendingCall();  // release tensors before announcing completion
    std::lock_guard<std::mutex> lock(mutex_);
    if (--inFlight_ == 0) drained_.notify_all();
  }
}

void CompletionQueue::finishCall(PendingCall& call) {
  std::exception_ptr error;
  bool failureAnnounced = false;         // to the abort hooks
  std::optional<c10d::ErrorType> broke;  // what broke the communicator, if anything did
  for (collie::Work& op : call.ops) {
    // collie's engine bounds every operation by COLLIE_TIMEOUT, so this ends.
    while (!op.test()) {
      std::chrono::milliseconds slice = kWaitSlice;
      if (call.deadline) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(*call.deadline -
                                                                 std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        slice = std::min(slice, left);
      }
      op.wait(slice);
    }
    if (!op.test()) {
      // The call's own deadline passed: fail it, then end the operation behind it.
      if (!error) {
        error = operationTimedOut(call.what, rank_, call.timeout, "the timeout of its options");
      }
      if (!failureAnnounced) {
        hooks_.failing(c10d::ErrorType::TIMEOUT);  // before the abort: a dump sees it pending
        failureAnnounced = true;
      }
      if (auto comm = call.abortOnTimeout.lock()) comm->abort();
      call.abortOnTimeout.reset();
      op.wait();  // the abort ends it at once
      continue;
    }
    collie::Status status = op.status();
    if (!status.isOk() && !error) {
      error = operationFailed(call.what, rank_, status);
      broke = BackendHooks::kindOf(status);
    }
  }
  if (call.cleanup) call.cleanup();
  if (!error && call.onSuccess) {
    try {
      call.onSuccess();
    } catch (const c10::DistBackendError&) {
      error = std::current_exception();  // a complete message already
    } catch (const std::exception& e) {
      error = makeBackendError(std::string("collie: ") + call.what + " on rank " +
                               std::to_string(rank_) + ": finishing the call failed: " + e.what());
    }
  }
  if (error && !failureAnnounced) hooks_.failing(broke);
  // Completed first, then announced (see backend_hooks.h).
  call.work->complete(error);
  for (auto& follower : call.followers) follower->complete(error);
  if (error) return;
  hooks_.completed(*call.work);
  for (auto& follower : call.followers) hooks_.completed(*follower);
}

}  // namespace torch_collie
