// The CUDA built-ins for kernel sources: the toolkit's headers under nvcc, the host
// emulation (kernels/cuda/emulation) under any other compiler. Kernel sources include
// this instead of cuda_runtime.h so that one source serves both.
#pragma once

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#else
#include "kernels/cuda/emulation/cuda_emulation.h"
#include "kernels/cuda/emulation/emulated_launch.h"
#endif

// COLLIE_UNROLL before a loop of constant trip count: unrolled by nvcc, so that indices
// into small arrays become constants and the arrays stay in registers. Nothing for the
// host emulation, where it changes no result.
// COLLIE_NO_UNROLL before a loop whose body inlines a whole reduce-copy: kept a loop,
// so that the body is compiled once.
#if defined(__CUDACC__)
#define COLLIE_UNROLL _Pragma("unroll")
#define COLLIE_NO_UNROLL _Pragma("unroll 1")
#else
#define COLLIE_UNROLL
#define COLLIE_NO_UNROLL
#endif
