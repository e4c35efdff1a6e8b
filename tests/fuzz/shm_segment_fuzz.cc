// Fuzz target: validation of a peer's shared-memory segment header. A peer process
// can write anything into its segment; Segment::validateImage must reject what does
// not describe a segment that fits its mapping, and never read outside it. The input,
// read as text, is also a peer's published segment or board name (isShmName).
#include <cstdint>
#include <cstring>
#include <vector>

#include "transports/shm/shm_layout.h"
#include "transports/shm/shm_names.h"
#include "transports/shm/shm_segment.h"

using namespace collie::shm;  // NOLINT(build/namespaces)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (std::string_view kind : {std::string_view(), kBoardKind}) isShmName(text, kind);
  if (size < 4) return 0;
  // The first bytes choose the expected geometry and the image size (1..4 pages).
  SegmentGeometry expected;
  expected.rank = data[0] % 8;
  expected.nranks = 1 + data[1] % 8;
  expected.nchannels = 1 + data[2] % 4;
  const size_t pages = 1 + data[3] % 4;
  data += 4;
  size -= 4;
  // Exactly the image size, so that ASan catches any read past it.
  std::vector<uint8_t> image(pages * kPage, 0);
  std::memcpy(image.data(), data, std::min(size, image.size()));
  // The nonce the store would hold: whatever the image claims (to get past that check).
  const SegmentHeader* header = reinterpret_cast<const SegmentHeader*>(image.data());
  static const char kDigits[] = "0123456789abcdef";
  std::string nonce;
  for (size_t i = 0; i < kNonceBytes; ++i) {
    nonce.push_back(kDigits[header->nonce[i] >> 4]);
    nonce.push_back(kDigits[header->nonce[i] & 15]);
  }
  Segment::validateImage(image.data(), image.size(), nonce, expected);
  return 0;
}
