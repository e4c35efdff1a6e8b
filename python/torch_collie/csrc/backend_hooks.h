// BackendHooks: the completion and abort hooks torch registers on a backend
// (c10d/Hooks.hpp). torch's FlightRecorderHook, which torch attaches to every group of a
// backend that does not record itself (collie is one), is their user:
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
// failing() runs every abort hook; it is called each time a collective is found failed
// or timed out, before the communicator is aborted and before the caller sees the error,
// so it may run several times for one failure (torch's hooks are idempotent). An
// exception a hook throws is reported on stderr and goes no further: hooks run on the
// completion thread, where nothing could catch it.
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
#include <torch/csrc/distributed/c10d/Hooks.hpp>
#include <utility>
#include <vector>

namespace torch_collie {

class BackendHooks {
 public:
  // Registration throws (RuntimeError) on an empty hook, an id already registered, or
  // an unregistration of an id that is not.
  void registerCompletion(int64_t id, c10d::CompletionHook hook);
  void unregisterCompletion(int64_t id);
  void registerAbort(int64_t id, c10d::AbortHook hook);
  void unregisterAbort(int64_t id);

  // The Work with `completionKey` completed successfully after `durationMs`.
  void completed(uint64_t completionKey, float durationMs) const {
    if (hasCompletion_.load(std::memory_order_relaxed)) runCompletion(completionKey, durationMs);
  }
  // A collective failed or timed out.
  void failing() const {
    if (hasAbort_.load(std::memory_order_relaxed)) runAbort();
  }

 private:
  template <typename Hook>
  using Table = std::shared_ptr<const std::vector<std::pair<int64_t, Hook>>>;

  template <typename Hook>
  void add(Table<Hook>& table, std::atomic<bool>& any, int64_t id, Hook hook, const char* kind);
  template <typename Hook>
  void remove(Table<Hook>& table, std::atomic<bool>& any, int64_t id, const char* kind);
  void runCompletion(uint64_t completionKey, float durationMs) const;
  void runAbort() const;

  mutable std::mutex mutex_;  // guards the two tables; never held while a hook runs
  // Copied on write: a caller takes a reference under the lock and runs the hooks after.
  Table<c10d::CompletionHook> completion_;
  Table<c10d::AbortHook> abort_;
  std::atomic<bool> hasCompletion_{false};
  std::atomic<bool> hasAbort_{false};
};

}  // namespace torch_collie
