// EmulatedStream: a CUDA stream on the host. Work items run one at a time, in enqueue
// order, on a worker thread owned by the stream, so the stream ordering that the
// device path relies on is real (and kernels launched on two streams run
// concurrently, as on two GPUs). EmulatedEvent is set when the worker reaches it.
//
// Contract: enqueue() returns at once. The destructor runs every item already
// enqueued, then joins the worker. Items must not throw. beginCapture()/endCapture()
// stand for cudaStreamBeginCapture/EndCapture: between them enqueue() records items
// instead of running them (DeviceRuntime::isCapturing() is true), and endCapture()
// returns them as a graph, which launch() enqueues as a whole, any number of times
// (the items keep the arguments they were recorded with, as a CUDA graph's nodes do).
// Thread safety: enqueue() from any thread; EmulatedEvent::done() from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

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

  using Graph = std::vector<std::function<void()>>;

  void beginCapture() {
    std::lock_guard<std::mutex> lock(mutex_);
    capturing_ = true;
    captured_.clear();
  }
  Graph endCapture() {
    std::lock_guard<std::mutex> lock(mutex_);
    capturing_ = false;
    return std::move(captured_);
  }
  bool capturing() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return capturing_;
  }
  void launch(const Graph& graph) {
    for (const std::function<void()>& item : graph) enqueue(item);
  }

  void enqueue(std::function<void()> item) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (capturing_) {
        captured_.push_back(std::move(item));
        return;
      }
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

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> items_;
  bool stopping_ = false;
  bool capturing_ = false;
  Graph captured_;
  std::thread worker_;  // last: starts after the members it uses
};

}  // namespace collie::emulation
