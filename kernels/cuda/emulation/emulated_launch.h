// emulatedLaunch(kernel, grid, block, args...): runs a kernel written for CUDA on the
// host, through the built-ins of cuda_emulation.h.
//
// Contract:
//   - Synchronous: returns when every block finished. The arguments are copied once
//     per launch, like a real launch's parameter buffer; each emulated thread calls
//     the kernel with those copies.
//   - Blocks run one after another, in blockIdx order (x fastest); the threads of a
//     block run concurrently on a pool of host threads owned by the calling host
//     thread (created on first use, reused across launches, joined at thread exit).
//   - At most 1024 threads per block, like CUDA. A thread that returns from the
//     kernel drops out of the block's barrier (as exited threads do on the device).
// Thread safety: launches from different host threads run concurrently on separate
// pools (two emulated GPUs); a kernel may wait on memory another launch writes.
#pragma once

#include <barrier>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cuda/emulation/cuda_emulation.h"

namespace collie::emulation {

inline constexpr unsigned kMaxThreadsPerBlock = 1024;

// Per-block state behind __syncthreads_and().
struct BlockState {
  explicit BlockState(std::ptrdiff_t threads) : barrier(threads) {}
  std::barrier<> barrier;
  std::atomic<int> failures[2] = {0, 0};
};
inline thread_local BlockState* currentBlockState = nullptr;
inline thread_local int syncPhase = 0;

class BlockRunner {
 public:
  BlockRunner() = default;
  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;
  ~BlockRunner() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  // Runs `body` on every thread of block `index`, returns when all returned.
  void runBlock(dim3 grid, dim3 block, uint3 index, const std::function<void()>& body) {
    const size_t threads = static_cast<size_t>(block.x) * block.y * block.z;
    BlockState state(static_cast<std::ptrdiff_t>(threads));
    std::unique_lock<std::mutex> lock(mu_);
    while (workers_.size() < threads) {
      size_t id = workers_.size();
      workers_.emplace_back([this, id] { workerLoop(id); });
    }
    grid_ = grid;
    block_ = block;
    index_ = index;
    body_ = &body;
    state_ = &state;
    active_ = threads;
    remaining_ = threads;
    ++generation_;
    start_.notify_all();
    done_.wait(lock, [this] { return remaining_ == 0; });
  }

 private:
  void workerLoop(size_t id) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (id >= active_) continue;
      gridDim = grid_;
      blockDim = block_;
      blockIdx = index_;
      threadIdx.x = static_cast<unsigned>(id % block_.x);
      threadIdx.y = static_cast<unsigned>((id / block_.x) % block_.y);
      threadIdx.z = static_cast<unsigned>(id / (static_cast<size_t>(block_.x) * block_.y));
      BlockState* state = state_;
      const std::function<void()>* body = body_;
      lock.unlock();
      currentBlockState = state;
      currentBlockBarrier = &state->barrier;
      syncPhase = 0;
      (*body)();
      state->barrier.arrive_and_drop();
      currentBlockBarrier = nullptr;
      currentBlockState = nullptr;
      lock.lock();
      if (--remaining_ == 0) done_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable start_;
  std::condition_variable done_;
  std::vector<std::thread> workers_;
  uint64_t generation_ = 0;
  size_t active_ = 0;
  size_t remaining_ = 0;
  bool stop_ = false;
  dim3 grid_;
  dim3 block_;
  uint3 index_;
  const std::function<void()>* body_ = nullptr;
  BlockState* state_ = nullptr;
};

inline BlockRunner& blockRunner() {
  thread_local BlockRunner runner;
  return runner;
}

}  // namespace collie::emulation

// __syncthreads_and(pred): a block barrier that returns nonzero iff every thread of
// the block passed a nonzero predicate. Two alternating counters, so a fast thread
// entering the next call cannot disturb the current one.
inline int __syncthreads_and(int predicate) {
  using namespace collie::emulation;
  BlockState& state = *currentBlockState;
  const int phase = syncPhase;
  syncPhase ^= 1;
  if (!predicate) state.failures[phase].fetch_add(1);
  state.barrier.arrive_and_wait();
  const int result = state.failures[phase].load() == 0;
  state.barrier.arrive_and_wait();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) state.failures[phase].store(0);
  return result;
}

template <typename... Params, typename... Args>
void emulatedLaunch(void (*kernel)(Params...), dim3 grid, dim3 block, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "wrong number of kernel arguments");
  const size_t threads = static_cast<size_t>(block.x) * block.y * block.z;
  if (threads == 0 || threads > collie::emulation::kMaxThreadsPerBlock || grid.x == 0 ||
      grid.y == 0 || grid.z == 0) {
    std::fprintf(stderr, "emulatedLaunch: invalid configuration (%u,%u,%u) x (%u,%u,%u)\n", grid.x,
                 grid.y, grid.z, block.x, block.y, block.z);
    std::abort();
  }
  std::tuple<std::decay_t<Params>...> params(std::forward<Args>(args)...);
  std::function<void()> body = [&] { std::apply(kernel, params); };
  collie::emulation::BlockRunner& runner = collie::emulation::blockRunner();
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) runner.runBlock(grid, block, uint3{x, y, z}, body);
    }
  }
}
