#include "backend_hooks.h"

#include <c10/util/Exception.h>

#include <exception>
#include <iostream>
#include <string>

namespace torch_collie {

namespace {

template <typename Hook>
using Hooks = std::vector<std::pair<int64_t, Hook>>;

template <typename Hook>
bool hasId(const std::shared_ptr<const Hooks<Hook>>& table, int64_t id) {
  if (!table) return false;
  for (const auto& [known, hook] : *table) {
    if (known == id) return true;
  }
  return false;
}

// The table with `hook` added, or without the hook of `id` (an empty hook).
template <typename Hook>
std::shared_ptr<const Hooks<Hook>> edited(const std::shared_ptr<const Hooks<Hook>>& table,
                                          int64_t id, Hook hook) {
  auto next = std::make_shared<Hooks<Hook>>();
  if (table) {
    for (const auto& entry : *table) {
      if (entry.first != id) next->push_back(entry);
    }
  }
  if (hook) next->emplace_back(id, std::move(hook));
  if (next->empty()) return nullptr;
  return next;
}

void reportHookError(const char* kind, const std::string& what) {
  std::cerr << "torch_collie: " << kind << " hook failed: " << what << "\n";
}

template <typename Run>
void guarded(const char* kind, Run&& run) {
  try {
    run();
  } catch (const std::exception& e) {
    reportHookError(kind, e.what());
  } catch (...) {
    reportHookError(kind, "an exception that is not a std::exception");
  }
}

}  // namespace

template <typename Hook>
void BackendHooks::add(Table<Hook>& table, std::atomic<bool>& any, int64_t id, Hook hook,
                       const char* kind) {
  TORCH_CHECK(hook, "collie: registering an empty ", kind, " hook (id ", id, ")");
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!hasId(table, id), "collie: ", kind, " hook id ", id, " is already registered");
  table = edited(table, id, std::move(hook));
  any.store(true, std::memory_order_relaxed);
}

template <typename Hook>
void BackendHooks::remove(Table<Hook>& table, std::atomic<bool>& any, int64_t id,
                          const char* kind) {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(hasId(table, id), "collie: no ", kind, " hook has id ", id);
  table = edited(table, id, Hook());
  any.store(table != nullptr, std::memory_order_relaxed);
}

void BackendHooks::registerCompletion(int64_t id, c10d::CompletionHook hook) {
  add(completion_, hasCompletion_, id, std::move(hook), "completion");
}

void BackendHooks::unregisterCompletion(int64_t id) {
  remove(completion_, hasCompletion_, id, "completion");
}

void BackendHooks::registerAbort(int64_t id, c10d::AbortHook hook) {
  add(abort_, hasAbort_, id, std::move(hook), "abort");
}

void BackendHooks::unregisterAbort(int64_t id) { remove(abort_, hasAbort_, id, "abort"); }

c10d::ErrorType BackendHooks::kindOf(const collie::Status& status) {
  switch (status.code()) {
    case collie::StatusCode::kTimeout:
      return c10d::ErrorType::TIMEOUT;
    case collie::StatusCode::kRemoteError:
      return c10d::ErrorType::REMOTE_ERROR;
    default:
      return c10d::ErrorType::COMM_ERROR;
  }
}

void BackendHooks::runCompletion(const c10d::Work& work) const {
  Table<c10d::CompletionHook> table;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    table = completion_;
  }
  if (!table) return;
  c10d::CompletionHookArgs args;
  args.completionKey = work.getCompletionKey();
  args.duration_ms = work.getDuration();
  for (const auto& [id, hook] : *table) guarded("completion", [&] { hook(args); });
}

void BackendHooks::runAbort() const {
  Table<c10d::AbortHook> table;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    table = abort_;
  }
  if (!table) return;
  for (const auto& [id, hook] : *table) guarded("abort", [&] { hook(); });
}

}  // namespace torch_collie
