// SHA-256 (FIPS 180-4), for identifiers that must not reveal the job secret.
//
// collie derives every public name it gives a job (store key prefixes, the job key
// printed in errors) and every secret it derives from the job secret (split and
// shrink children) through this hash, so that nothing a log, error or store key shows
// can be turned back into secret bits. Not for bulk data: it runs at a few hundred
// MB/s, and collie hashes tens of bytes per communicator.
//
// Thread safety: Sha256 objects are not shared; the free function is reentrant.
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

}  // namespace collie
