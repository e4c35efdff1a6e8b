// EmulatedStream: a CUDA stream on the host. Work items run one at a time, in enqueue
// order, on a worker thread owned by the stream, so the stream ordering that the
// device path relies on is real (and kernels launched on two streams run
// concurrently, as on two GPUs). EmulatedEvent is set when the worker reaches it.
//
// Contract: enqueue() returns at once. The destructor runs every item already
// enqueued, then joins the worker. Items must not throw. setCapturing() stands for
// cudaStreamBeginCapture/EndCapture in tests: it only sets what
// DeviceRuntime::isCapturing() reports (nothing is recorded; work still runs).
// Thread safety: enqueue() from any thread; EmulatedEvent::done() from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace collie::emulation {

// The flag lives apart from the handle: a stream item that sets it may still be queued
// when the event is destroyed (allowed in CUDA: its resources go once it completes).
struct EmulatedEvent {
  std::shared_ptr<std::atomic<bool>> reached = std::make_shared<std::atomic<bool>>(false);
  bool done() const { return reached->load(std::memory_order_acquire); }
};

class EmulatedStream {
 public:
  EmulatedStream() : worker_([this] { loop(); }) {}
  EmulatedStream(const EmulatedStream&) = delete;
  EmulatedStream& operator=(const EmulatedStream&) = delete;
  ~EmulatedStream() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  void setCapturing(bool capturing) { capturing_.store(capturing, std::memory_order_release); }
  bool capturing() const { return capturing_.load(std::memory_order_acquire); }

  void enqueue(std::function<void()> item) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      items_.push_back(std::move(item));
    }
    cv_.notify_all();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [this] { return stopping_ || !items_.empty(); });
      if (items_.empty()) return;  // stopping, and everything ran
      std::function<void()> item = std::move(items_.front());
      items_.pop_front();
      lock.unlock();
      item();
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> items_;
  bool stopping_ = false;
  std::atomic<bool> capturing_{false};
  std::thread worker_;  // last: starts after the members it uses
};

}  // namespace collie::emulation
