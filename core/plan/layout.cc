#include "core/plan/layout.h"

#include <map>

namespace collie {

HostLayout HostLayout::make(const std::vector<int>& hostOfRank) {
  HostLayout layout;
  const int n = static_cast<int>(hostOfRank.size());
  std::map<int, int> index;  // label -> host, in order of the lowest rank
  std::vector<std::vector<int>> ranksOf;
  layout.hostOf.resize(n);
  for (int r = 0; r < n; ++r) {
    auto [it, added] = index.emplace(hostOfRank[r], static_cast<int>(ranksOf.size()));
    if (added) ranksOf.emplace_back();
    ranksOf[it->second].push_back(r);
    layout.hostOf[r] = it->second;
  }
  layout.nhosts = static_cast<int>(ranksOf.size());
  layout.localSize = ranksOf.empty() ? 0 : static_cast<int>(ranksOf[0].size());
  layout.position.resize(n);
  for (const std::vector<int>& ranks : ranksOf) {
    if (static_cast<int>(ranks.size()) != layout.localSize) layout.localSize = 0;
    for (int r : ranks) {
      layout.position[r] = static_cast<int>(layout.order.size());
      layout.order.push_back(r);
    }
  }
  return layout;
}

bool HostLayout::identity() const {
  for (int p = 0; p < static_cast<int>(order.size()); ++p) {
    if (order[p] != p) return false;
  }
  return true;
}

}  // namespace collie
