// The 64-bit tag every message of a collective carries: the collective's fingerprint.
//
// Ranks that run different collectives at the same point of their sequence (another
// kind, count, dtype, op or root) put different tags on their messages, so the
// receiver detects the disagreement before writing a byte and both sides are named.
// Layout (high to low): sequence number (20 bits), kind (4), dtype (4), op (4), root
// (12), hash of the element count (20; of every rank's count for the v kinds). Send and recv carry
// one kind (the two halves of one operation) and no peer: the two halves name different peers (each
// the other), and a connection only carries the messages of its own pair of ranks, so a send and a
// receive that meet always agree on it; their sequence number counts per peer.
//
// Tagged point-to-point (core/engine/tag_matcher.h) uses the two kind values no
// CollectiveKind takes: kTaggedKindBits on a tagged message's payload (its sequence number
// counts per peer and tag) and kEnvelopeKindBits on the envelope ahead of it. An untagged
// receive that meets either, or a tagged one that meets an untagged message, fails with
// kMismatch and the message says that one rank tagged and the other did not.
#pragma once

#include <cstdint>
#include <string>

#include "core/plan/schedule.h"

namespace collie {

uint64_t makeFingerprint(uint64_t sequence, const CollectiveArgs& args);
// Where the sequence number sits: makeFingerprint(s, args) ==
// makeFingerprint(0, args) | ((s & 0xFFFFF) << kFingerprintSequenceShift) (the device
// path's check kernel completes the fingerprint so).
inline constexpr uint32_t kFingerprintSequenceShift = 44;

// The kind field of tagged point-to-point messages (above).
inline constexpr uint64_t kEnvelopeKindBits = 14;
inline constexpr uint64_t kTaggedKindBits = 15;
// A tagged send's or receive's: its sequence number (per peer and tag), dtype and count.
uint64_t makeTaggedFingerprint(uint64_t sequence, DataType dtype, size_t count);
// The one tag every envelope carries.
uint64_t envelopeFingerprint();

// A point-to-point operation's user tag (Communicator::send/recv with a tag) and its
// sequence number among the operations with that peer, direction and tag.
struct PointToPointTag {
  bool tagged = false;
  int64_t value = 0;
  uint64_t sequence = 0;
};
// "collective #12 allreduce dtype=float op=sum count#3fa21", "collective #3 broadcast
// dtype=float root=2 count#3fa21", "send/recv #4 dtype=int32 count#0d1e2".
std::string describeFingerprint(uint64_t tag);
// The same for the operation `args` that `tag` was made for, naming a send's or a
// receive's peer as such: "send #4 to peer 1 dtype=int32 count#0d1e2", "recv #4 from
// peer 0 ...". Other kinds read as describeFingerprint(tag).
std::string describeOperation(uint64_t tag, const CollectiveArgs& args);
// The same naming a tagged operation's tag: "recv #0 with tag 22 from peer 1 ...".
std::string describeOperation(uint64_t tag, const CollectiveArgs& args, const PointToPointTag& p2p);

// The fields of a tag, decoded.
struct FingerprintFields {
  uint64_t sequence;
  CollectiveKind kind;    // kSend for both halves of a send/recv, tagged or not
  bool tagged = false;    // a tagged send/recv's payload (kTaggedKindBits)
  bool envelope = false;  // a tagged send/recv's envelope (kEnvelopeKindBits)
  DataType dtype;
  ReduceOp op;
  uint64_t root;  // 0 unless the kind is rooted
  uint64_t countHash;
};
FingerprintFields decodeFingerprint(uint64_t tag);

// Names every field in which `theirs` (the tag on a message from rank `peer`) differs
// from `mine`: "dtype differs: this rank float32, rank 2 int32; count differs (only its
// hash travels): this rank count#0a1b2, rank 2 count#3c4d5". Equal tags give "".
// Between two halves of a send/recv the other rank is named "peer 2".
std::string describeMismatch(uint64_t mine, uint64_t theirs, int peer);
// The sentence that opens a kMismatch on `rank`: "rank 0 and rank 2 run different
// collectives: <describeMismatch>", or for a send/recv "rank 0 and its peer 2 disagree
// on a send/recv: ..."; "" when the tags are equal.
std::string describeDisagreement(uint64_t mine, uint64_t theirs, int rank, int peer);

}  // namespace collie
