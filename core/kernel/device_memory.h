// Which memory a buffer lives in: the question the communicator asks before it picks
// a path (host kernels and transports, or the CUDA path). Defined by the build:
// kernels/cuda/device_memory_cuda.cc when CUDA is built, kernels/cpu/no_device_memory.cc
// otherwise, so core never names the CUDA runtime.
//
// Contract: isDeviceMemory(p) is true when p points into CUDA device (or managed)
// memory of any device of this process; false for host memory, null, and in builds
// or on machines without CUDA (never an error). cudaDeviceCount() is 0 there.
// Thread safety: safe from any thread.
#pragma once

namespace collie {

bool isDeviceMemory(const void* ptr);
int cudaDeviceCount();

}  // namespace collie
