// The tcp transport's frame header and message striping.
//
// A message of `length` bytes is cut into stripes (stripePlan); stripe j of the n-th
// message of a connection travels on socket (n + j) % nsocks, preceded by a 40-byte
// header (little-endian):
//   magic u32 | stripe u8 | nstripes u8 | zero u16 | tag u64 | length u64 (whole message)
//   offset u64 (of this stripe) | bytes u64 (of this stripe)
// Both sides derive the plan from the message length, so a receiver whose posted
// length differs notices on the first header it reads, before any payload lands.
// Pure functions; thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace collie::tcp {

inline constexpr uint32_t kFrameMagic = 0x52464c43;  // bytes "CLFR" on the wire
// An abandon record (Connection::abandon): a header alone, magic "CLAB", the tag of the
// collective the sender failed, the StatusCode of its failure in `offset`, length and
// bytes zero. A sender writes it only between frames.
inline constexpr uint32_t kAbandonMagic = 0x42414c43;  // bytes "CLAB" on the wire
inline constexpr size_t kFrameHeaderBytes = 40;
inline constexpr size_t kMinStripeBytes = 256 * 1024;  // below this a message is not split
inline constexpr int kMaxSockets = 16;

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint8_t stripe = 0;
  uint8_t nstripes = 1;
  uint16_t zero = 0;
  uint64_t tag = 0;
  uint64_t length = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

inline int stripeCount(size_t length, int nsocks) {
  size_t n = std::max<size_t>(1, length / kMinStripeBytes);
  return static_cast<int>(std::min<size_t>(n, static_cast<size_t>(nsocks)));
}

// Offset and size of stripe j of n.
inline void stripeRange(size_t length, int n, int j, size_t* offset, size_t* bytes) {
  size_t base = length / static_cast<size_t>(n);
  *offset = base * static_cast<size_t>(j);
  *bytes = (j == n - 1) ? length - *offset : base;
}

inline void encodeFrame(const FrameHeader& h, uint8_t* p) {
  auto put = [](uint8_t* q, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) q[i] = static_cast<uint8_t>(v >> (8 * i));
  };
  put(p, h.magic, 4);
  p[4] = h.stripe;
  p[5] = h.nstripes;
  put(p + 6, h.zero, 2);
  put(p + 8, h.tag, 8);
  put(p + 16, h.length, 8);
  put(p + 24, h.offset, 8);
  put(p + 32, h.bytes, 8);
}

inline FrameHeader decodeFrame(const uint8_t* p) {
  auto get = [](const uint8_t* q, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(q[i]) << (8 * i);
    return v;
  };
  FrameHeader h;
  h.magic = static_cast<uint32_t>(get(p, 4));
  h.stripe = p[4];
  h.nstripes = p[5];
  h.zero = static_cast<uint16_t>(get(p + 6, 2));
  h.tag = get(p + 8, 8);
  h.length = get(p + 16, 8);
  h.offset = get(p + 24, 8);
  h.bytes = get(p + 32, 8);
  return h;
}

enum class FrameCheck { kOk, kCorrupt, kMismatch, kWrongStripe };

// Compares a received header with the one the posted receive expects (`want`, built
// by the receiver from its own plan). kCorrupt: bad magic or padding; kMismatch: the
// tag or whole-message length differ (the ranks disagree); kWrongStripe: the stripe
// layout differs. Only kOk lets payload bytes be read, and then exactly want.bytes
// of them at want.offset, which the receiver derived itself.
inline FrameCheck checkFrame(const FrameHeader& got, const FrameHeader& want) {
  if (got.magic != kFrameMagic || got.zero != 0) return FrameCheck::kCorrupt;
  if (got.tag != want.tag || got.length != want.length) return FrameCheck::kMismatch;
  if (got.stripe != want.stripe || got.nstripes != want.nstripes || got.offset != want.offset ||
      got.bytes != want.bytes) {
    return FrameCheck::kWrongStripe;
  }
  return FrameCheck::kOk;
}

}  // namespace collie::tcp
