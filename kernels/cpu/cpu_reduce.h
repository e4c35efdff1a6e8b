// The host reduction backend: elementwise reduce and divide over host memory, for every
// DataType x ReduceOp, with the semantics of core/kernel/reduce_backend.h and the
// operators of kernels/common/ops.h.
//
// Variants: the same templates built twice, once for the baseline x86-64 ISA (SSE2) and
// once with AVX2+F16C (the AVX2 clone is used only when the CPU reports both). Every
// variant gives bit-identical results. Invalid dtype/op values abort (callers validate
// user input first; reaching the kernel with one is a bug in collie).
//
// Thread safety: the backends are immutable; their functions are pure and reentrant.
#pragma once

#include <span>

#include "core/kernel/reduce_backend.h"

namespace collie {

// The fastest variant this CPU can run.
const ReduceBackend& cpuReduceBackend();

// Every variant this CPU can run, baseline first (for tests and benchmarks).
std::span<const ReduceBackend* const> cpuReduceBackendVariants();

}  // namespace collie
