// Topology: which ranks share a host, learned at creation from the host ids every rank
// published (core/comm/communicator_create.cc), and which transport joins this rank to each peer.
//
// Hosts are numbered in the order of their lowest rank; the ranks of a host are listed
// in ascending order, and a rank's local index is its place in that list, whatever the
// launcher's numbering (block or cyclic). hostContiguousOrder() lists all ranks host
// after host: an order in which rings and chains cross between hosts only once per
// host (issue 24 builds its schedules on it).
//
// Thread safety: immutable after make(); every method may be called from any thread.
#pragma once

#include <string>
#include <vector>

#include "core/plan/layout.h"

namespace collie {

class Topology {
 public:
  Topology() = default;
  // `hostIds[r]` is rank r's host id (equal ids: same host); `transportOfPeer[r]` the
  // transport serving rank r from this rank ("self" at `rank`; may be empty when not
  // known yet).
  static Topology make(int rank, const std::vector<std::string>& hostIds,
                       std::vector<std::string> transportOfPeer = {});

  int rank() const { return rank_; }
  int nranks() const { return static_cast<int>(hostOfRank_.size()); }
  int nhosts() const { return static_cast<int>(ranksOfHost_.size()); }
  int hostOf(int rank) const { return hostOfRank_[rank]; }
  const std::vector<int>& ranksOn(int host) const { return ranksOfHost_[host]; }
  // This rank's host, its index among that host's ranks, and how many ranks the host has.
  int host() const { return hostOfRank_[rank_]; }
  int localRank() const { return localRank_; }
  int localSize() const { return static_cast<int>(ranksOfHost_[host()].size()); }
  // Whether every host has the same number of ranks.
  bool uniform() const;
  // Every rank, host after host (hosts by lowest rank, ranks ascending in a host).
  std::vector<int> hostContiguousOrder() const;
  // The hosts as the schedules see them (core/plan/layout.h): that order and its inverse.
  HostLayout layout() const { return HostLayout::make(hostOfRank_); }
  // Text, one line each: the hosts with their ranks (when `withHosts`), then this
  // rank's host, local rank and the transports serving its peers.
  std::string describe(bool withHosts = true) const;

 private:
  int rank_ = 0;
  int localRank_ = 0;
  std::vector<int> hostOfRank_;
  std::vector<std::vector<int>> ranksOfHost_;
  std::vector<std::string> transportOfPeer_;
};

}  // namespace collie
