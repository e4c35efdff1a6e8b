// A minimal C++20 generator: a coroutine that co_yields values one at a time, pulled
// with next(). Lets a schedule generator stream the steps of one rank lazily (the
// simulator runs thousands of virtual ranks whose full schedules would not fit in
// memory) while buildSchedule() collects the same steps into a Schedule.
//
// Thread safety: a Generator is used by one thread at a time.
#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <utility>

namespace collie {

template <typename T>
class Generator {
 public:
  struct promise_type {
    std::optional<T> current;
    Generator get_return_object() {
      return Generator(std::coroutine_handle<promise_type>::from_promise(*this));
    }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    std::suspend_always yield_value(T value) {
      current = std::move(value);
      return {};
    }
    void return_void() {}
    void unhandled_exception() { std::terminate(); }
  };

  Generator() = default;
  Generator(Generator&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Generator& operator=(Generator&& other) noexcept {
    if (this != &other) {
      if (handle_) handle_.destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;
  ~Generator() {
    if (handle_) handle_.destroy();
  }

  // The next value, or false when the coroutine has finished.
  bool next(T* out) {
    if (!handle_ || handle_.done()) return false;
    handle_.resume();
    if (handle_.done()) return false;
    *out = std::move(*handle_.promise().current);
    return true;
  }

 private:
  explicit Generator(std::coroutine_handle<promise_type> handle) : handle_(handle) {}
  std::coroutine_handle<promise_type> handle_;
};

}  // namespace collie
