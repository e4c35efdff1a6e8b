// Wire format of the TCP store, shared by its server and client.
//
// After the secret handshake (core/net/handshake.h, purpose kStore) the client sends
// requests and the server answers each one in order:
//   request:  op u8 | 3 zero bytes | keyLen u32 | arg u64 | key[keyLen] | value[arg] (set)
//             arg = value length (set), delta as two's complement (add), wait ms (get)
//   response: status u8 | 7 zero bytes | length u64 | payload[length]
//             payload = value (get), new counter as 8 bytes LE (add), nothing (set)
// All integers are little-endian. Keys are 1..4 KiB, values at most 64 MiB; the server
// drops a connection that breaks these limits or sends an unknown op.
#pragma once

#include <cstddef>
#include <cstdint>

namespace collie::store_protocol {

inline constexpr size_t kRequestHeaderBytes = 16;
inline constexpr size_t kResponseHeaderBytes = 16;
inline constexpr uint32_t kMaxKeyBytes = 4096;
inline constexpr uint64_t kMaxValueBytes = uint64_t{64} << 20;

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3 };
enum Reply : uint8_t { kOk = 0, kTimedOut = 1 };

inline void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
inline uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace collie::store_protocol
