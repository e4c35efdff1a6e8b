#include "core/engine/schedule_cache.h"

#include <utility>

namespace collie {
namespace {

// A map node, a list node and the shared_ptr control block, roughly.
constexpr size_t kEntryOverheadBytes = 192;

}  // namespace

size_t scheduleBytes(const Schedule& schedule) {
  size_t bytes = sizeof(Schedule) + kEntryOverheadBytes +
                 schedule.channels.capacity() * sizeof(std::vector<Step>);
  for (const std::vector<Step>& steps : schedule.channels) {
    bytes += steps.capacity() * sizeof(Step);
  }
  return bytes;
}

std::shared_ptr<const Schedule> ScheduleCache::find(const ScheduleKey& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  uses_.splice(uses_.begin(), uses_, it->second.use);
  return it->second.schedule;
}

void ScheduleCache::insert(const ScheduleKey& key, std::shared_ptr<const Schedule> schedule) {
  auto existing = entries_.find(key);
  if (existing != entries_.end()) erase(existing);
  const size_t bytes = scheduleBytes(*schedule);
  if (bytes > budget_) return;
  while (bytes_ + bytes > budget_ && !uses_.empty()) erase(entries_.find(uses_.back()));
  uses_.push_front(key);
  entries_.emplace(key, Entry{std::move(schedule), bytes, uses_.begin()});
  bytes_ += bytes;
}

void ScheduleCache::clear() {
  entries_.clear();
  uses_.clear();
  bytes_ = 0;
}

void ScheduleCache::erase(std::map<ScheduleKey, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  uses_.erase(it->second.use);
  entries_.erase(it);
}

}  // namespace collie
