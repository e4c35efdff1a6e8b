// The secret handshake every collie connection starts with.
//
// The connecting side sends one fixed 48-byte Hello: magic, protocol version,
// purpose, the 16-byte job secret, its rank, channel, socket index and a hash of
// the communicator's job key. The accepting side checks magic and version, compares
// the secret in constant time and the job-key hash, and answers with an 8-byte
// Accept (magic + 0). A connection that fails any check is closed without an answer
// and logged once at WARN (with its address); the job is not disturbed.
//
// encodeHello/decodeHello are pure and may be used by non-blocking servers; the
// send/receive helpers block with a deadline. Thread safety: reentrant.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "collie/status.h"
#include "collie/store.h"
#include "collie/unique_id.h"

namespace collie::net {

inline constexpr uint32_t kHelloMagic = 0x4f4c4c43;   // bytes "CLLO" on the wire
inline constexpr uint32_t kAcceptMagic = 0x4b4f4c43;  // bytes "CLOK" on the wire
inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kHelloBytes = 48;
inline constexpr size_t kAcceptBytes = 8;

enum class Purpose : uint16_t { kStore = 1, kTcpData = 2 };

struct Hello {
  Purpose purpose = Purpose::kStore;
  int32_t rank = -1;
  uint32_t channel = 0;
  uint32_t socketIndex = 0;
  uint64_t jobHash = 0;  // hashJobKey(ctx.jobKey); 0 for the store
};

uint64_t hashJobKey(const std::string& jobKey);

std::array<uint8_t, kHelloBytes> encodeHello(const Hello& hello, const JobSecret& secret);
// Validates a received Hello. Unauthenticated for a wrong magic, version or secret.
Result<Hello> decodeHello(const uint8_t* bytes, const JobSecret& secret);
std::array<uint8_t, kAcceptBytes> encodeAccept();

// Connecting side: sends the Hello and waits for the Accept. Unauthenticated when the
// peer closes the connection instead (it rejected the secret or the job).
Status sendHello(int fd, const Hello& hello, const JobSecret& secret, Deadline deadline);
// Only the second half of sendHello, for callers that send first and collect later.
Status receiveAccept(int fd, Deadline deadline);
// Accepting side: reads and validates a Hello (also checks purpose and jobHash), sends
// the Accept. On failure it logs at WARN naming `peerAddress`; the caller closes.
Result<Hello> receiveHello(int fd, const JobSecret& secret, Purpose purpose, uint64_t jobHash,
                           Deadline deadline, const std::string& peerAddress);

// Constant-time comparison of two secrets.
bool secretsEqual(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace collie::net
