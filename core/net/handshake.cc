#include "core/net/handshake.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "core/log/log.h"
#include "core/net/socket.h"

namespace collie::net {
namespace {

// Direction labels: a proof made for one direction never verifies in the other.
constexpr std::string_view kClientLabel = "collie/hello/client/v2";
constexpr std::string_view kServerLabel = "collie/hello/server/v2";
constexpr std::string_view kPeerLabel = "collie/peer/v2";
// The part of the Hello that both proofs cover: every field and the client's nonce.
constexpr size_t kHelloSignedBytes = 48;
static_assert(kHelloSignedBytes + kMacBytes == kHelloBytes);
static_assert(8 + kNonceBytes == kChallengeBytes);
static_assert(8 + kMacBytes == kAcceptBytes);

void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
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

Status versionError(uint16_t version) {
  return unauthenticated("protocol version " + std::to_string(version) + " (expected " +
                         std::to_string(kProtocolVersion) +
                         "): all ranks must run the same collie version");
}

Sha256Digest helloProof(std::string_view label, const JobSecret& secret, const Nonce& serverNonce,
                        const uint8_t* helloBytes) {
  return HmacSha256(secret.data(), secret.size())
      .update(label)
      .update(serverNonce.data(), serverNonce.size())
      .update(helloBytes, kHelloSignedBytes)
      .finish();
}

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

Result<Nonce> freshNonce() {
  Nonce nonce;
  size_t got = 0;
  while (got < nonce.size()) {
    ssize_t rc = ::getrandom(nonce.data() + got, nonce.size() - got, 0);
    if (rc < 0) {
      if (errno == EINTR) continue;
      return systemError("getrandom for a handshake nonce", errno);
    }
    got += static_cast<size_t>(rc);
  }
  return nonce;
}

std::array<uint8_t, kChallengeBytes> encodeChallenge(const Nonce& serverNonce) {
  std::array<uint8_t, kChallengeBytes> out{};
  put32(out.data(), kChallengeMagic);
  put16(out.data() + 4, kProtocolVersion);
  std::memcpy(out.data() + 8, serverNonce.data(), kNonceBytes);
  return out;
}

Result<Nonce> decodeChallenge(const uint8_t* p) {
  if (get32(p) != kChallengeMagic) {
    return unauthenticated("not a collie connection (bad challenge magic)");
  }
  if (get16(p + 4) != kProtocolVersion) return versionError(get16(p + 4));
  Nonce nonce;
  std::memcpy(nonce.data(), p + 8, kNonceBytes);
  return nonce;
}

std::array<uint8_t, kHelloBytes> encodeHello(const Hello& hello, const JobSecret& secret,
                                             const Nonce& serverNonce, const Nonce& clientNonce) {
  std::array<uint8_t, kHelloBytes> out{};
  uint8_t* p = out.data();
  put32(p, kHelloMagic);
  put16(p + 4, kProtocolVersion);
  put16(p + 6, static_cast<uint16_t>(hello.purpose));
  put32(p + 8, static_cast<uint32_t>(hello.rank));
  put32(p + 12, hello.channel);
  put32(p + 16, hello.socketIndex);
  put64(p + 24, hello.jobHash);
  std::memcpy(p + 32, clientNonce.data(), kNonceBytes);
  Sha256Digest mac = helloProof(kClientLabel, secret, serverNonce, p);
  std::memcpy(p + kHelloSignedBytes, mac.data(), kMacBytes);
  return out;
}

Result<Hello> decodeHello(const uint8_t* p, const JobSecret& secret, const Nonce& serverNonce) {
  if (get32(p) != kHelloMagic) return unauthenticated("not a collie connection (bad magic)");
  if (get16(p + 4) != kProtocolVersion) return versionError(get16(p + 4));
  Sha256Digest mac = helloProof(kClientLabel, secret, serverNonce, p);
  if (!secretsEqual(p + kHelloSignedBytes, mac.data(), kMacBytes)) {
    return unauthenticated(
        "its proof of the job secret does not hold (a rank of another job, a stray client, or "
        "a replay of another connection)");
  }
  Hello hello;
  hello.purpose = static_cast<Purpose>(get16(p + 6));
  hello.rank = static_cast<int32_t>(get32(p + 8));
  hello.channel = get32(p + 12);
  hello.socketIndex = get32(p + 16);
  hello.jobHash = get64(p + 24);
  return hello;
}

std::array<uint8_t, kAcceptBytes> encodeAccept(const uint8_t* helloBytes, const JobSecret& secret,
                                               const Nonce& serverNonce) {
  std::array<uint8_t, kAcceptBytes> out{};
  put32(out.data(), kAcceptMagic);
  Sha256Digest mac = helloProof(kServerLabel, secret, serverNonce, helloBytes);
  std::memcpy(out.data() + 8, mac.data(), kMacBytes);
  return out;
}

Status checkAccept(const uint8_t* acceptBytes, const uint8_t* helloBytes, const JobSecret& secret,
                   const Nonce& serverNonce) {
  if (get32(acceptBytes) != kAcceptMagic) {
    return unauthenticated("bad handshake answer (not a collie Accept)");
  }
  Sha256Digest mac = helloProof(kServerLabel, secret, serverNonce, helloBytes);
  if (!secretsEqual(acceptBytes + 8, mac.data(), kMacBytes)) {
    return unauthenticated(
        "its Accept does not prove the job secret (not a rank of this job, or a replay)");
  }
  return Status();
}

Result<SentHello> answerChallenge(int fd, const Hello& hello, const JobSecret& secret,
                                  Deadline deadline) {
  uint8_t challenge[kChallengeBytes];
  Status st = readFull(fd, challenge, sizeof(challenge), deadline);
  if (st.code() == StatusCode::kRemoteError) {
    // Not a refusal of our proof (none was sent yet): the peer had no room for another
    // unauthenticated connection, or is not a collie server. Callers may retry.
    return remoteError("peer " + peerAddressOf(fd) +
                       " closed the connection before its handshake challenge");
  }
  COLLIE_RETURN_IF_ERROR(st);
  Result<Nonce> serverNonce = decodeChallenge(challenge);
  if (!serverNonce.isOk()) {
    return Status(serverNonce.status().code(),
                  "peer " + peerAddressOf(fd) + ": " + serverNonce.status().message());
  }
  Result<Nonce> clientNonce = freshNonce();
  if (!clientNonce.isOk()) return clientNonce.status();
  SentHello sent;
  sent.serverNonce = *serverNonce;
  sent.bytes = encodeHello(hello, secret, *serverNonce, *clientNonce);
  COLLIE_RETURN_IF_ERROR(writeFull(fd, sent.bytes.data(), sent.bytes.size(), deadline));
  return sent;
}

Status receiveAccept(int fd, const SentHello& sent, const JobSecret& secret, Deadline deadline) {
  uint8_t reply[kAcceptBytes];
  Status st = readFull(fd, reply, sizeof(reply), deadline);
  if (st.code() == StatusCode::kRemoteError) {
    return unauthenticated("peer " + peerAddressOf(fd) +
                           " closed the connection during the handshake: it rejected our proof "
                           "of the job secret or our job key (do both sides use the same unique "
                           "id?)");
  }
  COLLIE_RETURN_IF_ERROR(st);
  st = checkAccept(reply, sent.bytes.data(), secret, sent.serverNonce);
  if (!st.isOk()) return Status(st.code(), "peer " + peerAddressOf(fd) + ": " + st.message());
  return Status();
}

Status sendHello(int fd, const Hello& hello, const JobSecret& secret, Deadline deadline) {
  Result<SentHello> sent = answerChallenge(fd, hello, secret, deadline);
  if (!sent.isOk()) return sent.status();
  return receiveAccept(fd, *sent, secret, deadline);
}

Result<Hello> receiveHello(int fd, const JobSecret& secret, Purpose purpose, uint64_t jobHash,
                           Deadline deadline, const std::string& peerAddress) {
  Result<Nonce> nonce = freshNonce();
  if (!nonce.isOk()) return nonce.status();
  auto challenge = encodeChallenge(*nonce);
  uint8_t bytes[kHelloBytes];
  Status st = writeFull(fd, challenge.data(), challenge.size(), deadline);
  if (st.isOk()) st = readFull(fd, bytes, sizeof(bytes), deadline);
  Result<Hello> hello = st.isOk() ? decodeHello(bytes, secret, *nonce) : Result<Hello>(st);
  if (hello.isOk() && (hello->purpose != purpose || hello->jobHash != jobHash)) {
    hello = unauthenticated("connection for another purpose or communicator");
  }
  if (!hello.isOk()) {
    COLLIE_LOG(WARN, NET) << "rejected connection from " << peerAddress << ": "
                          << hello.status().message();
    return hello.status();
  }
  auto accept = encodeAccept(bytes, secret, *nonce);
  COLLIE_RETURN_IF_ERROR(writeFull(fd, accept.data(), accept.size(), deadline));
  return hello;
}

Sha256Digest peerProof(const JobSecret& secret, int32_t senderRank, int32_t receiverRank,
                       uint32_t channel, uint64_t jobHash, const Nonce& senderNonce,
                       const Nonce& receiverNonce) {
  uint8_t fields[20];
  put32(fields, static_cast<uint32_t>(senderRank));
  put32(fields + 4, static_cast<uint32_t>(receiverRank));
  put32(fields + 8, channel);
  put64(fields + 12, jobHash);
  return HmacSha256(secret.data(), secret.size())
      .update(kPeerLabel)
      .update(fields, sizeof(fields))
      .update(senderNonce.data(), senderNonce.size())
      .update(receiverNonce.data(), receiverNonce.size())
      .finish();
}

}  // namespace collie::net
