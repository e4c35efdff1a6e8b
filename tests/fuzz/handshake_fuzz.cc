// Fuzz target: the handshake decoders (Challenge, Hello, Accept) and the tcp frame
// header check. The first 16 bytes are the job secret and the next 16 the server's
// nonce, so the fuzzer can reach past the proof check.
#include <cstdint>
#include <cstring>

#include "core/net/handshake.h"
#include "transports/tcp/frame.h"

using namespace collie;  // NOLINT(build/namespaces)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kJobSecretBytes + net::kNonceBytes) return 0;
  JobSecret secret;
  std::memcpy(secret.data(), data, kJobSecretBytes);
  net::Nonce serverNonce;
  std::memcpy(serverNonce.data(), data + kJobSecretBytes, net::kNonceBytes);
  data += kJobSecretBytes + net::kNonceBytes;
  size -= kJobSecretBytes + net::kNonceBytes;
  if (size >= net::kChallengeBytes) {
    Result<net::Nonce> nonce = net::decodeChallenge(data);
    if (nonce.isOk() && std::memcmp(net::encodeChallenge(*nonce).data(), data, 6) != 0) {
      __builtin_trap();
    }
  }
  if (size >= net::kHelloBytes + net::kAcceptBytes) {
    Result<net::Hello> hello = net::decodeHello(data, secret, serverNonce);
    if (hello.isOk()) {
      // A valid Hello re-encodes to the same bytes (reserved bytes aside), and its
      // Accept verifies.
      net::Nonce clientNonce;
      std::memcpy(clientNonce.data(), data + 32, net::kNonceBytes);
      auto again = net::encodeHello(*hello, secret, serverNonce, clientNonce);
      if (std::memcmp(again.data(), data, 20) != 0 ||
          std::memcmp(again.data() + 24, data + 24, net::kHelloBytes - 24) != 0) {
        __builtin_trap();
      }
      auto accept = net::encodeAccept(data, secret, serverNonce);
      if (!net::checkAccept(accept.data(), data, secret, serverNonce).isOk()) __builtin_trap();
    }
    (void)net::checkAccept(data + net::kHelloBytes, data, secret, serverNonce);
    data += net::kHelloBytes + net::kAcceptBytes;
    size -= net::kHelloBytes + net::kAcceptBytes;
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
