// PREMUL_SUM's multiply on the device (DeviceScaleStep of device_handles.h): every element
// times this rank's factor, with the rounding of ProdOp (kernels/common/ops.h), so the
// bytes equal the host backend's `scale`. 16-byte packs where source and destination
// are congruent modulo 16, element by element otherwise (byte loads where a pointer is
// not element-aligned); grid-stride loops, any grid covers any count.
// Thread safety: device code; threads touch disjoint elements.
#pragma once

#include <cstdint>

#include "kernels/common/ops.h"
#include "kernels/cuda/cuda_compat.h"
#include "kernels/cuda/device_handles.h"
#include "kernels/cuda/reduce_copy.cuh"

namespace collie::cuda {

template <typename T>
__device__ __forceinline__ T factorOf(uint64_t bits) {
  T value{};
  unsigned char* bytes = reinterpret_cast<unsigned char*>(&value);
  for (size_t i = 0; i < sizeof(T); ++i) bytes[i] = static_cast<unsigned char>(bits >> (8 * i));
  return value;
}

template <typename T>
__global__ void scaleKernel(const DeviceScaleStep args) {
  const uint64_t thread = gridThreadIndex();
  const uint64_t nthreads = gridThreadCount();
  const T factor = args.factorAt != nullptr
                       ? loadBytes<T>(static_cast<const unsigned char*>(args.factorAt))
                       : factorOf<T>(args.factor);
  const uint64_t count = args.count;
  const uintptr_t src = reinterpret_cast<uintptr_t>(args.src);
  const uintptr_t dst = reinterpret_cast<uintptr_t>(args.dst);
  const unsigned char* in = static_cast<const unsigned char*>(args.src);
  unsigned char* out = static_cast<unsigned char*>(args.dst);
  if (src % sizeof(T) != 0 || dst % sizeof(T) != 0) {
    for (uint64_t i = thread; i < count; i += nthreads) {
      storeBytes<T>(out + i * sizeof(T), ProdOp<T>()(loadBytes<T>(in + i * sizeof(T)), factor));
    }
    return;
  }
  const T* from = static_cast<const T*>(args.src);
  T* to = static_cast<T*>(args.dst);
  if (src % kPackBytes != dst % kPackBytes) {
    for (uint64_t i = thread; i < count; i += nthreads) to[i] = ProdOp<T>()(from[i], factor);
    return;
  }
  constexpr uint64_t kPerPack = kPackBytes / sizeof(T);
  const PackSplit split = splitIntoPacks<T>(count, src % kPackBytes);
  for (uint64_t j = thread; j < split.loose; j += nthreads) {
    const uint64_t i = split.index(j);
    to[i] = ProdOp<T>()(from[i], factor);
  }
  const uint4* packedIn = reinterpret_cast<const uint4*>(from + split.head);
  uint4* packedOut = reinterpret_cast<uint4*>(to + split.head);
  for (uint64_t p = thread; p < split.packs; p += nthreads) {
    Pack<T> pack;
    pack.vector = packedIn[p];
    for (uint64_t e = 0; e < kPerPack; ++e)
      pack.elements[e] = ProdOp<T>()(pack.elements[e], factor);
    packedOut[p] = pack.vector;
  }
}

}  // namespace collie::cuda
