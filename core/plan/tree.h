// Tree schedules (tree.cc) and their shapes, for the schedules and for tools that draw or
// check them.
//
// planTree*() append rank params.rank's steps to schedule->channels (already sized to
// params.nchannels): the double binary tree all-reduce, and binary tree broadcast and
// reduce rooted at args.root. Arguments are already validated.
//
// binaryTree() is NCCL's in-order binary tree over ranks 0..n-1 rooted at 0: rank 0
// has one child (the largest power of two below n), every other rank's parent and
// children follow from its lowest set bit, so odd ranks are leaves and the depth is
// about log2(n). doubleBinaryTree() returns that tree and a complementary one: for
// even n the mirror image (rank r plays n-1-r), for odd n the tree shifted by one
// (rank r plays r-1). In the complement the leaves of the first tree are inner nodes
// and vice versa, so when each tree carries half the data every rank sends and
// receives about the same number of bytes.
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstddef>

#include "core/plan/schedule.h"

namespace collie {

struct TreeNode {
  int parent = -1;                      // -1 at the root
  std::array<int, 2> children{-1, -1};  // -1 where absent; children[0] < children[1]
  int childCount() const { return (children[0] >= 0) + (children[1] >= 0); }
};

// `rank`'s place in the binary tree over [0, nranks) rooted at 0. nranks >= 1.
TreeNode binaryTree(int nranks, int rank);

// The same tree rooted at `root` (ranks relabelled by (rank - root) mod nranks).
TreeNode rootedBinaryTree(int nranks, int rank, int root);

// `rank`'s place in both trees of the double binary tree.
std::array<TreeNode, 2> doubleBinaryTree(int nranks, int rank);

// Number of levels of binaryTree(nranks) below the root: ceil(log2(nranks)).
int treeDepth(int nranks);

void planTreeAllReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule);
void planTreeBroadcast(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule);
void planTreeReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                    Schedule* schedule);

}  // namespace collie
