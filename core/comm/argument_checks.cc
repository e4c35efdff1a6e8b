// The Communicator's overlap check (core/comm/argument_checks.h).
#include "core/comm/argument_checks.h"

#include <cstdio>

namespace collie {

namespace {

// "[0x7f00c0001000, +262144 bytes)"
std::string rangeText(const void* start, size_t bytes) {
  char text[64];
  std::snprintf(text, sizeof(text), "[%p, +%zu bytes)", start, bytes);
  return text;
}

}  // namespace

Status checkOverlap(const char* what, int rank, const void* send, size_t sendBytes,
                    const void* recv, size_t recvBytes, bool inPlace, const char* inPlaceForm) {
  if (inPlace || !rangesOverlap(send, sendBytes, recv, recvBytes)) return Status();
  return refusedArgument(what, rank,
                         "send " + rangeText(send, sendBytes) + " and recv " +
                             rangeText(recv, recvBytes) +
                             " overlap other than in place; pass disjoint buffers, or run in "
                             "place (" +
                             inPlaceForm + ")");
}

}  // namespace collie
