// HostLayout: which host each rank is on, as the schedule generators see it (issue 24).
//
// Schedules are generated in ring positions, not rank numbers: position p is rank
// order[p], and order lists the ranks host after host (hosts in the order of their
// lowest rank, ranks ascending within a host; core/comm/topology.h's
// hostContiguousOrder()). A ring over positions therefore crosses between hosts once per
// host whatever the launcher's numbering (block or cyclic), and a tree over positions
// keeps each host's ranks in neighbouring subtrees. buildSchedule() plans in positions
// and maps every peer back to its rank (schedule.cc); blocks of reduce-scatter and
// all-gather stay where the caller's rank numbering puts them (rankAt()).
//
// Every rank derives the layout from the same host ids (exchanged at creation), so
// every rank plans with the same positions.
//
// Thread safety: immutable after make(); shared between schedules by shared_ptr.
#pragma once

#include <memory>
#include <vector>

namespace collie {

struct HostLayout {
  std::vector<int> order;     // position -> rank
  std::vector<int> position;  // rank -> position
  std::vector<int> hostOf;    // rank -> host (hosts numbered by lowest rank)
  int nhosts = 1;
  int localSize = 0;  // ranks per host when every host has as many, else 0

  // From each rank's host index (any non-negative labels; equal: same host).
  static HostLayout make(const std::vector<int>& hostOfRank);
  // Whether positions equal ranks (block numbering or one host).
  bool identity() const;
  // Hierarchical schedules need more than one host and as many ranks, more than one,
  // on each (then position = host * localSize + local rank).
  bool twoLevel() const { return nhosts > 1 && localSize > 1; }
};

using HostLayoutPtr = std::shared_ptr<const HostLayout>;

}  // namespace collie
