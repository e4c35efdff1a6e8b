#include "core/comm/topology.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace collie {
namespace {

// "0-3,8,10-11" for a sorted list.
std::string rankList(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out << ",";
    out << ranks[i];
    if (j > i) out << "-" << ranks[j];
    i = j + 1;
  }
  return out.str();
}

}  // namespace

Topology Topology::make(int rank, const std::vector<std::string>& hostIds,
                        std::vector<std::string> transportOfPeer) {
  Topology topology;
  topology.rank_ = rank;
  topology.hostOfRank_.assign(hostIds.size(), -1);
  std::map<std::string, int> hostIndex;  // id -> index, in order of the lowest rank
  for (size_t r = 0; r < hostIds.size(); ++r) {
    auto [it, added] = hostIndex.emplace(hostIds[r], static_cast<int>(hostIndex.size()));
    if (added) topology.ranksOfHost_.emplace_back();
    topology.hostOfRank_[r] = it->second;
    topology.ranksOfHost_[it->second].push_back(static_cast<int>(r));
  }
  const std::vector<int>& mine = topology.ranksOfHost_[topology.hostOfRank_[rank]];
  topology.localRank_ = static_cast<int>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
  topology.transportOfPeer_ = std::move(transportOfPeer);
  return topology;
}

bool Topology::uniform() const {
  for (const std::vector<int>& ranks : ranksOfHost_) {
    if (ranks.size() != ranksOfHost_[0].size()) return false;
  }
  return true;
}

std::vector<int> Topology::hostContiguousOrder() const { return layout().order; }

std::string Topology::describe(bool withHosts) const {
  std::ostringstream out;
  if (withHosts) {
    out << nranks() << " rank(s) on " << nhosts() << " host(s)";
    if (nhosts() > 1) {
      out << (uniform() ? ", " + std::to_string(localSize()) + " per host" : ", uneven");
    }
    out << "\n";
    for (int h = 0; h < nhosts(); ++h) {
      out << "  host " << h << ": ranks " << rankList(ranksOfHost_[h]) << "\n";
    }
  }
  out << "  rank " << rank_ << ": host " << host() << ", local rank " << localRank_ << " of "
      << localSize();
  // Peers grouped by the transport that serves them.
  std::map<std::string, std::vector<int>> byTransport;
  for (int peer = 0; peer < static_cast<int>(transportOfPeer_.size()); ++peer) {
    if (peer != rank_ && !transportOfPeer_[peer].empty())
      byTransport[transportOfPeer_[peer]].push_back(peer);
  }
  for (const auto& [name, peers] : byTransport) out << "; " << name << " to " << rankList(peers);
  out << "\n";
  return out.str();
}

}  // namespace collie
