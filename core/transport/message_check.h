// The one tag-and-length check of an incoming message, and its wording, for every
// transport (core/transport/transport.h: "the receiver checks both against what it
// posted"). A transport reads the header its wire carries (tag, length) and asks
// checkIncoming() before it writes a byte of the message anywhere; the kMismatch it
// returns reads the same on every transport, so a user (and the conformance suite,
// tests/transport/conformance_test.cc) sees one message whatever the wire.
//
// Thread safety: pure functions; `done` is written, so call them from the thread that
// owns the receive (the connection's).
#pragma once

#include <cstdint>
#include <string>

#include "collie/status.h"
#include "core/transport/transport.h"

namespace collie {

// What a message header announces, or what a posted receive expects.
struct MessageTag {
  uint64_t tag = 0;
  uint64_t bytes = 0;
};

// The kMismatch for a message from `peer` on `channel` that announces `got` where the
// receive posted for it expects `want`. Records got.tag in `done` (Completion::mismatch)
// when the tags differ, so that the engine can name the fields the ranks disagree on;
// `done` may be null (a sender that learns of the mismatch from its peer).
Status messageMismatch(int peer, int channel, MessageTag got, MessageTag want, Completion* done);

// OK when `got` matches `want`; else messageMismatch().
inline Status checkIncoming(int peer, int channel, MessageTag got, MessageTag want,
                            Completion* done) {
  if (got.tag == want.tag && got.bytes == want.bytes) return Status();
  return messageMismatch(peer, channel, got, want, done);
}

// The kMismatch for a transport whose sender learns of the disagreement first (the
// receiver announced what it expects, ibverbs): the message sent to `peer` is `sent`,
// the receive `peer` posted for it expects `expected`.
Status sendMismatch(int peer, int channel, MessageTag sent, MessageTag expected);

// 0x-prefixed lower-case hex, as tags are written in messages.
std::string hexTag(uint64_t value);

}  // namespace collie
