// BackendHooks: how a backend reports completions and failures to torch: the completion
// and abort hooks torch registers on it (c10d/Hooks.hpp), and the kind of the first
// failure that broke the group's communicator (c10d::Backend::getError). torch's
// FlightRecorderHook, which torch attaches to every group of a backend that does not
// record itself (collie is one), is the hooks' user:
//   - a completion hook retires a recorded collective when it really finished, with its
//     duration, so a trace dump tells a finished collective ("completed") from one that
//     was issued and never finished. Without one, the recorder retires every entry at
//     issue, and a hung collective reads like a finished one;
//   - an abort hook dumps the trace (<TORCH_FR_DUMP_TEMP_FILE><rank>) when the backend
//     finds that a collective failed or timed out, before the error reaches the caller.
//
// Contract: completed() runs every completion hook once for a Work that finished
// successfully, after the Work is marked completed (so a consumer that registers the
// Work after the push and then asks isCompleted() misses nothing); failed and timed-out
// work fires no completion hook (Hooks.hpp: it must keep reading "not finished").
// failing() runs every abort hook; it is called each time a call is found failed or
// timed out, before the communicator is aborted and before the caller sees the error,
// so it may run several times for one failure (torch's hooks are idempotent). With the
// kind of failure that broke the communicator (a collie operation failed, or a call's
// deadline passed and the communicator was aborted) it also keeps that kind, the first
// one only, for error(): TIMEOUT, REMOTE_ERROR (a peer failed or left) or COMM_ERROR.
// A call that failed after collie's operations succeeded (a barrier's wait through the
// store, a copy-out) leaves the communicator whole and error() as it was. An exception
// a hook throws is reported on stderr and goes no further: hooks run where collie
// finishes a call (its completion thread, or the calling thread), and the call's own
// outcome must not change with them.
//
// Thread safety: every method may be called from any thread. Hooks run with no lock of
// this table held (a hook's owner may be unregistering it at that moment, from a thread
// that holds its own lock). A table with no hooks costs one relaxed atomic load per
// completion.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Hooks.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

#include "collie/status.h"

namespace torch_collie {

class BackendHooks {
 public:
  // Registration throws (RuntimeError) on an empty hook, an id already registered, or
  // an unregistration of an id that is not.
  void registerCompletion(int64_t id, c10d::CompletionHook hook);
  void unregisterCompletion(int64_t id);
  void registerAbort(int64_t id, c10d::AbortHook hook);
  void unregisterAbort(int64_t id);

  // `work` completed successfully (its completion key and duration are asked for only
  // when a completion hook is registered).
  void completed(const c10d::Work& work) const {
    if (hasCompletion_.load(std::memory_order_relaxed)) runCompletion(work);
  }
  // A call failed or timed out; `broke`: what broke the communicator, if it did.
  void failing(std::optional<c10d::ErrorType> broke) {
    if (broke) {
      c10d::ErrorType none = c10d::ErrorType::SUCCESS;
      error_.compare_exchange_strong(none, *broke);
    }
    if (hasAbort_.load(std::memory_order_relaxed)) runAbort();
  }
  // The kind of the first failure that broke the communicator; SUCCESS while none did.
  c10d::ErrorType error() const { return error_.load(); }
  // The kind a failed collie operation's `status` is.
  static c10d::ErrorType kindOf(const collie::Status& status);

 private:
  template <typename Hook>
  using Table = std::shared_ptr<const std::vector<std::pair<int64_t, Hook>>>;

  template <typename Hook>
  void add(Table<Hook>& table, std::atomic<bool>& any, int64_t id, Hook hook, const char* kind);
  template <typename Hook>
  void remove(Table<Hook>& table, std::atomic<bool>& any, int64_t id, const char* kind);
  void runCompletion(const c10d::Work& work) const;
  void runAbort() const;

  mutable std::mutex mutex_;  // guards the two tables; never held while a hook runs
  // Copied on write: a caller takes a reference under the lock and runs the hooks after.
  Table<c10d::CompletionHook> completion_;
  Table<c10d::AbortHook> abort_;
  std::atomic<bool> hasCompletion_{false};
  std::atomic<bool> hasAbort_{false};
  std::atomic<c10d::ErrorType> error_{c10d::ErrorType::SUCCESS};
};

}  // namespace torch_collie
