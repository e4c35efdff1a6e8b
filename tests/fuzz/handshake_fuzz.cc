// Fuzz target: the secret handshake (Hello) and the tcp frame header check. The
// first 16 bytes are the job secret, so the fuzzer can reach past the secret check.
#include <cstdint>
#include <cstring>

#include "core/net/handshake.h"
#include "transports/tcp/frame.h"

using namespace collie;  // NOLINT(build/namespaces)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kJobSecretBytes) return 0;
  JobSecret secret;
  std::memcpy(secret.data(), data, kJobSecretBytes);
  data += kJobSecretBytes;
  size -= kJobSecretBytes;
  if (size >= net::kHelloBytes) {
    Result<net::Hello> hello = net::decodeHello(data, secret);
    if (hello.isOk()) {
      // A valid Hello re-encodes to the same bytes (reserved bytes aside).
      auto again = net::encodeHello(*hello, secret);
      if (std::memcmp(again.data(), data, 36) != 0 ||
          std::memcmp(again.data() + 40, data + 40, 8) != 0) {
        __builtin_trap();
      }
    }
    data += net::kHelloBytes;
    size -= net::kHelloBytes;
  }
  // Frame headers: the receiver's expectation comes from its own plan for a length.
  while (size >= 2 * tcp::kFrameHeaderBytes) {
    tcp::FrameHeader got = tcp::decodeFrame(data);
    tcp::FrameHeader want = tcp::decodeFrame(data + tcp::kFrameHeaderBytes);
    int nsocks = 1 + (want.stripe % tcp::kMaxSockets);
    size_t length = static_cast<size_t>(want.length % (uint64_t{1} << 40));
    want.magic = tcp::kFrameMagic;
    want.zero = 0;
    want.length = length;
    want.nstripes = static_cast<uint8_t>(tcp::stripeCount(length, nsocks));
    want.stripe = static_cast<uint8_t>(want.stripe % want.nstripes);
    size_t offset = 0, bytes = 0;
    tcp::stripeRange(length, want.nstripes, want.stripe, &offset, &bytes);
    want.offset = offset;
    want.bytes = bytes;
    if (offset + bytes > length) __builtin_trap();
    if (tcp::checkFrame(got, want) == tcp::FrameCheck::kOk &&
        (got.offset + got.bytes > got.length || got.length != length)) {
      __builtin_trap();
    }
    uint8_t encoded[tcp::kFrameHeaderBytes];
    tcp::encodeFrame(got, encoded);
    if (std::memcmp(encoded, data, tcp::kFrameHeaderBytes) != 0) __builtin_trap();
    data += 2 * tcp::kFrameHeaderBytes;
    size -= 2 * tcp::kFrameHeaderBytes;
  }
  return 0;
}
