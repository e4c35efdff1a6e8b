// Small helpers of the Communicator's argument checks, shared by the files that check
// the exchanges (exchange.cc) and the kinds with a count per rank (uneven.cc).
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collie/status.h"

namespace collie {

// InvalidArgument "<what> on rank <rank>: <why>".
inline Status refusedArgument(const char* what, int rank, const std::string& why) {
  return invalidArgument(std::string(what) + " on rank " + std::to_string(rank) + ": " + why);
}

// Whether [a, a + aBytes) and [b, b + bBytes) share a byte.
inline bool rangesOverlap(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return aBytes > 0 && bBytes > 0 && x < y + bBytes && y < x + aBytes;
}

}  // namespace collie
