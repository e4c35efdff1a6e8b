#include "core/transport/message_check.h"

#include <cinttypes>
#include <cstdio>

namespace collie {

std::string hexTag(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%" PRIx64, value);
  return text;
}

namespace {
constexpr const char* kDisagree =
    " bytes: the ranks disagree on the sequence of collectives or their sizes";
}  // namespace

Status messageMismatch(int peer, int channel, MessageTag got, MessageTag want, Completion* done) {
  if (done != nullptr && got.tag != want.tag) done->mismatch(got.tag);
  return mismatchError("message from rank " + std::to_string(peer) + " on channel " +
                           std::to_string(channel) + " has tag " + hexTag(got.tag) + " and " +
                           std::to_string(got.bytes) + " bytes, but the receive posted for it " +
                           "expects tag " + hexTag(want.tag) + " and " +
                           std::to_string(want.bytes) + kDisagree,
                       peer);
}

Status sendMismatch(int peer, int channel, MessageTag sent, MessageTag expected) {
  return mismatchError("rank " + std::to_string(peer) + " on channel " + std::to_string(channel) +
                           " expects tag " + hexTag(expected.tag) + " and " +
                           std::to_string(expected.bytes) + " bytes, but the message sent to it " +
                           "has tag " + hexTag(sent.tag) + " and " + std::to_string(sent.bytes) +
                           kDisagree,
                       peer);
}

}  // namespace collie
