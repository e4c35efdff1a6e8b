// FailurePolicy: what one communicator does once a collective failed or it was
// aborted.
//
// The first failure is sticky: the connections may hold half a message, so every
// queued and later collective fails with the same error (prefixed by its own
// description) and failure() returns it from then on. giveUp() is the failure path of
// the thread that runs collectives (it holds the connections): it explains the error
// with what the peer at fault left on the FailureReasons (so that every rank of a failed
// job names the same root cause), makes it the sticky failure, publishes it for the
// peers, has the caller close every connection (which makes the peers fail at once
// instead of at their timeout) and marks the communicator closed. abort() raises the
// abort flag, which running collectives check on every turn, and makes Aborted the
// sticky failure; waitClosed() lets abort() return once the connections are closed.
// Store requests are bounded (kPublishWait, kLookupWait), so a dead store never holds
// the failure path long.
//
// Thread safety: every method may be called from any thread; giveUp() only from the
// one thread that holds the connections at that time. failing() and the abort flag
// are lock-free (the inline fast path reads them); the rest takes one mutex, which
// giveUp() does not hold while it talks to the store or closes connections.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>

#include "core/engine/failure_reasons.h"

namespace collie {

class FailurePolicy {
 public:
  // How long a failing rank waits for the store to take its reason, and how long a
  // rank waits for a peer's reason.
  static constexpr std::chrono::milliseconds kPublishWait{300};
  static constexpr std::chrono::milliseconds kLookupWait{200};

  // `reasons` may be null: failures are then not explained across ranks.
  FailurePolicy(int rank, std::unique_ptr<FailureReasons> reasons);

  // The sticky failure: OK while healthy, else the first error (or Aborted).
  Status failure() const;
  // Whether a sticky failure is set (acquire; no lock).
  bool failing() const { return failing_.load(std::memory_order_acquire); }
  // Raised by abort(); what running collectives and the offload check.
  const std::atomic<bool>& abortFlag() const { return aborted_; }
  bool aborted() const { return aborted_.load(); }

  // Raises the abort flag and makes `reason` the sticky failure unless one is set.
  void abort(Status reason);

  // Closes after `status`, as described above; `close` receives the sticky failure and
  // must destroy the connections (and may write a post-mortem) before it returns. With
  // `publish` false (an idle communicator destroyed) nothing is logged or published.
  // Returns the error to give the failed collective: `status` explained. Once closed,
  // returns `status` unchanged and calls nothing.
  Status giveUp(Status status, bool publish, const std::function<void(const Status&)>& close);

  bool closed() const;
  // True once giveUp() closed the connections; false when `timeout` passed first.
  bool waitClosed(std::chrono::milliseconds timeout);

 private:
  const int rank_;
  const std::unique_ptr<FailureReasons> reasons_;
  mutable std::mutex mutex_;  // guards failed_ and closed_
  std::condition_variable closedCv_;
  Status failed_;
  bool closed_ = false;
  std::atomic<bool> failing_{false};  // failed_ is set
  std::atomic<bool> aborted_{false};
};

}  // namespace collie
