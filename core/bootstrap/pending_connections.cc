#include "core/bootstrap/pending_connections.h"

#include <algorithm>

namespace collie {

PendingConnections::PendingConnections(size_t maxTotal, size_t maxPerSource,
                                       std::chrono::milliseconds grace)
    : maxTotal_(std::max<size_t>(maxTotal, 1)),
      maxPerSource_(std::max<size_t>(maxPerSource, 1)),
      grace_(grace) {}

PendingConnections::Admission PendingConnections::admit(uint64_t id, const std::string& source,
                                                        Clock::time_point now) {
  Admission admission;
  auto makeRoom = [&](std::map<uint64_t, Entry>::iterator victim) {
    if (now - victim->second.since < grace_) {
      admission.admitted = false;
      return false;
    }
    admission.evict.push_back(victim->first);
    remove(victim->first);
    return true;
  };
  while (countFrom(source) >= maxPerSource_) {
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [&](const auto& entry) { return entry.second.source == source; });
    if (!makeRoom(it)) return admission;
  }
  while (entries_.size() >= maxTotal_) {
    if (!makeRoom(entries_.begin())) return admission;
  }
  entries_.emplace(id, Entry{source, now});
  ++perSource_[source];
  return admission;
}

void PendingConnections::remove(uint64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  auto count = perSource_.find(it->second.source);
  if (--count->second == 0) perSource_.erase(count);
  entries_.erase(it);
}

std::optional<uint64_t> PendingConnections::oldest() const {
  if (entries_.empty()) return std::nullopt;
  return entries_.begin()->first;
}

size_t PendingConnections::countFrom(const std::string& source) const {
  auto it = perSource_.find(source);
  return it == perSource_.end() ? 0 : it->second;
}

}  // namespace collie
