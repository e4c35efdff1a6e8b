// CollieWork and CompletionQueue: how collie's Work handles become c10d::Work objects.
//
// A CollieWork is the c10d::Work that one torch.distributed call returns. It completes
// (Work::wait returns or rethrows; its Future is marked completed with the output
// tensors, or set to the error) when every collie operation behind it finished and
// the results were copied to the caller's tensors. Like gloo's works it records a
// profiler event named "collie:<collective>" (async, with the input shapes) from issue
// to completion while a profiler listens (at::hasCallbacks(); otherwise c10d::Work makes
// no RecordFunction and copies no inputs), carries the group's sequence number, and a
// receive from any source reports the rank it received from (sourceRank). The Future's
// value is the output list, or the list of output lists when a call has several (gloo's
// allgather with several inputs per rank). A CPU call makes its Future only when asked
// (getFuture): a blocking dist.all_reduce never does, and saves its allocations and its
// marking.
//
// Every work is timed from its call's issue to its completion (getDuration), and carries
// a completion key of its own, by which the backend's completion hooks name it.
//
// A CompletionQueue owns one thread that finishes CollieWorks in issue order. collie
// runs the operations of one communicator in issue order, so waiting on the oldest
// entry first never waits longer than needed. The thread blocks in collie's
// Work::wait, never spins; collie bounds every operation by COLLIE_TIMEOUT and ends
// pending ones when the communicator is aborted or destroyed, so the wait ends. A call
// with a deadline of its own (an options timeout shorter than the communicator's)
// fails when it passes: the queue then aborts the call's communicator, since a
// collective cannot be taken back half done. A call that failed or timed out runs the
// backend's abort hooks before its work fails (before the abort, on a timeout); one that
// succeeded runs the completion hooks after its work completed (backend_hooks.h).
//
// A call whose collie operations have already finished when it is pushed (collie ran
// it inline on the caller's thread: shared-memory collectives up to 256 KiB per rank,
// and larger ones once its callers are seen to wait at once) and that has no older call
// pending is completed by push() itself, on the caller's thread: no hand-off to the
// queue's thread on that path.
//
// CollieWork::wait() with no timeout (a blocking dist.all_reduce) of a call with no
// deadline of its own first waits for the collie operations on the calling thread, then
// for the completion. collie runs a queued collective on a thread that waits for it with
// no deadline, and learns from the submitting thread's prompt waits that the caller
// blocks at once: it then runs the next collectives at submit
// (docs/decisions/who-runs-a-collective.md), and push() completes them. The queue's thread alone
// never teaches that: it is not the submitter. Sends and receives are never run at
// submit, but collie runs them on that waiting thread; the waiter then also finishes its
// call itself (finishIfNext) when it is the oldest one pending and the queue's thread has
// not taken it. Once the calls are seen to be waited for at once (kPromptStreak waits in a
// row within kPromptWait of their push), they are queued without waking the queue's
// thread, which otherwise takes them first, and the thread looks at the queue every
// kQuietTick instead (for kQuietSpan after such a push): a call nobody waits for after
// all is finished within kQuietTick, ends the streak, and doubles the streak asked for
// from then on (QueueLink::missedQuiet). A call whose waiter is inside
// wait() is left to that waiter.
//
// A call on CUDA tensors (backend_device.cc) is enqueued on the caller's current stream,
// and its CollieWork carries a CUDA event recorded on that stream after the call's last
// kernel or copy. Its wait() is ProcessGroupNCCL's: the current stream of the tensors'
// device waits for that event, the host does not (it rethrows a failure already known).
// The completion thread still finishes it in order once collie's operations ended (they
// end with the stream), and its Future (of that device) is marked completed then.
//
// Thread safety: push() may be called from any thread; drain() and stop() from one
// owner thread. Future callbacks (DDP's bucket finalisation) run on the queue's
// thread, or on the pushing thread for calls completed by push(), and must not wait
// for a later operation of the same backend.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "backend_hooks.h"
#include "collie/communicator.h"

namespace torch_collie {

// The lists a call holds. Most calls hold one or two tensors, one output list and one
// collie operation, which these keep inline: a small call allocates nothing on its way
// but its CollieWork.
using TensorList = c10::SmallVector<at::Tensor, 2>;
using TensorLists = c10::SmallVector<TensorList, 1>;
using OpList = c10::SmallVector<collie::Work, 1>;

class CompletionQueue;
class CollieWork;

// A CollieWork's way back to its CompletionQueue (finishIfNext), which the queue cuts
// when it stops: a work may outlive its backend. It also keeps what the queue learns of
// prompt waits, which needs no queue. Thread safe.
class QueueLink {
 public:
  static constexpr std::chrono::microseconds kPromptWait{100};
  static constexpr uint32_t kPromptStreak = 3;
  static constexpr uint32_t kMaxPromptStreak = 1u << 20;

  explicit QueueLink(CompletionQueue* queue) : queue_(queue) {}
  // A thread begins to wait for the operations of a call pushed at `pushed`: within
  // kPromptWait it counts as prompt, later it ends the streak, as a missed grant where
  // the streak had been granted (that call was queued quietly, unless it could not be:
  // a call with followers or on a device, taken as a miss all the same).
  void waitBegins(std::chrono::steady_clock::time_point pushed) {
    if (std::chrono::steady_clock::now() - pushed <= kPromptWait) {
      promptStreak_.fetch_add(1, std::memory_order_relaxed);
    } else if (waitsAtOnce()) {
      missedQuiet();
    } else {
      endStreak();
    }
  }
  void endStreak() { promptStreak_.store(0, std::memory_order_relaxed); }
  // A call queued quietly was finished by the queue's thread after all: the streak ends,
  // and twice as many prompt waits in a row are asked for from now on (up to
  // kMaxPromptStreak), as collie's engine does for its sends and receives
  // (core/engine/wait_pattern.h): a caller that often goes on with its work before it
  // waits stops being queued quietly after a few such calls.
  void missedQuiet() {
    const uint32_t required = required_.load(std::memory_order_relaxed);
    required_.store(std::min(2 * required, kMaxPromptStreak), std::memory_order_relaxed);
    endStreak();
  }
  // The prompt waits in a row asked for (kPromptStreak, doubled by each missedQuiet()).
  bool waitsAtOnce() const {
    return promptStreak_.load(std::memory_order_relaxed) >=
           required_.load(std::memory_order_relaxed);
  }
  // CompletionQueue::finishIfNext(work), unless the queue stopped (false then).
  bool finishIfNext(CollieWork* work);
  // After it, nothing reaches the queue; waits for whoever is inside.
  void detach();

 private:
  std::atomic<uint32_t> promptStreak_{0};  // prompt waits in a row
  std::atomic<uint32_t> required_{kPromptStreak};
  std::mutex mutex_;
  std::condition_variable left_;
  CompletionQueue* queue_;  // guarded by mutex_; null once detached
  int inside_ = 0;          // guarded by mutex_
};

class CollieWork : public c10d::Work {
 public:
  // `profilingTitle` must be a string literal ("collie:all_reduce"); `inputs` are
  // recorded with the profiler event; `outputs` are the Future's value.
  // `devices`: the CUDA device of a call on CUDA tensors (its Future's device), else none.
  // `started`: when the call was issued (its operations may have run before the work
  // was made); its duration counts from there.
  CollieWork(int rank, c10d::OpType type, const char* profilingTitle,
             c10::ArrayRef<at::Tensor> inputs, TensorLists outputs, uint64_t sequence,
             std::vector<c10::Device> devices = {},
             std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now());

  // A CPU call's Future is made when first asked for (most callers never do), already
  // completed when the work is; a device call's is made with the work.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  // With no timeout: the collie operations first, on this thread (see above).
  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override;
  std::vector<at::Tensor> result() override;
  int sourceRank() const override { return sourceRank_.load(); }
  uint64_t getSequencenumber() const override { return sequence_; }
  // Milliseconds from the call's issue (`started`) to its completion; throws before it
  // completed. Every call is timed: two clock reads.
  float getDuration() const override;
  // Unique in the process and never reused (the completion hooks name the work by it).
  uint64_t getCompletionKey() const override { return completionKey_; }

  void setSourceRank(int rank) { sourceRank_.store(rank); }
  // The collie operations behind the work, for wait(), and the queue it was pushed on
  // (`pushed`: when). Set once, before the work is handed to the caller.
  void setOps(OpList ops, std::shared_ptr<QueueLink> link,
              std::chrono::steady_clock::time_point pushed) {
    ops_ = std::move(ops);
    link_ = std::move(link);
    pushed_ = pushed;
  }
  // A thread is inside wait() for this CPU call's operations and will finish the call
  // (see above); cleared when it cannot.
  bool waiterInside() const { return waiterInside_.load(); }
  void clearWaiterInside() { waiterInside_.store(false); }
  bool onDevice() const { return !devices_.empty(); }
  // The event after a device call's work on its stream (see above). Set once: before
  // the work is handed to the caller, or for a send or receive of a coalesced batch at
  // endCoalescing (a wait() before that waits on the host, as for CPU tensors).
  void setDeviceEvent(std::shared_ptr<c10::Event> event) { deviceEvent_.store(std::move(event)); }
  // Completes the work once: success when `error` is null.
  void complete(std::exception_ptr error);

 private:
  // `profiled`: a profiler listens (at::hasCallbacks()), asked once per work.
  CollieWork(int rank, c10d::OpType type, const char* profilingTitle,
             c10::ArrayRef<at::Tensor> inputs, TensorLists outputs, uint64_t sequence,
             std::vector<c10::Device> devices, std::chrono::steady_clock::time_point started,
             bool profiled);
  std::vector<at::Tensor> firstOutputs() const;  // the output list, or none
  c10::intrusive_ptr<c10::ivalue::Future> makeFuture() const;
  // Marks `future` with this work's outputs, or sets `error`.
  void markFuture(c10::ivalue::Future& future, const std::exception_ptr& error) const;

  const TensorLists outputs_;
  const std::vector<c10::Device> devices_;
  OpList ops_;
  std::shared_ptr<QueueLink> link_;  // set with ops_
  std::chrono::steady_clock::time_point pushed_;
  std::atomic<bool> waiterInside_{false};
  std::atomic<std::shared_ptr<c10::Event>> deviceEvent_;
  std::mutex futureMutex_;  // guards the three below
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  bool completed_ = false;
  std::exception_ptr error_;
  std::atomic<int> sourceRank_{-1};
  const uint64_t sequence_;
  const uint64_t completionKey_;
  const std::chrono::steady_clock::time_point started_;
  std::atomic<float> durationMs_{-1.0f};  // set by complete()
};

// One torch.distributed call in flight: its collie operations, the copy-out to run
// after they all succeeded, and the tensors that must stay alive until then.
struct PendingCall {
  c10::intrusive_ptr<CollieWork> work;
  // Completed with `work` (the sends and receives of one coalesced batch).
  std::vector<c10::intrusive_ptr<CollieWork>> followers;
  OpList ops;
  // Runs on the completion thread once the ops succeeded (copies results out; a barrier
  // with a timeout waits here). May be empty; may throw: the work then fails, with the
  // message of a DistBackendError as is.
  std::function<void()> onSuccess;
  TensorList keepAlive;
  std::function<void()> cleanup;  // run once the ops ended, success or not; may be empty
  const char* what = "";          // a literal, "allreduce", ... for error messages
  // A deadline of the call's own (options timeout), and what to abort when it passed.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::chrono::milliseconds timeout{0};
  // Aborted when the deadline passed (a collective cannot be taken back half done).
  std::weak_ptr<collie::Communicator> abortOnTimeout;
  bool quiet = false;  // queued without waking the queue's thread (see above)
};

class CompletionQueue {
 public:
  // `hooks` (the backend's, which outlives the queue) hear of every call that completed
  // successfully, and of every failure before the call's work fails.
  CompletionQueue(int rank, BackendHooks& hooks);
  ~CompletionQueue();

  void push(PendingCall call);
  // This process's calls completed by push() on the calling thread, on a queue's thread,
  // and by their waiters (finishIfNext), so far (all queues).
  static uint64_t completedOnCaller();
  static uint64_t completedOnThread();
  static uint64_t completedByWaiter();
  // If `work`'s call is the oldest pending and the queue's thread has not taken it,
  // finishes it on the calling thread (its operations must have ended); else wakes the
  // queue's thread and clears the work's waiterInside(). Through the work's QueueLink.
  bool finishIfNext(CollieWork* work);
  // Waits until every pushed call completed or `timeout` passed; true when empty.
  bool drain(std::chrono::milliseconds timeout);
  // Finishes the calls still queued (their collie operations must be able to end,
  // e.g. because the communicator was destroyed) and joins the thread.
  void stop();

 private:
  void run();
  void finishCall(PendingCall& call);
  // The front call, unless a waiter is about to finish it (and the queue is not stopping).
  bool frontIsTakeable() const;

  static constexpr std::chrono::milliseconds kQuietTick{10};
  static constexpr std::chrono::seconds kQuietSpan{1};

  const int rank_;
  BackendHooks& hooks_;
  const std::shared_ptr<QueueLink> link_;  // also what is learnt of prompt waits
  std::mutex mutex_;
  // Two conditions, so that a call finished on the caller's thread wakes nobody: the
  // thread sleeps on `queued_` (notified only when a call is queued or on stop), drain()
  // on `drained_`. A needless wake-up of the thread is a context switch on a core another
  // rank of the host may be using (measured: ~10% of a small all_reduce's cycles).
  std::condition_variable queued_;
  std::condition_variable drained_;
  std::deque<PendingCall> queue_;
  size_t inFlight_ = 0;  // queued plus the one being finished
  bool stopping_ = false;
  bool sleepsForGood_ = false;  // the thread sleeps until notified
  std::chrono::steady_clock::time_point lastQuietPush_;
  std::thread thread_;
};

// Raises a c10::DistBackendError as an exception_ptr (Python sees
// torch.distributed.DistBackendError).
std::exception_ptr makeBackendError(const std::string& message);
// The errors of a call whose collie operation failed with `status`, or whose `timeout`
// (`whose`: "the timeout of its options", ...) passed, the communicator then aborted.
std::exception_ptr operationFailed(const std::string& what, int rank, const collie::Status& status);
std::exception_ptr operationTimedOut(const std::string& what, int rank,
                                     std::chrono::milliseconds timeout, const char* whose);

}  // namespace torch_collie
