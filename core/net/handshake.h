// The challenge-response handshake every collie connection starts with.
//
// Each side proves that it knows the 16-byte job secret without sending it: the proof
// is an HMAC-SHA-256 keyed with the secret over fresh random nonces from both sides,
// the connection's purpose and the Hello's fields. Nothing a listener records can be
// replayed into another connection (its nonces will differ), and the secret never
// crosses the wire. Three messages, little-endian:
//
//   accepting side -> connecting side: Challenge (24 bytes)
//     0 magic "CLCH" u32 | 4 version u16 | 6 reserved u16 | 8 nonceS[16]
//   connecting side -> accepting side: Hello (80 bytes)
//     0 magic "CLLO" u32 | 4 version u16 | 6 purpose u16 | 8 rank i32 | 12 channel u32
//     16 socketIndex u32 | 20 reserved u32 | 24 jobHash u64 | 32 nonceC[16] | 48 macC[32]
//   accepting side -> connecting side: Accept (40 bytes)
//     0 magic "CLOK" u32 | 4 reserved u32 | 8 macS[32]
//
//   macC = HMAC(secret, "collie/hello/client/v2" || nonceS || Hello[0, 48))
//   macS = HMAC(secret, "collie/hello/server/v2" || nonceS || Hello[0, 48))
//
// Hello[0, 48) holds every field and nonceC, so both proofs cover both nonces, the
// purpose, rank, channel, socket index and job-key hash; the distinct labels keep a
// server's proof from being reflected as a client's. The accepting side checks magic,
// version and macC (in constant time), then purpose and job-key hash, and answers the
// Accept; the connecting side checks macS, so a server that does not know the secret
// is refused as well (mutual). A connection that fails any check is closed without an
// answer and logged once at WARN with its address; the job is not disturbed.
//
// Transports whose two ends start at once (ucx, ibverbs) use the symmetric form,
// peerProof(): each end sends a fresh nonce, then its proof over both nonces with the
// sender's and receiver's ranks in that order.
//
// The encode/decode functions are pure and may be used by non-blocking servers; the
// send/receive helpers block with a deadline. Thread safety: reentrant.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "collie/status.h"
#include "collie/store.h"
#include "collie/unique_id.h"
#include "core/net/sha256.h"

namespace collie::net {

inline constexpr uint32_t kChallengeMagic = 0x48434c43;  // bytes "CLCH" on the wire
inline constexpr uint32_t kHelloMagic = 0x4f4c4c43;      // bytes "CLLO" on the wire
inline constexpr uint32_t kAcceptMagic = 0x4b4f4c43;     // bytes "CLOK" on the wire
// 1: the Hello carried the secret itself. 2: challenge-response.
inline constexpr uint16_t kProtocolVersion = 2;
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kChallengeBytes = 24;
inline constexpr size_t kHelloBytes = 80;
inline constexpr size_t kAcceptBytes = 40;

enum class Purpose : uint16_t { kStore = 1, kTcpData = 2 };

using Nonce = std::array<uint8_t, kNonceBytes>;

struct Hello {
  Purpose purpose = Purpose::kStore;
  int32_t rank = -1;
  uint32_t channel = 0;
  uint32_t socketIndex = 0;
  uint64_t jobHash = 0;  // hashJobKey(ctx.jobKey); 0 for the store
};

uint64_t hashJobKey(const std::string& jobKey);

// 16 bytes from the OS's CSPRNG (getrandom, as UniqueId::generate takes the secret).
// SystemError only when the kernel refuses.
Result<Nonce> freshNonce();

// Accepting side, first message.
std::array<uint8_t, kChallengeBytes> encodeChallenge(const Nonce& serverNonce);
// Connecting side: the server's nonce. Unauthenticated for a wrong magic or version.
Result<Nonce> decodeChallenge(const uint8_t* bytes);

// Connecting side: the Hello answering `serverNonce`, with its own `clientNonce`.
std::array<uint8_t, kHelloBytes> encodeHello(const Hello& hello, const JobSecret& secret,
                                             const Nonce& serverNonce, const Nonce& clientNonce);
// Accepting side: validates a received Hello against the nonce it challenged with.
// Unauthenticated for a wrong magic, version or proof (a wrong secret, or bytes
// recorded from another connection).
Result<Hello> decodeHello(const uint8_t* bytes, const JobSecret& secret, const Nonce& serverNonce);
// Accepting side: the Accept for a Hello that decodeHello took.
std::array<uint8_t, kAcceptBytes> encodeAccept(const uint8_t* helloBytes, const JobSecret& secret,
                                               const Nonce& serverNonce);
// Connecting side: checks the server's proof. Unauthenticated when it does not hold.
Status checkAccept(const uint8_t* acceptBytes, const uint8_t* helloBytes, const JobSecret& secret,
                   const Nonce& serverNonce);

// What the connecting side keeps between its Hello and the Accept.
struct SentHello {
  Nonce serverNonce{};
  std::array<uint8_t, kHelloBytes> bytes{};
};

// Connecting side, blocking: reads the Challenge and sends the Hello; the Accept is
// collected with receiveAccept, so a caller may answer many challenges before waiting.
// RemoteError when the peer closes before its Challenge (a store server with no room
// for another unauthenticated connection closes the newest: worth a retry).
Result<SentHello> answerChallenge(int fd, const Hello& hello, const JobSecret& secret,
                                  Deadline deadline);
// Connecting side: waits for the Accept and checks its proof. Unauthenticated when the
// peer closes the connection instead (it rejected our proof or our job) or its proof
// does not hold (it does not know the secret).
Status receiveAccept(int fd, const SentHello& sent, const JobSecret& secret, Deadline deadline);
// answerChallenge then receiveAccept.
Status sendHello(int fd, const Hello& hello, const JobSecret& secret, Deadline deadline);
// Accepting side, blocking: sends a Challenge, reads and validates the Hello (also
// checks purpose and jobHash), sends the Accept. On failure it logs at WARN naming
// `peerAddress`; the caller closes.
Result<Hello> receiveHello(int fd, const JobSecret& secret, Purpose purpose, uint64_t jobHash,
                           Deadline deadline, const std::string& peerAddress);

// Symmetric form: the proof `senderRank` sends `receiverRank` once both have exchanged
// nonces: HMAC(secret, "collie/peer/v2" || sender || receiver || channel || jobHash ||
// senderNonce || receiverNonce). The receiver computes the same with the ranks and
// nonces swapped into place and compares with proofsEqual.
Sha256Digest peerProof(const JobSecret& secret, int32_t senderRank, int32_t receiverRank,
                       uint32_t channel, uint64_t jobHash, const Nonce& senderNonce,
                       const Nonce& receiverNonce);

// Constant-time comparison of two byte strings (secrets, proofs).
bool secretsEqual(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace collie::net
