// Input of tests/cuda/check_ptx_vectors.sh: the reduce-copy kernel instantiated for a
// few types, compiled alone to PTX so that its body can be inspected.
#include "kernels/cuda/collective_kernels.cuh"

namespace collie::cuda {

template __global__ void reduceCopyKernel<float, SumOp<float>>(ReduceCopyArgs);
template __global__ void reduceCopyKernel<Half, SumOp<Half>>(ReduceCopyArgs);
template __global__ void reduceCopyKernel<int8_t, MaxOp<int8_t>>(ReduceCopyArgs);

}  // namespace collie::cuda
