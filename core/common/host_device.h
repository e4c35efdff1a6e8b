// COLLIE_HOST_DEVICE marks functions shared by the host kernels (kernels/cpu) and the
// CUDA kernels (kernels/cuda): `__host__ __device__` under nvcc, nothing elsewhere.
//
// COLLIE_FORCE_INLINE asks for inlining even across ISA boundaries (a function built for
// the baseline ISA inlined into an AVX2 clone), which the host loops rely on to vectorise.
#pragma once

#if defined(__CUDACC__)
#define COLLIE_HOST_DEVICE __host__ __device__
#define COLLIE_FORCE_INLINE __forceinline__
#else
#define COLLIE_HOST_DEVICE
#define COLLIE_FORCE_INLINE inline __attribute__((always_inline))
#endif
