// Test support: how much of the test matrix to run.
//
// quickMatrix(): tests/sanitize/run.sh sets COLLIE_TEST_QUICK=1. The sanitizer runs keep
// every code path but fewer rank counts, sizes and iterations, while the unsanitized
// runs take the full matrix.
//
// kThreadSanitized: the test binary is built with ThreadSanitizer, where every access is
// checked and collectives run 5-15x slower. There the dtype x op product of the
// collective tests adds no thread interplay (the schedule, the transports and the
// synchronisation do not depend on the op), so each dtype runs one op, cycling through
// all of them (sampledOp). The unsanitized and ASan runs check every pair up to 4 ranks.
#pragma once

#include <cstdlib>

#include "collie/types.h"
#include "support/sanitizers.h"

namespace collie::testing {

inline bool quickMatrix() {
  const char* value = std::getenv("COLLIE_TEST_QUICK");
  return value != nullptr && value[0] != '\0' && value[0] != '0';
}

inline constexpr bool kThreadSanitized = COLLIE_TEST_TSAN;

// Whether a reducing collective test of `nranks` ranks runs `op` on `dtype` (both as
// enum indexes): every pair the op is defined on up to 4 ranks; above 4 ranks, and at
// any rank count under ThreadSanitizer, one op per dtype, cycling through the ops the
// dtype has (floating types have no bitwise ones). The kernels do not depend on the rank
// count and 1..4 ranks check every pair against the same float64 reference; what more
// ranks add is schedule shapes (odd counts, deeper trees, more chunks), which one op
// per dtype exercises as well as all of them. (Alone this saved little time: the large
// count's buffers, not the ops, dominate the many-rank cases.)
// In the quick matrix the bitwise ops run on int32 only: their kernels are the same
// loop for every integer width (the unsanitized run covers each width).
inline bool sampledOp(int dtype, int op, int nranks) {
  const auto type = static_cast<DataType>(dtype);
  const auto reduceOp = static_cast<ReduceOp>(op);
  if (!isValidFor(reduceOp, type)) return false;
  // premulsum needs a scalar per rank: tests/threads/premul_test.cc covers it.
  if (reduceOp == ReduceOp::kPreMulSum) return false;
  if (kThreadSanitized || nranks > 4) {
    const int ops = static_cast<int>(isFloating(type) ? ReduceOp::kBand : ReduceOp::kPreMulSum);
    return op == (dtype + nranks) % ops;
  }
  return !(quickMatrix() && isBitwise(reduceOp) && type != DataType::kInt32);
}

}  // namespace collie::testing
