#include "core/bootstrap/pending_connections.h"

#include <algorithm>

namespace collie {

PendingConnections::PendingConnections(size_t maxTotal, size_t maxPerSource)
    : maxTotal_(std::max<size_t>(maxTotal, 1)), maxPerSource_(std::max<size_t>(maxPerSource, 1)) {}

std::vector<uint64_t> PendingConnections::admit(uint64_t id, const std::string& source) {
  std::vector<uint64_t> evict;
  while (countFrom(source) >= maxPerSource_) {
    auto it = std::find_if(sources_.begin(), sources_.end(),
                           [&](const auto& entry) { return entry.second == source; });
    evict.push_back(it->first);
    remove(it->first);
  }
  while (sources_.size() >= maxTotal_) {
    evict.push_back(sources_.begin()->first);
    remove(sources_.begin()->first);
  }
  sources_.emplace(id, source);
  ++perSource_[source];
  return evict;
}

void PendingConnections::remove(uint64_t id) {
  auto it = sources_.find(id);
  if (it == sources_.end()) return;
  auto count = perSource_.find(it->second);
  if (--count->second == 0) perSource_.erase(count);
  sources_.erase(it);
}

std::optional<uint64_t> PendingConnections::oldest() const {
  if (sources_.empty()) return std::nullopt;
  return sources_.begin()->first;
}

size_t PendingConnections::countFrom(const std::string& source) const {
  auto it = perSource_.find(source);
  return it == perSource_.end() ? 0 : it->second;
}

}  // namespace collie
