// Small helpers of the Communicator's argument checks, shared by the files that check
// the exchanges (communicator_exchanges.cc) and the kinds with a count per rank
// (communicator_per_rank_counts.cc).
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

// InvalidArgument naming both byte ranges unless [send, send + sendBytes) and
// [recv, recv + recvBytes) share no byte or `inPlace` (the one overlap the collective
// defines, described by `inPlaceForm`). A collective reads its input and writes its
// output in chunks of its own order, so any other overlap would read bytes it already
// overwrote: refused on every path rather than computed wrong.
Status checkOverlap(const char* what, int rank, const void* send, size_t sendBytes,
                    const void* recv, size_t recvBytes, bool inPlace, const char* inPlaceForm);

}  // namespace collie
