// Input of tests/cuda/check_ptx_vectors.sh: the reduce-copy kernel and its streaming
// form instantiated for a few types, compiled alone to PTX so that their bodies can be
// inspected.
#include "kernels/cuda/collective_kernels.cuh"

namespace collie::cuda {

template __global__ void reduceCopyKernel<float, SumOp<float>>(ReduceCopyArgs);
template __global__ void reduceCopyKernel<Half, SumOp<Half>>(ReduceCopyArgs);
template __global__ void reduceCopyKernel<int8_t, MaxOp<int8_t>>(ReduceCopyArgs);
template __global__ void streamingReduceCopyKernel<float, SumOp<float>>(ReduceCopyArgs);
template __global__ void streamingReduceCopyKernel<BFloat16, SumOp<BFloat16>>(ReduceCopyArgs);

}  // namespace collie::cuda
