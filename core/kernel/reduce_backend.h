// The kernel seam: how bytes are reduced on the host.
//
// A ReduceBackend is a table of plain functions. Core calls them on host memory;
// which backend provides them (kernels/cpu today) is chosen by the build through the
// generated registerBuiltinKernels(), so core never names a kernel backend.
//
// Semantics (every dtype of types.h, every op):
//   reduce(dst, a, b, n, dtype, op, divisor):  dst[i] = op(a[i], b[i]) for i < n.
//     dst may alias a or b exactly (same pointer); no other overlap is allowed.
//     dst, a and b may lie at any byte address: UCX hands received fragments over just
//     after its headers, and users may pass buffers that are misaligned for dtype (NCCL
//     accepts them too). Aligned buffers take the fast paths.
//     kAvg accumulates like kSum; when divisor > 0 the result is then divided by
//     divisor (integers: truncating division of the sum; float16/bfloat16: the sum is
//     rounded to the type, then divided in float32 and rounded to nearest-even).
//   divide(dst, src, n, dtype, divisor): dst[i] = src[i] / divisor, same rules;
//     dst may alias src exactly; both may lie at any byte address. Used for kAvg where
//     no reduction happens (1 rank).
//     kPreMulSum reduces exactly like kSum: its factor is applied before, by scale().
//   scale(dst, src, scalar, n, dtype): dst[i] = src[i] * scalar for i < n, where scalar
//     points at one element of dtype (any byte address): kPreMulSum's multiply, with
//     kProd's rounding (integers wrap; float16/bfloat16 multiply in float and round once
//     to nearest-even; float/double one IEEE multiply). dst may alias src exactly; both
//     may lie at any byte address.
//   reduceFanOut(dsts, ndst, a, b, n, dtype, op, divisor): dsts[k][i] = op(a[i], b[i])
//     for every k < ndst, the same bits as reduce(). The outputs are written once and not
//     read soon (a single-copy all-reduce's outputs out of place, each read later by
//     another core): where the CPU has them, non-temporal stores that skip reading each
//     line first, ordered (store fence) before the call returns. No output may overlap
//     a, b or another output; any byte address (the fast path wants inputs aligned for
//     dtype and outputs equally aligned modulo 32).
// Thread safety: the functions are pure and reentrant.
#pragma once

#include <cstddef>

#include "collie/types.h"

namespace collie {

struct ReduceBackend {
  const char* name = nullptr;
  void (*reduce)(void* dst, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op,
                 int divisor) = nullptr;
  void (*divide)(void* dst, const void* src, size_t count, DataType dtype, int divisor) = nullptr;
  void (*scale)(void* dst, const void* src, const void* scalar, size_t count,
                DataType dtype) = nullptr;
  void (*reduceFanOut)(void* const* dsts, int ndst, const void* a, const void* b, size_t count,
                       DataType dtype, ReduceOp op, int divisor) = nullptr;
};

// The host backend chosen by the build. Never null in a working build.
const ReduceBackend& hostReduceBackend();

// Defined by the generated file kernels/builtin_kernels.cc: returns the host backend.
const ReduceBackend& builtinHostReduceBackend();

}  // namespace collie
