// The 64-bit tag every message of a collective carries: the collective's fingerprint.
//
// Ranks that run different collectives at the same point of their sequence (another
// kind, count, dtype, op or root) put different tags on their messages, so the
// receiver detects the disagreement before writing a byte and both sides are named.
// Layout (high to low): sequence number (20 bits), kind (4), dtype (4), op (4),
// root or p2p peer (12), hash of the element count (20).
#pragma once

#include <cstdint>
#include <string>

#include "core/plan/schedule.h"

namespace collie {

uint64_t makeFingerprint(uint64_t sequence, const CollectiveArgs& args);
// "collective #12 allreduce dtype=float op=sum root=0 count#3fa21"
std::string describeFingerprint(uint64_t tag);

// The fields of a tag, decoded.
struct FingerprintFields {
  uint64_t sequence;
  CollectiveKind kind;
  DataType dtype;
  ReduceOp op;
  uint64_t root;
  uint64_t countHash;
};
FingerprintFields decodeFingerprint(uint64_t tag);

// Names every field in which `theirs` (the tag on a message from rank `peer`) differs
// from `mine`: "dtype differs: this rank float32, rank 2 int32; count differs (only its
// hash travels): this rank count#0a1b2, rank 2 count#3c4d5". Equal tags give "".
std::string describeMismatch(uint64_t mine, uint64_t theirs, int peer);

}  // namespace collie
