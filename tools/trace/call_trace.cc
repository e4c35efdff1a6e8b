// The -finstrument-functions hooks and their per-thread buffers (call_trace.h). This
// file is compiled without instrumentation; everything it calls is marked or lies in
// uninstrumented libraries.
#include "tools/trace/call_trace.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace collie::trace {
namespace {

struct Event {
  const void* function;
  bool enter;
};

struct ThreadEvents {
  std::vector<Event> events;
};

std::atomic<bool> armed{false};
std::mutex threadsMutex;
std::vector<std::unique_ptr<ThreadEvents>>& allThreads() {
  static auto* threads = new std::vector<std::unique_ptr<ThreadEvents>>();
  return *threads;
}
thread_local ThreadEvents* thisThread = nullptr;

__attribute__((no_instrument_function)) void record(const void* function, bool enter) {
  if (!armed.load(std::memory_order_relaxed)) return;
  if (thisThread == nullptr) {
    auto events = std::make_unique<ThreadEvents>();
    events->events.reserve(1 << 16);
    std::lock_guard<std::mutex> lock(threadsMutex);
    thisThread = events.get();
    allThreads().push_back(std::move(events));
  }
  thisThread->events.push_back(Event{function, enter});
}

}  // namespace

void arm() { armed.store(true, std::memory_order_release); }
void disarm() { armed.store(false, std::memory_order_release); }

bool writeEvents(const std::string& path) {
  FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) return false;
  std::map<const void*, std::pair<std::string, uintptr_t>> located;
  std::lock_guard<std::mutex> lock(threadsMutex);
  int thread = 0;
  for (auto& events : allThreads()) {
    if (events->events.empty()) continue;
    for (const Event& event : events->events) {
      auto found = located.find(event.function);
      if (found == located.end()) {
        Dl_info info{};
        std::pair<std::string, uintptr_t> where{"?", reinterpret_cast<uintptr_t>(event.function)};
        if (dladdr(event.function, &info) != 0 && info.dli_fname != nullptr) {
          where = {info.dli_fname, reinterpret_cast<uintptr_t>(event.function) -
                                       reinterpret_cast<uintptr_t>(info.dli_fbase)};
        }
        found = located.emplace(event.function, where).first;
      }
      std::fprintf(out, "%d %c %s %lx\n", thread, event.enter ? 'e' : 'x',
                   found->second.first.c_str(), static_cast<unsigned long>(found->second.second));
    }
    events->events.clear();
    ++thread;
  }
  return std::fclose(out) == 0;
}

}  // namespace collie::trace

extern "C" {
__attribute__((no_instrument_function)) void __cyg_profile_func_enter(void* function, void*) {
  collie::trace::record(function, true);
}
__attribute__((no_instrument_function)) void __cyg_profile_func_exit(void* function, void*) {
  collie::trace::record(function, false);
}
}
