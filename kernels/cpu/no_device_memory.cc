// core/kernel/device_memory.h for builds without CUDA: every buffer is host memory.
#include "core/kernel/device_memory.h"

namespace collie {

bool isDeviceMemory(const void*) { return false; }
int cudaDeviceCount() { return 0; }

}  // namespace collie
