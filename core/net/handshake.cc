#include "core/net/handshake.h"

#include <cstring>

#include "core/log/log.h"
#include "core/net/socket.h"

namespace collie::net {
namespace {

void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Layout of the Hello (little-endian):
//   0 magic u32 | 4 version u16 | 6 purpose u16 | 8 secret[16] | 24 rank i32
//   28 channel u32 | 32 socketIndex u32 | 36 reserved u32 | 40 jobHash u64
}  // namespace

uint64_t hashJobKey(const std::string& jobKey) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : jobKey) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

bool secretsEqual(const uint8_t* a, const uint8_t* b, size_t n) {
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff = diff | static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

std::array<uint8_t, kHelloBytes> encodeHello(const Hello& hello, const JobSecret& secret) {
  std::array<uint8_t, kHelloBytes> out{};
  uint8_t* p = out.data();
  put32(p, kHelloMagic);
  p[4] = kProtocolVersion & 0xff;
  p[5] = kProtocolVersion >> 8;
  uint16_t purpose = static_cast<uint16_t>(hello.purpose);
  p[6] = purpose & 0xff;
  p[7] = purpose >> 8;
  std::memcpy(p + 8, secret.data(), kJobSecretBytes);
  put32(p + 24, static_cast<uint32_t>(hello.rank));
  put32(p + 28, hello.channel);
  put32(p + 32, hello.socketIndex);
  put64(p + 40, hello.jobHash);
  return out;
}

Result<Hello> decodeHello(const uint8_t* p, const JobSecret& secret) {
  if (get32(p) != kHelloMagic) return unauthenticated("not a collie connection (bad magic)");
  uint16_t version = static_cast<uint16_t>(p[4] | (p[5] << 8));
  if (version != kProtocolVersion) {
    return unauthenticated("protocol version " + std::to_string(version) + " (expected " +
                           std::to_string(kProtocolVersion) +
                           "): all ranks must run the same collie version");
  }
  if (!secretsEqual(p + 8, secret.data(), kJobSecretBytes)) {
    return unauthenticated("wrong job secret (a rank of another job, or a stray client)");
  }
  Hello hello;
  hello.purpose = static_cast<Purpose>(p[6] | (p[7] << 8));
  hello.rank = static_cast<int32_t>(get32(p + 24));
  hello.channel = get32(p + 28);
  hello.socketIndex = get32(p + 32);
  hello.jobHash = get64(p + 40);
  return hello;
}

std::array<uint8_t, kAcceptBytes> encodeAccept() {
  std::array<uint8_t, kAcceptBytes> out{};
  put32(out.data(), kAcceptMagic);
  return out;
}

Status receiveAccept(int fd, Deadline deadline) {
  uint8_t reply[kAcceptBytes];
  Status st = readFull(fd, reply, sizeof(reply), deadline);
  if (st.code() == StatusCode::kRemoteError) {
    return unauthenticated("peer " + peerAddressOf(fd) +
                           " closed the connection during the handshake: it rejected our job "
                           "secret or job key (do both sides use the same unique id?)");
  }
  COLLIE_RETURN_IF_ERROR(st);
  if (get32(reply) != kAcceptMagic || get32(reply + 4) != 0) {
    return remoteError("peer " + peerAddressOf(fd) + " sent a bad handshake answer");
  }
  return Status();
}

Status sendHello(int fd, const Hello& hello, const JobSecret& secret, Deadline deadline) {
  auto bytes = encodeHello(hello, secret);
  COLLIE_RETURN_IF_ERROR(writeFull(fd, bytes.data(), bytes.size(), deadline));
  return receiveAccept(fd, deadline);
}

Result<Hello> receiveHello(int fd, const JobSecret& secret, Purpose purpose, uint64_t jobHash,
                           Deadline deadline, const std::string& peerAddress) {
  uint8_t bytes[kHelloBytes];
  Status st = readFull(fd, bytes, sizeof(bytes), deadline);
  Result<Hello> hello = st.isOk() ? decodeHello(bytes, secret) : Result<Hello>(st);
  if (hello.isOk() && (hello->purpose != purpose || hello->jobHash != jobHash)) {
    hello = unauthenticated("connection for another purpose or communicator");
  }
  if (!hello.isOk()) {
    COLLIE_LOG(WARN, NET) << "rejected connection from " << peerAddress << ": "
                          << hello.status().message();
    return hello.status();
  }
  auto accept = encodeAccept();
  COLLIE_RETURN_IF_ERROR(writeFull(fd, accept.data(), accept.size(), deadline));
  return hello;
}

}  // namespace collie::net
