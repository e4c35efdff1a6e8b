// Topology: hosts, local ranks and the host-contiguous order from every rank's host id.
#include "core/comm/topology.h"

#include <gtest/gtest.h>

namespace collie {
namespace {

TEST(TopologyTest, BlockOrder) {
  const std::vector<std::string> ids = {"a", "a", "b", "b"};
  Topology t = Topology::make(2, ids, {"tcp", "tcp", "self", "shm"});
  EXPECT_EQ(t.nhosts(), 2);
  EXPECT_EQ(t.host(), 1);
  EXPECT_EQ(t.localRank(), 0);
  EXPECT_EQ(t.localSize(), 2);
  EXPECT_TRUE(t.uniform());
  EXPECT_EQ(t.hostContiguousOrder(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(t.describe(),
            "4 rank(s) on 2 host(s), 2 per host\n  host 0: ranks 0-1\n  host 1: ranks 2-3\n"
            "  rank 2: host 1, local rank 0 of 2; shm to 3; tcp to 0-1\n");
}

TEST(TopologyTest, CyclicOrderIsMadeContiguous) {
  // Slurm --distribution=cyclic on 3 hosts: rank r lives on host r % 3.
  const std::vector<std::string> ids = {"x", "y", "z", "x", "y", "z"};
  Topology t = Topology::make(4, ids);
  EXPECT_EQ(t.nhosts(), 3);
  EXPECT_EQ(t.hostOf(4), 1);
  EXPECT_EQ(t.ranksOn(1), (std::vector<int>{1, 4}));
  EXPECT_EQ(t.localRank(), 1);
  EXPECT_EQ(t.hostContiguousOrder(), (std::vector<int>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(t.describe(false), "  rank 4: host 1, local rank 1 of 2\n");
}

TEST(TopologyTest, HostsNumberedByLowestRankAndUneven) {
  const std::vector<std::string> ids = {"late", "early", "early", "late", "early"};
  Topology t = Topology::make(0, ids);
  EXPECT_EQ(t.hostOf(0), 0);  // "late" holds rank 0, so it is host 0
  EXPECT_EQ(t.ranksOn(1), (std::vector<int>{1, 2, 4}));
  EXPECT_FALSE(t.uniform());
  EXPECT_EQ(t.hostContiguousOrder(), (std::vector<int>{0, 3, 1, 2, 4}));
  EXPECT_NE(t.describe().find("5 rank(s) on 2 host(s), uneven"), std::string::npos);
}

TEST(TopologyTest, OneRank) {
  Topology t = Topology::make(0, {"only"}, {"self"});
  EXPECT_EQ(t.nranks(), 1);
  EXPECT_EQ(t.localSize(), 1);
  EXPECT_EQ(t.describe(),
            "1 rank(s) on 1 host(s)\n  host 0: ranks 0\n  rank 0: host 0, local rank 0 of 1\n");
}

}  // namespace
}  // namespace collie
