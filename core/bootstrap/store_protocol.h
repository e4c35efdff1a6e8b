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
#include <string>
#include <string_view>

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

// One request parsed from untrusted bytes (the server's input buffer). `key` and
// `value` point into that buffer.
struct Request {
  Op op = kGet;
  std::string_view key;
  uint64_t arg = 0;
  const uint8_t* value = nullptr;  // set requests only; arg bytes
  size_t consumed = 0;             // bytes of the whole request
};

enum class Parse { kNeedMore, kOk, kBad };

// Parses the request at the start of p[0, avail). kNeedMore when it is incomplete
// (nothing consumed), kBad (with *why) when it breaks the protocol: unknown op,
// non-zero padding, key length 0 or above kMaxKeyBytes, set value above
// kMaxValueBytes. Never reads past p + avail. Pure; thread-safe.
inline Parse parseRequest(const uint8_t* p, size_t avail, Request* out, std::string* why) {
  if (avail < kRequestHeaderBytes) return Parse::kNeedMore;
  const uint8_t op = p[0];
  const uint32_t keyLen = get32(p + 4);
  const uint64_t arg = get64(p + 8);
  if (op != kSet && op != kGet && op != kAdd) {
    *why = "unknown request op " + std::to_string(op);
    return Parse::kBad;
  }
  if (p[1] != 0 || p[2] != 0 || p[3] != 0 || keyLen == 0 || keyLen > kMaxKeyBytes) {
    *why = "malformed request (key length " + std::to_string(keyLen) + ", limit " +
           std::to_string(kMaxKeyBytes) + ")";
    return Parse::kBad;
  }
  if (op == kSet && arg > kMaxValueBytes) {
    *why = "value of " + std::to_string(arg) + " bytes exceeds the 64 MiB limit";
    return Parse::kBad;
  }
  const size_t need = kRequestHeaderBytes + keyLen + (op == kSet ? arg : 0);
  if (avail < need) return Parse::kNeedMore;
  out->op = static_cast<Op>(op);
  out->key = std::string_view(reinterpret_cast<const char*>(p) + kRequestHeaderBytes, keyLen);
  out->arg = arg;
  out->value = op == kSet ? p + kRequestHeaderBytes + keyLen : nullptr;
  out->consumed = need;
  return Parse::kOk;
}

// Checks a response header from the server for a request of kind `op`: kBad (with
// *why) for an unknown status, a payload on a timed-out get, a payload above
// kMaxValueBytes, or an add answer that is not 8 bytes. *length is the payload size.
inline Parse parseResponseHeader(const uint8_t* p, Op op, uint64_t* length, std::string* why) {
  const uint64_t n = get64(p + 8);
  if (p[0] != kOk && p[0] != kTimedOut) {
    *why = "unknown reply status " + std::to_string(p[0]);
    return Parse::kBad;
  }
  if (p[0] == kTimedOut && n != 0) {
    *why = "timed-out reply with a payload";
    return Parse::kBad;
  }
  if (n > kMaxValueBytes || (op == kAdd && p[0] == kOk && n != 8)) {
    *why = "reply payload of " + std::to_string(n) + " bytes";
    return Parse::kBad;
  }
  *length = n;
  return Parse::kOk;
}

}  // namespace collie::store_protocol
