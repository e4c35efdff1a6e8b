// RingQueue<T>: a FIFO queue over a power-of-two array that grows by doubling only when
// full, so steady-state push/pop never allocates. Not thread-safe.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace collie::tcp {

template <typename T>
class RingQueue {
 public:
  explicit RingQueue(size_t capacity = 64) {
    size_t c = 1;
    while (c < capacity) c <<= 1;
    slots_.resize(c);
  }
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  T& front() { return slots_[head_]; }
  T& operator[](size_t i) { return slots_[(head_ + i) & (slots_.size() - 1)]; }
  void pushBack(T value) {
    if (count_ == slots_.size()) grow();
    slots_[(head_ + count_) & (slots_.size() - 1)] = std::move(value);
    ++count_;
  }
  void popFront() {
    head_ = (head_ + 1) & (slots_.size() - 1);
    --count_;
  }
  void clear() {
    head_ = 0;
    count_ = 0;
  }

 private:
  void grow() {
    std::vector<T> bigger(slots_.size() * 2);
    for (size_t i = 0; i < count_; ++i) bigger[i] = std::move((*this)[i]);
    slots_.swap(bigger);
    head_ = 0;
  }
  std::vector<T> slots_;
  size_t head_ = 0;
  size_t count_ = 0;
};

}  // namespace collie::tcp
