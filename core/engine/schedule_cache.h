// ScheduleCache: the schedules a communicator built recently, bounded by their memory.
//
// A schedule is a pure function of its key (collective, count, dtype, op, root, peer) while
// the tuner's inputs stay (the planner clears the cache when they change), so it is built
// once and reused while it stays here. The cache holds at most `budgetBytes` of schedules (their
// steps, as estimated by scheduleBytes()) and evicts the least recently used first, so a program
// that cycles through many sizes (variable-length batches, a soak test) keeps a steady footprint
// instead of growing to a count-bounded high-water mark or dropping everything at once.
// A schedule larger than the whole budget is not kept.
//
// Thread safety: none; the engine calls it under its own mutex.
#pragma once

#include <cstddef>
#include <list>
#include <map>
#include <memory>
#include <tuple>

#include "core/plan/schedule.h"

namespace collie {

// (kind, count, dtype, op, root, peer)
using ScheduleKey = std::tuple<int, size_t, int, int, int, int>;

// Memory a schedule holds (its step vectors, by capacity) plus the cache's own
// bookkeeping for one entry.
size_t scheduleBytes(const Schedule& schedule);

class ScheduleCache {
 public:
  explicit ScheduleCache(size_t budgetBytes) : budget_(budgetBytes) {}

  // The schedule for `key`, marked most recently used, or nullptr.
  std::shared_ptr<const Schedule> find(const ScheduleKey& key);
  // Keeps `schedule` (replacing one under the same key), evicting the least recently
  // used until the total fits the budget.
  void insert(const ScheduleKey& key, std::shared_ptr<const Schedule> schedule);
  void clear();

  size_t size() const { return entries_.size(); }
  size_t bytes() const { return bytes_; }
  size_t budget() const { return budget_; }

 private:
  struct Entry {
    std::shared_ptr<const Schedule> schedule;
    size_t bytes = 0;
    std::list<ScheduleKey>::iterator use;  // position in uses_
  };
  void erase(std::map<ScheduleKey, Entry>::iterator it);

  size_t budget_;
  size_t bytes_ = 0;
  std::map<ScheduleKey, Entry> entries_;
  std::list<ScheduleKey> uses_;  // most recently used first
};

}  // namespace collie
