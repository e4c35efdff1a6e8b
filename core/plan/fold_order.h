// FoldOrder: the order in which an all-reduce combines the ranks' values of an element.
//
// Floating-point sums round after every addition, so with three or more ranks the order
// decides the bits. Every rank gets the same bits whatever the order (one rank computes
// each final value and the others copy it, or every rank evaluates the same expression);
// the order decides which of the possible sums that is. The team's single-copy
// all-reduces (direct and cma, core/team/direct_share.h and cross_memory.h) follow the
// order of the schedule behind their team step, so that an all-reduce of a given size
// gives the same bits whichever of them or that schedule ran it: the engine times cma
// against the ring behind it and switches between them from call to call
// (core/engine/single_copy_choice.h), and registered and plain buffers take different
// single-copy paths.
//
// - Rank order (the board's, and the default): op(...op(op(x0, x1), x2)..., x(n-1)).
// - Ring order (ring all-reduce, core/plan/ring.cc): each element lies in a segment that
//   one ring position f starts with its own value; each next position applies op with
//   its own value first, as the executor's reduce steps do (dst = op(src, incoming)):
//   op(x(f-1), ... op(x(f+2), op(x(f+1), x(f)))), positions mod n. On one host a
//   position is its rank.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstddef>

namespace collie {

struct FoldOrder {
  // The ring's chunk (elements per segment of a round) and channels; 0: rank order.
  size_t ringChunkElems = 0;
  int ringChannels = 1;

  bool isRing() const { return ringChunkElems != 0; }
  static FoldOrder ring(size_t chunkElems, int channels) { return FoldOrder{chunkElems, channels}; }
};

// The elements [elem, end) of a ring all-reduce of `count` elements on `nranks`
// positions that lie in one segment, and the position `first` that starts their sums.
struct FoldRun {
  size_t end = 0;
  int first = 0;
};
// The run that element `elem` (< count) lies in; `fold` is a ring order.
FoldRun ringFoldRun(const FoldOrder& fold, size_t count, int nranks, size_t elem);

}  // namespace collie
