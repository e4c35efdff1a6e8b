// Tree schedules: double binary tree all-reduce, binary tree broadcast and reduce.
//
// All-reduce: each channel's elements are cut in two halves, half t travelling on
// tree t of doubleBinaryTree(). Each half is cut into K chunks. For chunk k, a node
// reduces its children's partial results into its own input ("up") and sends that to
// its parent; the root of the tree computes the final value (divided for avg) and
// sends it down, each node forwarding it to its children ("down"). Every final value
// is computed by one rank and copied everywhere else, so all ranks end with identical
// bytes. Partial results live in the output buffer, where the final value later lands.
//
// Order of steps (the same on every rank, which is what makes it deadlock-free):
// iteration i runs up(tree 0, chunk i), up(tree 1, chunk i), then down(tree 0, chunk
// i - L), down(tree 1, chunk i - L). Every receive of a step labelled (phase, tree,
// chunk) waits only for a send of a step with the same label on a neighbour, and
// within one label messages flow only up (or only down) one tree, so the rank that is
// first in label order can always progress. Between two ranks there is at most one
// message per label and direction, so per-connection FIFO order matches too. The lag
// L lets the up phase run ahead of the down phase by about one tree round trip, so
// both directions of every link stay busy.
#include "core/plan/tree.h"

#include "core/plan/partition.h"

namespace collie {
namespace {

std::vector<int> childrenOf(const TreeNode& node) {
  std::vector<int> out;
  for (int child : node.children) {
    if (child >= 0) out.push_back(child);
  }
  return out;
}

// Up: output[range] = op(input, children's partials), sent to the parent (or final at
// the root).
void appendUp(const TreeNode& node, Range range, size_t es, int divisor, std::vector<Step>* steps) {
  const uint64_t offset = range.begin * es;
  const uint64_t bytes = range.count * es;
  const Slice input{BufferId::kInput, offset};
  const Slice output{BufferId::kOutput, offset};
  const std::vector<int> children = childrenOf(node);
  if (children.empty()) {
    steps->push_back(makeStep(StepKind::kSend, node.parent, -1, input, Slice{}, bytes));
    return;
  }
  for (size_t j = 0; j < children.size(); ++j) {
    const bool last = j + 1 == children.size();
    const Slice src = j == 0 ? input : output;
    if (last && node.parent >= 0) {
      steps->push_back(
          makeStep(StepKind::kRecvReduceSend, node.parent, children[j], src, output, bytes));
    } else {
      Step step = makeStep(StepKind::kRecvReduceCopy, -1, children[j], src, output, bytes);
      if (last) step.divisor = divisor;  // the root's final value
      steps->push_back(step);
    }
  }
}

// Down: the final output[range] arrives from the parent (the root has it) and goes to
// the children.
void appendDown(const TreeNode& node, Range range, size_t es, Slice rootSource,
                std::vector<Step>* steps) {
  const uint64_t bytes = range.count * es;
  const Slice output{BufferId::kOutput, range.begin * es};
  const std::vector<int> children = childrenOf(node);
  size_t sent = 0;
  if (node.parent >= 0) {
    if (children.empty()) {
      steps->push_back(makeStep(StepKind::kRecv, -1, node.parent, Slice{}, output, bytes));
      return;
    }
    steps->push_back(
        makeStep(StepKind::kRecvCopySend, children[0], node.parent, Slice{}, output, bytes));
    sent = 1;
  }
  const Slice source = node.parent >= 0 ? output : rootSource;
  for (; sent < children.size(); ++sent) {
    steps->push_back(makeStep(StepKind::kSend, children[sent], -1, source, Slice{}, bytes));
  }
}

}  // namespace

TreeNode binaryTree(int nranks, int rank) {
  TreeNode node;
  int bit = 1;
  while (bit < nranks && (bit & rank) == 0) bit <<= 1;
  if (rank == 0) {
    if (nranks > 1) node.children[0] = bit >> 1;
    return node;
  }
  int up = (rank ^ bit) | (bit << 1);
  if (up >= nranks) up = rank ^ bit;
  node.parent = up;
  int low = bit >> 1;
  if (low == 0) return node;  // odd ranks are leaves
  node.children[0] = rank - low;
  while (low > 0 && rank + low >= nranks) low >>= 1;
  if (low > 0) node.children[1] = rank + low;
  return node;
}

TreeNode rootedBinaryTree(int nranks, int rank, int root) {
  auto toVirtual = [&](int r) { return (r - root + nranks) % nranks; };
  auto toReal = [&](int v) { return v < 0 ? -1 : (v + root) % nranks; };
  TreeNode node = binaryTree(nranks, toVirtual(rank));
  node.parent = toReal(node.parent);
  for (int& child : node.children) child = toReal(child);
  if (node.children[0] > node.children[1] && node.children[1] >= 0) {
    std::swap(node.children[0], node.children[1]);
  }
  return node;
}

std::array<TreeNode, 2> doubleBinaryTree(int nranks, int rank) {
  std::array<TreeNode, 2> trees;
  trees[0] = binaryTree(nranks, rank);
  // Odd n: shift by one; even n: mirror. Both map the tree onto itself relabelled.
  auto toVirtual = [&](int r) { return nranks % 2 ? (r - 1 + nranks) % nranks : nranks - 1 - r; };
  auto toReal = [&](int v) {
    if (v < 0) return -1;
    return nranks % 2 ? (v + 1) % nranks : nranks - 1 - v;
  };
  TreeNode mirrored = binaryTree(nranks, toVirtual(rank));
  trees[1].parent = toReal(mirrored.parent);
  trees[1].children = {toReal(mirrored.children[0]), toReal(mirrored.children[1])};
  return trees;
}

int treeDepth(int nranks) {
  int depth = 0;
  while ((1 << depth) < nranks) ++depth;
  return depth;
}

void planTreeAllReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule) {
  const int n = params.nranks;
  const size_t es = dataTypeSize(args.dtype);
  const int divisor = args.op == ReduceOp::kAvg ? n : 0;
  const std::array<TreeNode, 2> trees = doubleBinaryTree(n, params.rank);
  const size_t lag = 2 * static_cast<size_t>(treeDepth(n)) + 2;
  for (int c = 0; c < params.nchannels; ++c) {
    std::vector<Step>& steps = schedule->channels[c];
    const Range channel = splitEven(0, args.count, params.nchannels, c);
    const Range halves[2] = {splitEven(channel.begin, channel.count, 2, 0),
                             splitEven(channel.begin, channel.count, 2, 1)};
    const size_t chunks = ceilDiv(halves[0].count, chunkElems);  // half 0 is the larger
    auto chunk = [&](int t, size_t k) {
      return splitEven(halves[t].begin, halves[t].count, chunks, k);
    };
    for (size_t i = 0; i < chunks + lag; ++i) {
      for (int t = 0; t < 2 && i < chunks; ++t) {
        Range range = chunk(t, i);
        if (range.count > 0) appendUp(trees[t], range, es, divisor, &steps);
      }
      for (int t = 0; t < 2 && i >= lag; ++t) {
        Range range = chunk(t, i - lag);
        if (range.count > 0) {
          appendDown(trees[t], range, es, Slice{BufferId::kOutput, range.begin * es}, &steps);
        }
      }
    }
  }
}

void planTreeBroadcast(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                       Schedule* schedule) {
  const TreeNode node = rootedBinaryTree(params.nranks, params.rank, args.root);
  const size_t es = dataTypeSize(args.dtype);
  for (int c = 0; c < params.nchannels; ++c) {
    std::vector<Step>& steps = schedule->channels[c];
    const Range channel = splitEven(0, args.count, params.nchannels, c);
    if (channel.count == 0) continue;
    if (node.parent < 0) {
      steps.push_back(makeStep(StepKind::kCopy, -1, -1, Slice{BufferId::kInput, channel.begin * es},
                               Slice{BufferId::kOutput, channel.begin * es}, channel.count * es));
    }
    for (size_t done = 0; done < channel.count; done += chunkElems) {
      Range range{channel.begin + done, std::min(chunkElems, channel.count - done)};
      appendDown(node, range, es, Slice{BufferId::kInput, range.begin * es}, &steps);
    }
  }
}

void planTreeReduce(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                    Schedule* schedule) {
  const int n = params.nranks;
  const TreeNode node = rootedBinaryTree(n, params.rank, args.root);
  const std::vector<int> children = childrenOf(node);
  const size_t es = dataTypeSize(args.dtype);
  const int divisor = args.op == ReduceOp::kAvg ? n : 0;
  const uint64_t slotBytes =
      std::min(chunkElems, ceilDiv(args.count, static_cast<size_t>(params.nchannels))) * es;
  for (int c = 0; c < params.nchannels; ++c) {
    std::vector<Step>& steps = schedule->channels[c];
    const Range channel = splitEven(0, args.count, params.nchannels, c);
    size_t k = 0;
    for (size_t done = 0; done < channel.count; done += chunkElems, ++k) {
      const size_t count = std::min(chunkElems, channel.count - done);
      const uint64_t offset = (channel.begin + done) * es;
      const Slice input{BufferId::kInput, offset};
      if (node.parent < 0) {
        // The root reduces into its output (which non-root ranks may not have).
        const Slice output{BufferId::kOutput, offset};
        if (children.empty()) {
          Step copy = makeStep(StepKind::kCopy, -1, -1, input, output, count * es);
          copy.divisor = divisor;
          steps.push_back(copy);
        }
        for (size_t j = 0; j < children.size(); ++j) {
          Step step = makeStep(StepKind::kRecvReduceCopy, -1, children[j], j == 0 ? input : output,
                               output, count * es);
          if (j + 1 == children.size()) step.divisor = divisor;
          steps.push_back(step);
        }
      } else if (children.empty()) {
        steps.push_back(makeStep(StepKind::kSend, node.parent, -1, input, Slice{}, count * es));
      } else {
        // Partials in scratch: slot 0 accumulates (never sent); slots 1 and 2 alternate
        // as the sent result, so chunk k + 1 need not wait for chunk k's send.
        const Slice accumulate{BufferId::kScratch, 0};
        const Slice sent{BufferId::kScratch, (1 + k % 2) * slotBytes};
        if (children.size() == 2) {
          steps.push_back(
              makeStep(StepKind::kRecvReduceCopy, -1, children[0], input, accumulate, count * es));
        }
        steps.push_back(makeStep(StepKind::kRecvReduceSend, node.parent, children.back(),
                                 children.size() == 2 ? accumulate : input, sent, count * es));
      }
    }
  }
  schedule->scratchBytesPerChannel = 3 * slotBytes;
}

}  // namespace collie
