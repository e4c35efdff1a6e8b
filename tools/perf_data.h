// Deterministic inputs and exact expected outputs for `collie perf -c 1`.
//
// Every input element is a small integer chosen so that the exact result of every op
// stays representable in every dtype (sums stay <= 256 for nranks <= 256, products
// <= 64), so the expected result can be computed with integer math and converted to
// the dtype with the kernels' rules (half/bfloat16 round to nearest-even; avg is the
// sum divided by nranks: truncating for integers, in float32 for half/bfloat16/float,
// in double for double). Outputs are compared bit for bit.
// Pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collie/types.h"
#include "tools/perf_args.h"

namespace collie::tools {

// One rank's view of one checked run.
struct PerfCase {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int nranks = 1;
  int rank = 0;
  int root = 0;
  PerfShape shape;
};

// The integer that `rank` contributes at input element `index`.
int64_t inputValue(const PerfCase& c, int rank, size_t index);

// Writes the integer `value` as one element of `dtype` at `dst`.
void encodeValue(DataType dtype, int64_t value, void* dst);
// Writes the average of a sum over `nranks` ranks as one element of `dtype`.
void encodeAverage(DataType dtype, int64_t sum, int nranks, void* dst);

// Fills `count` elements of this rank's input, starting at input element `first`.
void fillInput(const PerfCase& c, void* dst, size_t first, size_t count);
// Fills `bytes` with the sentinel that marks "not written by the collective".
void fillSentinel(void* dst, size_t bytes);

// Number of elements of this rank's output (shape.recvElems elements; for reduce and gather only
// the root has an output) that differ from the exact expected result.
uint64_t countWrong(const PerfCase& c, const void* out);

}  // namespace collie::tools
