// UniqueId: everything a rank needs to join a job: where the rendezvous store
// listens and the job's 128-bit secret. One rank (or the launcher) creates it; the
// others receive it out of band (environment, file, MPI_Bcast, ncclGetUniqueId).
//
// Wire form: a fixed 128-byte blob (NCCL_UNIQUE_ID_BYTES); text form:
// "collie1:<host>:<port>:<32 hex digits>" with IPv6 hosts in brackets.
// Pure values; safe from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "collie/status.h"

namespace collie {

inline constexpr size_t kUniqueIdBytes = 128;
inline constexpr size_t kJobSecretBytes = 16;

using JobSecret = std::array<uint8_t, kJobSecretBytes>;

struct UniqueId {
  std::string host;  // numeric IPv4/IPv6 address or host name of the store
  uint16_t port = 0;
  JobSecret secret{};

  // A fresh id for a store that will listen on host:port, with a random secret from
  // the OS's CSPRNG (getrandom).
  static Result<UniqueId> generate(const std::string& host, uint16_t port);

  std::string toString() const;
  static Result<UniqueId> parse(const std::string& text);

  std::array<uint8_t, kUniqueIdBytes> toBytes() const;
  static Result<UniqueId> fromBytes(const uint8_t* bytes, size_t size);
};

// Hex text of a secret (32 lower-case digits) and its inverse.
std::string secretToHex(const JobSecret& secret);
Result<JobSecret> secretFromHex(const std::string& hex);

}  // namespace collie
