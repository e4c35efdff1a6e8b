// Helpers shared by the schedule generators: splitting element ranges among
// channels, rounds and segments (every rank computes the same split, so peers agree on
// every message's size without talking), ring arithmetic and step construction.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/plan/schedule.h"

namespace collie {

struct Range {
  size_t begin = 0;
  size_t count = 0;
};

// Part `index` of `parts` near-equal parts of [begin, begin + count): the first
// count % parts parts are one element larger.
inline Range splitEven(size_t begin, size_t count, size_t parts, size_t index) {
  size_t base = count / parts;
  size_t extra = count % parts;
  size_t offset = index * base + (index < extra ? index : extra);
  return Range{begin + offset, base + (index < extra ? 1 : 0)};
}

inline size_t ceilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

// Element `elem` of `buffer`, for elements of `elemSize` bytes.
inline Slice sliceAt(BufferId buffer, size_t elem, size_t elemSize) {
  return Slice{buffer, elem * elemSize};
}

// a mod n in [0, n), also for negative a (ring positions).
inline int mod(int a, int n) { return ((a % n) + n) % n; }

// The rank at ring position `position` (core/plan/layout.h): itself without a layout.
inline int rankAt(const PlanParams& params, int position) {
  return params.hosts ? params.hosts->order[position] : position;
}

inline Step makeStep(StepKind kind, int sendPeer, int recvPeer, Slice src, Slice dst,
                     uint64_t bytes) {
  Step step;
  step.kind = kind;
  step.sendPeer = sendPeer;
  step.recvPeer = recvPeer;
  step.src = src;
  step.dst = dst;
  step.bytes = bytes;
  return step;
}

}  // namespace collie
