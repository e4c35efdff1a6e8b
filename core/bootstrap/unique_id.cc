// UniqueId: generation (getrandom), text and 128-byte forms.
//
// Byte layout (little-endian), 128 bytes:
//   0 magic "CLID" | 4 version u8 (1) | 5 hostLen u8 | 6 port u16 | 8 secret[16]
//   24 host[hostLen] | zero padding | 124 FNV-1a-32 checksum of bytes [0, 124)
#include "collie/unique_id.h"

#include <sys/random.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

namespace collie {
namespace {

constexpr uint8_t kMagic[4] = {'C', 'L', 'I', 'D'};
constexpr uint8_t kVersion = 1;
constexpr size_t kHostOffset = 24;
constexpr size_t kChecksumOffset = 124;
constexpr size_t kMaxHostLength = kChecksumOffset - kHostOffset;  // 100
constexpr const char* kTextPrefix = "collie1:";

uint32_t checksum(const uint8_t* p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 16777619u;
  }
  return h;
}

Status validateHost(const std::string& host) {
  if (host.empty()) return invalidArgument("unique id host is empty");
  if (host.size() > kMaxHostLength) {
    return invalidArgument("unique id host '" + host.substr(0, 32) + "...' is longer than " +
                           std::to_string(kMaxHostLength) + " characters");
  }
  for (unsigned char c : host) {
    if (!(std::isalnum(c) || c == '.' || c == '-' || c == '_' || c == ':' || c == '%')) {
      return invalidArgument("unique id host '" + host +
                             "' contains a character that is not "
                             "allowed in a host name or address");
    }
  }
  return Status();
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string secretToHex(const JobSecret& secret) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * secret.size());
  for (uint8_t b : secret) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

Result<JobSecret> secretFromHex(const std::string& hex) {
  if (hex.size() != 2 * kJobSecretBytes) {
    return invalidArgument("a job secret is " + std::to_string(2 * kJobSecretBytes) +
                           " hex digits, got " + std::to_string(hex.size()) + " characters");
  }
  JobSecret secret{};
  for (size_t i = 0; i < kJobSecretBytes; ++i) {
    int hi = hexValue(hex[2 * i]);
    int lo = hexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return invalidArgument("job secret contains a non-hex digit");
    secret[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return secret;
}

Result<UniqueId> UniqueId::generate(const std::string& host, uint16_t port) {
  COLLIE_RETURN_IF_ERROR(validateHost(host));
  UniqueId id;
  id.host = host;
  id.port = port;
  size_t got = 0;
  while (got < id.secret.size()) {
    ssize_t rc = ::getrandom(id.secret.data() + got, id.secret.size() - got, 0);
    if (rc < 0) {
      if (errno == EINTR) continue;
      return systemError("getrandom for the job secret", errno);
    }
    got += static_cast<size_t>(rc);
  }
  return id;
}

std::string UniqueId::toString() const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return kTextPrefix + h + ":" + std::to_string(port) + ":" + secretToHex(secret);
}

Result<UniqueId> UniqueId::parse(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return invalidArgument("unique id '" + text.substr(0, 160) + "' is malformed: " + why +
                           " (expected collie1:<host>:<port>:<32 hex digits>)");
  };
  const std::string prefix = kTextPrefix;
  if (text.compare(0, prefix.size(), prefix) != 0) return bad("missing 'collie1:' prefix");
  std::string rest = text.substr(prefix.size());
  UniqueId id;
  size_t afterHost;
  if (!rest.empty() && rest[0] == '[') {
    size_t close = rest.find(']');
    if (close == std::string::npos) return bad("unterminated '['");
    id.host = rest.substr(1, close - 1);
    if (id.host.find(':') == std::string::npos) return bad("brackets around a non-IPv6 host");
    afterHost = close + 1;
  } else {
    afterHost = rest.find(':');
    if (afterHost == std::string::npos) return bad("missing port");
    id.host = rest.substr(0, afterHost);
  }
  if (afterHost >= rest.size() || rest[afterHost] != ':') return bad("missing port");
  Status hostOk = validateHost(id.host);
  if (!hostOk.isOk()) return bad(hostOk.message());
  size_t portEnd = rest.find(':', afterHost + 1);
  if (portEnd == std::string::npos) return bad("missing secret");
  std::string port = rest.substr(afterHost + 1, portEnd - afterHost - 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoul(port) > 65535) {
    return bad("bad port '" + port + "'");
  }
  id.port = static_cast<uint16_t>(std::stoul(port));
  Result<JobSecret> secret = secretFromHex(rest.substr(portEnd + 1));
  if (!secret.isOk()) return bad(secret.status().message());
  id.secret = *secret;
  return id;
}

std::array<uint8_t, kUniqueIdBytes> UniqueId::toBytes() const {
  std::array<uint8_t, kUniqueIdBytes> out{};
  std::memcpy(out.data(), kMagic, 4);
  out[4] = kVersion;
  size_t hostLen = std::min(host.size(), kMaxHostLength);  // generate/parse enforce the cap
  out[5] = static_cast<uint8_t>(hostLen);
  out[6] = static_cast<uint8_t>(port & 0xff);
  out[7] = static_cast<uint8_t>(port >> 8);
  std::memcpy(out.data() + 8, secret.data(), secret.size());
  std::memcpy(out.data() + kHostOffset, host.data(), hostLen);
  uint32_t sum = checksum(out.data(), kChecksumOffset);
  for (int i = 0; i < 4; ++i) out[kChecksumOffset + i] = static_cast<uint8_t>(sum >> (8 * i));
  return out;
}

Result<UniqueId> UniqueId::fromBytes(const uint8_t* bytes, size_t size) {
  const char* expect = " (was it produced by collie's UniqueId::toBytes / ncclGetUniqueId?)";
  if (bytes == nullptr || size != kUniqueIdBytes) {
    return invalidArgument("a unique id is " + std::to_string(kUniqueIdBytes) + " bytes, got " +
                           std::to_string(bytes == nullptr ? 0 : size));
  }
  if (std::memcmp(bytes, kMagic, 4) != 0) {
    return invalidArgument(std::string("unique id bytes do not start with the collie magic") +
                           expect);
  }
  if (bytes[4] != kVersion) {
    return invalidArgument("unique id version " + std::to_string(bytes[4]) + " is not supported (" +
                           "expected " + std::to_string(kVersion) + "): mixed collie versions?");
  }
  uint32_t stored = 0;
  for (int i = 0; i < 4; ++i)
    stored |= static_cast<uint32_t>(bytes[kChecksumOffset + i]) << (8 * i);
  if (stored != checksum(bytes, kChecksumOffset)) {
    return invalidArgument(std::string("unique id checksum mismatch: the bytes are corrupted") +
                           expect);
  }
  size_t hostLen = bytes[5];
  if (hostLen == 0 || hostLen > kMaxHostLength) {
    return invalidArgument("unique id has a bad host length " + std::to_string(hostLen));
  }
  for (size_t i = kHostOffset + hostLen; i < kChecksumOffset; ++i) {
    if (bytes[i] != 0) return invalidArgument("unique id has non-zero padding");
  }
  UniqueId id;
  id.host.assign(reinterpret_cast<const char*>(bytes + kHostOffset), hostLen);
  COLLIE_RETURN_IF_ERROR(validateHost(id.host));
  id.port = static_cast<uint16_t>(bytes[6] | (bytes[7] << 8));
  std::memcpy(id.secret.data(), bytes + 8, kJobSecretBytes);
  return id;
}

}  // namespace collie
