// Test support: whether to run the reduced test matrix. tests/sanitize/run.sh sets
// COLLIE_TEST_QUICK=1: the sanitizer runs keep every code path but fewer rank counts,
// sizes and iterations, while the unsanitized runs take the full matrix.
#pragma once

#include <cstdlib>

namespace collie::testing {

inline bool quickMatrix() {
  const char* value = std::getenv("COLLIE_TEST_QUICK");
  return value != nullptr && value[0] != '\0' && value[0] != '0';
}

}  // namespace collie::testing
