// Splitting element ranges among channels, rounds and ring segments. Every rank
// computes the same split, so peers agree on every message's size without talking.
#pragma once

#include <cstddef>

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

}  // namespace collie
