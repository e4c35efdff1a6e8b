// collie perf's view of float16/bfloat16: raw bit patterns, converted with the very
// routines the kernels use (core/common/half.h), so the checker and the kernels
// round identically.
#pragma once

#include <cstdint>

#include "core/common/half.h"

namespace collie::tools {

inline uint16_t floatToHalf(float f) { return collie::floatToHalf(f).bits; }
inline float halfToFloat(uint16_t h) { return collie::halfToFloat(collie::Half{h}); }
inline uint16_t floatToBFloat16(float f) { return collie::floatToBFloat16(f).bits; }
inline float bfloat16ToFloat(uint16_t b) { return collie::bfloat16ToFloat(collie::BFloat16{b}); }

}  // namespace collie::tools
