// core/kernel/device_memory.h for builds with CUDA: asks the CUDA runtime.
#include "core/kernel/device_memory.h"
#include "kernels/cuda/cuda_kernels.h"

namespace collie {

bool isDeviceMemory(const void* ptr) { return cuda::isDevicePointer(ptr); }
int cudaDeviceCount() { return cuda::deviceCount(); }

}  // namespace collie
