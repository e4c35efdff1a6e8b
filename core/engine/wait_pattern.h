// WaitPattern: whether a communicator's callers wait for their collectives at once.
//
// A collective too large to run on the submitting thread is queued for the progress
// thread, so that the caller's work overlaps it (a DDP bucket's all-reduce beside the rest
// of the backward pass). A caller that waits for it at once runs it itself (WaitRunner),
// but it still pays for the queue and for waking the progress thread: run at submit
// instead, plain buffers on 2 ranks took 0.66-0.74x the time at 512 KiB and 0.90-0.97x at
// 2 MiB (docs/decisions/who-runs-a-collective.md).
// WaitPattern learns from the queued collectives which kind of caller this is:
//
// - a queued collective counts as waited at once when the thread that submitted it waits
//   for it (with no deadline shorter than the collective's own) before any other
//   collective was queued, having done nothing in between (isPromptWait): within
//   kPromptWait of submitting it, or later with no more than kPromptWait of its own CPU
//   time and no blocking of its own accord, which is a thread that the scheduler
//   preempted (on a loaded host, or where ranks outnumber cores, a wall-clock rule alone
//   missed most prompt waits: a blocking torch loop beside other tests' ranks counted 36
//   of 200). Whether the collective finished by then does not matter (the progress thread
//   may have won the race for it). A caller that computes for longer than kPromptWait, or
//   sleeps or blocks on anything, before it waits has overlapped its collective;
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
// A pattern made with backOff (the engine's point-to-point one, whose streak queues
// operations without waking the progress thread: a miss there leaves the operation
// unstarted until its caller waits or the progress thread looks again) asks for twice the
// streak after each miss that ended a streak it had granted, up to kMaxStreak: a caller
// that sends and then computes before it waits (a pipeline stage) stops being granted
// after a few misses, as its runs of prompt waits are shorter than the streak asked for,
// while a ping-pong, which never misses, keeps the grant.
//
// A collective waited for by another thread (collie's DDP Reducer waits on a helper
// thread) is not waited at once: its submitter went on with its work.
//
// Only performance depends on it: a wrong guess runs a collective on the submitting thread
// or through the queue, and either completes it the same way. Thread safety: every method
// may be called from any thread (relaxed atomics; concurrent submitters may blur what is
// learnt, never correctness).
#pragma once

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace collie {

// What the calling thread had done by a moment: the steady_clock time, the CPU time it had
// used (CLOCK_THREAD_CPUTIME_ID, exact to the nanosecond; getrusage's thread times lag by
// up to a scheduler tick, which would hide a millisecond of work) and how often it had
// blocked of its own accord (getrusage(RUSAGE_THREAD)'s ru_nvcsw). Reading the usage
// takes two system calls, about 1 us on the test VM. cpuNs is -1 where it could not be
// read.
struct ThreadMark {
  int64_t steadyNs = 0;
  int64_t cpuNs = 0;
  int64_t voluntarySwitches = 0;

  static int64_t steadyNowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // Fills the usage fields of a mark whose steadyNs is set.
  void readUsage() {
    timespec cpu{};
    rusage usage{};
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) != 0 ||
        getrusage(RUSAGE_THREAD, &usage) != 0) {
      cpuNs = -1;
      return;
    }
    cpuNs = static_cast<int64_t>(cpu.tv_sec) * 1'000'000'000 + cpu.tv_nsec;
    voluntarySwitches = usage.ru_nvcsw;
  }
  static ThreadMark now() {
    ThreadMark mark;
    mark.steadyNs = steadyNowNs();
    mark.readUsage();
    return mark;
  }
};

class WaitPattern {
 public:
  static constexpr uint32_t kStreak = 3;
  static constexpr uint32_t kMaxStreak = 1u << 20;  // with backOff: at most this many
  static constexpr std::chrono::microseconds kPromptWait{100};
  static constexpr std::chrono::milliseconds kProbeEvery{10};

  // Whether a thread marked `submitted` when it submitted a collective and `waiting` when
  // it began to wait for it did nothing in between: it waited within kPromptWait, or it
  // used no more than kPromptWait of CPU and never blocked of its own accord (the rest of
  // the time it was preempted).
  static bool isPromptWait(const ThreadMark& submitted, const ThreadMark& waiting) {
    if (waiting.steadyNs - submitted.steadyNs <= kPromptWaitNs) return true;
    if (submitted.cpuNs < 0 || waiting.cpuNs < 0) return false;
    return waiting.cpuNs - submitted.cpuNs <= kPromptWaitNs &&
           waiting.voluntarySwitches == submitted.voluntarySwitches;
  }

  // maxStreak bounds what backOff asks for (kMaxStreak; a test gives a smaller one to
  // reach it in a few thousand waits).
  explicit WaitPattern(bool backOff = false, uint32_t maxStreak = kMaxStreak)
      : backOff_(backOff), maxStreak_(std::max(maxStreak, kStreak)) {}

  // Whether the last streak() collectives queued were each waited at once (ending the
  // streak when the last one was not).
  bool waitsAtOnce() {
    const uint64_t queued = queued_.load(std::memory_order_relaxed);
    const uint32_t required = required_.load(std::memory_order_relaxed);
    if (queued > 0 && lastWaited_.load(std::memory_order_relaxed) != queued - 1) {
      // The last one queued was not waited at once; with backOff, where the streak had
      // been granted (so that one was let go as if it would be), ask for more next time.
      if (backOff_ && streak_.load(std::memory_order_relaxed) >= required) {
        required_.store(std::min(2 * required, maxStreak_), std::memory_order_relaxed);
      }
      streak_.store(0, std::memory_order_relaxed);
      return false;
    }
    return streak_.load(std::memory_order_relaxed) >= required;
  }
  // The prompt waits in a row that waitsAtOnce() asks for now: kStreak, or with backOff
  // twice as many after each miss of a granted streak, up to maxStreak.
  uint32_t streak() const { return required_.load(std::memory_order_relaxed); }
  uint32_t maxStreak() const { return maxStreak_; }
  // A collective about to be queued: true to run it on the submitting thread instead.
  bool runAtSubmit() {
    if (!waitsAtOnce()) return false;
    return ThreadMark::steadyNowNs() - lastQueuedNs_.load(std::memory_order_relaxed) <
           kProbeEveryNs;
  }
  // A collective is queued at `nowNs` (ThreadMark::steadyNowNs(), after runAtSubmit()):
  // its number, for waitedAtOnce().
  uint64_t queued(int64_t nowNs) {
    lastQueuedNs_.store(nowNs, std::memory_order_relaxed);
    return queued_.fetch_add(1, std::memory_order_relaxed);
  }
  // Queued collective `index`, submitted by a thread that marked `submitted` then
  // (ThreadMark::now()), is waited for by that thread.
  void waitedBySubmitter(uint64_t index, const ThreadMark& submitted) {
    ThreadMark waiting;
    waiting.steadyNs = ThreadMark::steadyNowNs();
    if (waiting.steadyNs - submitted.steadyNs > kPromptWaitNs) {
      if (submitted.cpuNs < 0) return;  // no usage to compare with: not prompt
      waiting.readUsage();
    }
    if (!isPromptWait(submitted, waiting)) return;                     // it did work first
    if (index + 1 != queued_.load(std::memory_order_relaxed)) return;  // another came after
    if (lastWaited_.exchange(index, std::memory_order_relaxed) == index) return;  // counted
    streak_.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  static constexpr int64_t kProbeEveryNs =
      std::chrono::duration_cast<std::chrono::nanoseconds>(kProbeEvery).count();
  static constexpr int64_t kPromptWaitNs =
      std::chrono::duration_cast<std::chrono::nanoseconds>(kPromptWait).count();

  const bool backOff_;
  const uint32_t maxStreak_;
  std::atomic<uint32_t> required_{kStreak};       // see streak()
  std::atomic<uint64_t> queued_{0};               // collectives queued so far
  std::atomic<uint64_t> lastWaited_{UINT64_MAX};  // the last one waited at once
  std::atomic<uint32_t> streak_{0};               // waited at once in a row
  std::atomic<int64_t> lastQueuedNs_{0};          // when the last one was queued
};

}  // namespace collie
