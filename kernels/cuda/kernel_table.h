// Kernel selection: (DataType, ReduceOp) -> the instantiation of a kernel template of
// collective_kernels.cuh. Taking the addresses here is what instantiates every
// (type, op) pair, once, through templates (no code-generation macros): the CUDA
// build does it in cuda_kernels.cu, the emulation tests in their own translation unit.
//
// Contract: kernelFor<K>(dtype, op) returns the kernel of family K for that pair, or
// null for an invalid dtype/op or a bitwise op on a floating dtype. kAvg and kPreMulSum
// (whose factor the host applied before) select the SumOp kernel
// (the caller passes divisor = nranks on the final step). The grid sizes are in
// launch_geometry.h, which a translation unit includes alone when it needs no table (any
// unit that includes this header compiles every kernel of every family).
// Thread safety: pure functions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "collie/types.h"
#include "core/common/half.h"
#include "kernels/common/ops.h"
#include "kernels/cuda/board_kernel.cuh"
#include "kernels/cuda/collective_kernels.cuh"
#include "kernels/cuda/direct_kernel.cuh"
#include "kernels/cuda/launch_geometry.h"
#include "kernels/cuda/ring_program_kernel.cuh"
#include "kernels/cuda/scale_kernel.cuh"

namespace collie::cuda {

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) for the C++ type of dtype; returns f's result, or `fallback`.
template <typename F, typename R>
R visitDataType(DataType dtype, F&& f, R fallback) {
  switch (dtype) {
    case DataType::kInt8:
      return f(TypeTag<int8_t>{});
    case DataType::kUint8:
      return f(TypeTag<uint8_t>{});
    case DataType::kInt32:
      return f(TypeTag<int32_t>{});
    case DataType::kUint32:
      return f(TypeTag<uint32_t>{});
    case DataType::kInt64:
      return f(TypeTag<int64_t>{});
    case DataType::kUint64:
      return f(TypeTag<uint64_t>{});
    case DataType::kFloat16:
      return f(TypeTag<Half>{});
    case DataType::kFloat32:
      return f(TypeTag<float>{});
    case DataType::kFloat64:
      return f(TypeTag<double>{});
    case DataType::kBFloat16:
      return f(TypeTag<BFloat16>{});
  }
  return fallback;
}

// Kernel families: each names its function-pointer type and its instantiation.
struct ReduceCopyFamily {
  using Fn = void (*)(ReduceCopyArgs);
  template <typename T, typename Op>
  static Fn get() {
    return &reduceCopyKernel<T, Op>;
  }
};
struct StreamingReduceCopyFamily {
  using Fn = void (*)(ReduceCopyArgs);
  template <typename T, typename Op>
  static Fn get() {
    return &streamingReduceCopyKernel<T, Op>;
  }
};
struct RingReduceScatterFamily {
  using Fn = void (*)(DeviceReduceStep);
  template <typename T, typename Op>
  static Fn get() {
    return &ringReduceScatterStepKernel<T, Op>;
  }
};
struct BoardFamily {
  using Fn = void (*)(DeviceBoardStep);
  template <typename T, typename Op>
  static Fn get() {
    return &boardKernel<T, Op>;
  }
};
struct RingProgramFamily {
  using Fn = void (*)(DeviceRingProgram);
  template <typename T, typename Op>
  static Fn get() {
    return &ringProgramKernel<T, Op>;
  }
};
struct DirectFamily {
  using Fn = void (*)(DeviceDirectStep);
  template <typename T, typename Op>
  static Fn get() {
    return &directKernel<T, Op>;
  }
};
struct TreeReduceFamily {
  using Fn = void (*)(TreeReduceStep);
  template <typename T, typename Op>
  static Fn get() {
    return &treeReduceKernel<T, Op>;
  }
};

// The kernel of a bitwise op: integer types only, null for floating ones.
template <typename Family, typename T, template <typename> class Op>
typename Family::Fn integerKernel() {
  if constexpr (std::is_integral_v<T>) {
    return Family::template get<T, Op<T>>();
  } else {
    return nullptr;  // not defined on floating types; the API refuses it
  }
}

template <typename Family>
typename Family::Fn kernelFor(DataType dtype, ReduceOp op) {
  using Fn = typename Family::Fn;
  return visitDataType(
      dtype,
      [op](auto tag) -> Fn {
        using T = typename decltype(tag)::type;
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kAvg:
          case ReduceOp::kPreMulSum:  // its factor is applied before the steps (host path)
            return Family::template get<T, SumOp<T>>();
          case ReduceOp::kProd:
            return Family::template get<T, ProdOp<T>>();
          case ReduceOp::kMin:
            return Family::template get<T, MinOp<T>>();
          case ReduceOp::kMax:
            return Family::template get<T, MaxOp<T>>();
          case ReduceOp::kBand:
            return integerKernel<Family, T, BandOp>();
          case ReduceOp::kBor:
            return integerKernel<Family, T, BorOp>();
          case ReduceOp::kBxor:
            return integerKernel<Family, T, BxorOp>();
        }
        return nullptr;
      },
      Fn{nullptr});
}

// The board kernel of a step: all-gather moves bytes (whatever the dtype), the reducing
// kinds take kernelFor's (dtype, op) instantiation; null for a bad kind, dtype or op.
inline BoardFamily::Fn boardKernelFor(const DeviceBoardStep& step) {
  switch (step.kind) {
    case DeviceBoardKind::kAllGather:
      return BoardFamily::get<uint8_t, CopyOp<uint8_t>>();
    case DeviceBoardKind::kAllReduce:
    case DeviceBoardKind::kReduceScatter:
      return kernelFor<BoardFamily>(step.dtype, step.op);
    case DeviceBoardKind::kAllToAll:  // not a board collective
      break;
  }
  return nullptr;
}
// Threads per block of the board kernel (on the GPU; the emulation uses its own).
inline constexpr unsigned kBoardBlockThreads = 512;

// The ring program's kernel: kernelFor's (dtype, op) instantiation (its copies move
// elements of the collective's dtype); null for a bad dtype or op.
inline RingProgramFamily::Fn ringProgramKernelFor(const DeviceRingProgram& program) {
  return kernelFor<RingProgramFamily>(program.dtype, program.op);
}
// Threads per block of the ring program kernel (on the GPU; the emulation uses its own).
inline constexpr unsigned kRingBlockThreads = 512;

// The direct kernel of a step: all-gather and all-to-all move bytes (whatever the
// dtype), the reducing kinds take kernelFor's (dtype, op) instantiation; null for a bad
// kind, dtype or op.
inline DirectFamily::Fn directKernelFor(const DeviceDirectStep& step) {
  switch (step.kind) {
    case DeviceBoardKind::kAllGather:
    case DeviceBoardKind::kAllToAll:
      return DirectFamily::get<uint8_t, CopyOp<uint8_t>>();
    case DeviceBoardKind::kAllReduce:
    case DeviceBoardKind::kReduceScatter:
      return kernelFor<DirectFamily>(step.dtype, step.op);
  }
  return nullptr;
}
// Threads per block of the direct kernel (on the GPU; the emulation uses its own).
inline constexpr unsigned kDirectBlockThreads = 512;

// PREMUL_SUM's multiply for dtype (scale_kernel.cuh), or null for an invalid dtype.
using ScaleFn = void (*)(DeviceScaleStep);
inline ScaleFn scaleKernelFor(DataType dtype) {
  return visitDataType(
      dtype, [](auto tag) -> ScaleFn { return &scaleKernel<typename decltype(tag)::type>; },
      ScaleFn{nullptr});
}

}  // namespace collie::cuda
