// WaitPattern: whether a communicator's callers wait for their collectives at once.
//
// A collective too large to run on the submitting thread is queued for the progress
// thread, so that the caller's work overlaps it (a DDP bucket's all-reduce beside the rest
// of the backward pass). A caller that waits for it at once runs it itself (WaitRunner),
// but it still pays for the queue and for waking the progress thread: run at submit
// instead, plain buffers on 2 ranks took 0.66-0.74x the time at 512 KiB and 0.90-0.97x at
// 2 MiB (docs/decisions/run-at-submit.md).
// WaitPattern learns from the queued collectives which kind of caller this is:
//
// - a queued collective counts as waited at once when the thread that submitted it waits
//   for it (with no deadline shorter than the collective's own) within kPromptWait of
//   submitting it, before any other collective was queued: whether it finished by then
//   does not matter (the progress thread may have won the race for it), and a caller
//   that computes for longer than that before it waits has overlapped its collective;
// - after kStreak of them in a row, runAtSubmit() says to run the next ones on the
//   submitting thread (when the engine is idle), except the first that comes kProbeEvery
//   after the last queued one, which is queued to check that the callers still wait at
//   once;
// - when the next collective comes and the last queued one was not waited at once, the
//   streak ends there: a caller that overlaps its collectives with its work gets the
//   queue back within kProbeEvery and one collective.
//
// The probes go by time, not by count: a queued collective wakes the progress thread,
// which then takes a core from the ranks for a while, and at 512 KiB a probe every 16
// calls made a blocking loop 1.3-1.7x slower (registered buffers, 2 ranks); one per
// 10 ms costs nothing measurable, and a caller that starts to overlap still gets the
// queue back within a few of its buckets.
//
// A collective waited for by another thread (collie's DDP Reducer waits on a helper
// thread) is not waited at once: its submitter went on with its work.
//
// Only performance depends on it: a wrong guess runs a collective on the submitting thread
// or through the queue, and either completes it the same way. Thread safety: every method
// may be called from any thread (relaxed atomics; concurrent submitters may blur what is
// learnt, never correctness).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace collie {

class WaitPattern {
 public:
  static constexpr uint32_t kStreak = 3;
  static constexpr std::chrono::microseconds kPromptWait{100};
  static constexpr std::chrono::milliseconds kProbeEvery{10};

  // steady_clock nanoseconds, the time base of queued() and waitedBySubmitter().
  static int64_t nowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // A collective about to be queued: true to run it on the submitting thread instead.
  bool runAtSubmit() {
    const uint64_t queued = queued_.load(std::memory_order_relaxed);
    if (queued > 0 && lastWaited_.load(std::memory_order_relaxed) != queued - 1) {
      streak_.store(0, std::memory_order_relaxed);  // the last one queued was not waited at once
      return false;
    }
    if (streak_.load(std::memory_order_relaxed) < kStreak) return false;
    return nowNs() - lastQueuedNs_.load(std::memory_order_relaxed) < kProbeEveryNs;
  }
  // A collective is queued (after runAtSubmit()): its number, for waitedAtOnce().
  uint64_t queued() {
    lastQueuedNs_.store(nowNs(), std::memory_order_relaxed);
    return queued_.fetch_add(1, std::memory_order_relaxed);
  }
  // Queued collective `index`, queued at `queuedNs` (nowNs()), is waited for by the
  // thread that submitted it.
  void waitedBySubmitter(uint64_t index, int64_t queuedNs) {
    if (nowNs() - queuedNs > kPromptWaitNs) return;                    // it computed first
    if (index + 1 != queued_.load(std::memory_order_relaxed)) return;  // another came after
    if (lastWaited_.exchange(index, std::memory_order_relaxed) == index) return;  // counted
    streak_.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  static constexpr int64_t kProbeEveryNs =
      std::chrono::duration_cast<std::chrono::nanoseconds>(kProbeEvery).count();
  static constexpr int64_t kPromptWaitNs =
      std::chrono::duration_cast<std::chrono::nanoseconds>(kPromptWait).count();

  std::atomic<uint64_t> queued_{0};               // collectives queued so far
  std::atomic<uint64_t> lastWaited_{UINT64_MAX};  // the last one waited at once
  std::atomic<uint32_t> streak_{0};               // waited at once in a row
  std::atomic<int64_t> lastQueuedNs_{0};          // when the last one was queued
};

}  // namespace collie
