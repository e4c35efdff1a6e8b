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

}  // namespace collie
