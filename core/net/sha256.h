// SHA-256 (FIPS 180-4), for identifiers that must not reveal the job secret, and
// HMAC-SHA-256 (RFC 2104), with which connections prove the secret without sending it.
//
// collie derives every public name it gives a job (store key prefixes, the job key
// printed in errors) and every secret it derives from the job secret (split and
// shrink children) through this hash, so that nothing a log, error or store key shows
// can be turned back into secret bits. Not for bulk data: it runs at a few hundred
// MB/s, and collie hashes tens of bytes per communicator.
//
// HMAC-SHA-256 is what the connection handshake (core/net/handshake.h) uses to prove
// knowledge of the job secret over fresh nonces: a keyed hash, unlike a plain hash of
// secret || data, cannot be extended by someone who saw one tag (length extension).
//
// Thread safety: Sha256 and HmacSha256 objects are not shared; the free functions are
// reentrant.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace collie {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  Sha256& update(const void* data, size_t bytes);
  Sha256& update(std::string_view text) { return update(text.data(), text.size()); }
  // Pads and returns the digest; the object must not be updated afterwards.
  Sha256Digest finish();

 private:
  void compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t totalBytes_ = 0;
};

Sha256Digest sha256(const void* data, size_t bytes);

// HMAC-SHA-256 (RFC 2104): H((K ^ opad) || H((K ^ ipad) || message)). A key longer
// than the 64-byte block is hashed first, a shorter one is padded with zeros.
class HmacSha256 {
 public:
  HmacSha256(const void* key, size_t keyBytes);
  HmacSha256& update(const void* data, size_t bytes) {
    inner_.update(data, bytes);
    return *this;
  }
  HmacSha256& update(std::string_view text) { return update(text.data(), text.size()); }
  // The tag; the object must not be updated afterwards.
  Sha256Digest finish();

 private:
  Sha256 inner_;
  std::array<uint8_t, 64> outerKey_{};  // K ^ opad
};

Sha256Digest hmacSha256(const void* key, size_t keyBytes, const void* data, size_t bytes);

}  // namespace collie
