// Tree shapes and the scalable simulator: parent/child links agree, the two trees of
// the double binary tree complement each other, and ring and tree all-reduce at
// thousands of virtual ranks end with the exact sum on every rank.
#include "core/plan/tree.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/plan/schedule.h"
#include "core/sim/simulator.h"

namespace collie {
namespace {

// Every rank but the root has a parent that lists it as a child; the tree spans all.
void checkTree(int n, const std::vector<TreeNode>& nodes) {
  int roots = 0;
  for (int r = 0; r < n; ++r) {
    const TreeNode& node = nodes[r];
    if (node.parent < 0) {
      ++roots;
    } else {
      ASSERT_LT(node.parent, n);
      const TreeNode& parent = nodes[node.parent];
      EXPECT_TRUE(parent.children[0] == r || parent.children[1] == r)
          << "n=" << n << " rank " << r << " parent " << node.parent;
    }
    for (int child : node.children) {
      if (child >= 0) {
        EXPECT_EQ(nodes[child].parent, r) << "n=" << n << " rank " << r;
      }
    }
  }
  EXPECT_EQ(roots, 1) << "n=" << n;
  // Depth stays logarithmic.
  for (int r = 0; r < n; ++r) {
    int depth = 0;
    for (int at = r; nodes[at].parent >= 0; at = nodes[at].parent) ++depth;
    EXPECT_LE(depth, treeDepth(n) + 1) << "n=" << n << " rank " << r;
  }
}

TEST(TreeShape, BothTreesAreSpanningBinaryTrees) {
  for (int n = 1; n <= 300; ++n) {
    for (int t = 0; t < 2; ++t) {
      std::vector<TreeNode> nodes;
      for (int r = 0; r < n; ++r) nodes.push_back(doubleBinaryTree(n, r)[t]);
      checkTree(n, nodes);
    }
    for (int root : {0, n / 2, n - 1}) {
      std::vector<TreeNode> nodes;
      for (int r = 0; r < n; ++r) nodes.push_back(rootedBinaryTree(n, r, root));
      checkTree(n, nodes);
      EXPECT_LT(nodes[root].parent, 0);
    }
  }
}

TEST(TreeShape, NoRankIsInnerInBothTreesForEvenCounts) {
  for (int n = 2; n <= 256; n += 2) {
    for (int r = 0; r < n; ++r) {
      auto trees = doubleBinaryTree(n, r);
      EXPECT_FALSE(trees[0].childCount() > 0 && trees[1].childCount() > 0)
          << "n=" << n << " rank " << r << " is an inner node of both trees";
    }
  }
}

// All-reduce of random uint64 values (sum wraps): a missing or doubled contribution
// changes the result, so equality with the reference proves exactness.
void checkLargeAllReduce(int n, Algorithm algorithm, size_t count, size_t chunkBytes) {
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllReduce;
  args.count = count;
  args.dtype = DataType::kUint64;
  args.op = ReduceOp::kSum;
  PlanParams params;
  params.nranks = n;
  params.nchannels = 2;
  params.chunkBytes = chunkBytes;
  params.algorithm = algorithm;
  std::vector<SimulatedRank> ranks(n);
  std::vector<uint64_t> expected(count, 0);
  std::mt19937_64 rng(7);
  for (int r = 0; r < n; ++r) {
    std::vector<uint64_t> values(count);
    for (size_t i = 0; i < count; ++i) expected[i] += values[i] = rng();
    ranks[r].input.resize(count * 8);
    ranks[r].output.assign(count * 8, 0xEE);
    std::memcpy(ranks[r].input.data(), values.data(), count * 8);
  }
  SimulationStats stats;
  Status status = simulateCollective(args, params, &ranks, false, &stats);
  ASSERT_TRUE(status.isOk()) << status.toString();
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(0, std::memcmp(ranks[r].output.data(), expected.data(), count * 8))
        << algorithmName(algorithm) << " rank " << r;
  }
  EXPECT_GT(stats.steps, 0u);
}

TEST(LargeSimulation, TreeAllReduceOn4096Ranks) {
  checkLargeAllReduce(4096, Algorithm::kTree, 64, 128);
}

TEST(LargeSimulation, RingAllReduceOn1000Ranks) {
  checkLargeAllReduce(1000, Algorithm::kRing, 2000, 1024);
}

TEST(LargeSimulation, SizesOnlyRunCountsStepsOfRing) {
  CollectiveArgs args;
  args.kind = CollectiveKind::kAllReduce;
  args.count = 1 << 18;
  PlanParams params;
  params.nranks = 512;
  params.nchannels = 1;
  params.algorithm = Algorithm::kRing;
  SimulationStats stats;
  Status status = simulateCollective(args, params, nullptr, false, &stats);
  ASSERT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(stats.maxStepsOnOneRank, 2u * 512 - 1);  // one send, 2(n - 1) receives
}

}  // namespace
}  // namespace collie
