// The connection handshake (core/net/handshake.h): HMAC-SHA-256 against RFC 4231, the
// Challenge/Hello/Accept codec, and replays of recorded handshakes, captured by a
// forwarding proxy on loopback, refused in both directions.
#include "core/net/handshake.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collie/store.h"
#include "core/net/sha256.h"
#include "core/net/socket.h"
#include "support/recording_proxy.h"

namespace collie {
namespace {

using namespace std::chrono_literals;

std::string hex(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

std::string hmacHex(const std::vector<uint8_t>& key, const std::string& data) {
  Sha256Digest tag = hmacSha256(key.data(), key.size(), data.data(), data.size());
  return hex(tag.data(), tag.size());
}

TEST(HmacSha256, Rfc4231TestVectors) {
  // Test case 1: a 20-byte key.
  EXPECT_EQ(hmacHex(std::vector<uint8_t>(20, 0x0b), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // 2: a key shorter than the output.
  EXPECT_EQ(hmacHex({'J', 'e', 'f', 'e'}, "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // 3: 50 bytes of 0xdd under 20 bytes of 0xaa.
  EXPECT_EQ(hmacHex(std::vector<uint8_t>(20, 0xaa), std::string(50, '\xdd')),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // 4: a 25-byte key 0x01..0x19.
  std::vector<uint8_t> key4;
  for (int i = 1; i <= 25; ++i) key4.push_back(static_cast<uint8_t>(i));
  EXPECT_EQ(hmacHex(key4, std::string(50, '\xcd')),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // 5: truncated to 128 bits.
  EXPECT_EQ(hmacHex(std::vector<uint8_t>(20, 0x0c), "Test With Truncation").substr(0, 32),
            "a3b6167473100ee06e0c796c2955552b");
  // 6 and 7: a 131-byte key, longer than the block, is hashed first.
  EXPECT_EQ(hmacHex(std::vector<uint8_t>(131, 0xaa),
                    "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(hmacHex(std::vector<uint8_t>(131, 0xaa),
                    "This is a test using a larger than block-size key and a larger than "
                    "block-size data. The key needs to be hashed before being used by the HMAC "
                    "algorithm."),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
  // Fed in pieces, the same tag.
  const std::string data = "what do ya want for nothing?";
  const uint8_t jefe[] = {'J', 'e', 'f', 'e'};
  Sha256Digest pieces =
      HmacSha256(jefe, 4).update(data.substr(0, 7)).update(data.substr(7)).finish();
  EXPECT_EQ(hex(pieces.data(), pieces.size()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

JobSecret testSecret(uint8_t seed) {
  JobSecret s{};
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(seed + 13 * i);
  return s;
}

bool containsSecretPiece(const std::vector<uint8_t>& bytes, const JobSecret& secret) {
  for (size_t at = 0; at + 8 <= secret.size(); ++at) {
    auto piece = secret.begin() + static_cast<std::ptrdiff_t>(at);
    if (std::search(bytes.begin(), bytes.end(), piece, piece + 8) != bytes.end()) return true;
  }
  return false;
}

TEST(Handshake, EncodeDecodeAndProofs) {
  using namespace net;
  const JobSecret secret = testSecret(3);
  auto nonceS = freshNonce();
  auto nonceC = freshNonce();
  ASSERT_TRUE(nonceS.isOk() && nonceC.isOk());
  EXPECT_NE(*nonceS, *nonceC);

  auto challenge = encodeChallenge(*nonceS);
  auto decoded = decodeChallenge(challenge.data());
  ASSERT_TRUE(decoded.isOk());
  EXPECT_EQ(*decoded, *nonceS);

  Hello hello{Purpose::kTcpData, 5, 1, 3, hashJobKey("job")};
  auto bytes = encodeHello(hello, secret, *nonceS, *nonceC);
  EXPECT_FALSE(containsSecretPiece(std::vector<uint8_t>(bytes.begin(), bytes.end()), secret));
  auto back = decodeHello(bytes.data(), secret, *nonceS);
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(back->purpose, Purpose::kTcpData);
  EXPECT_EQ(back->rank, 5);
  EXPECT_EQ(back->channel, 1u);
  EXPECT_EQ(back->socketIndex, 3u);
  EXPECT_EQ(back->jobHash, hashJobKey("job"));

  auto accept = encodeAccept(bytes.data(), secret, *nonceS);
  EXPECT_TRUE(checkAccept(accept.data(), bytes.data(), secret, *nonceS).isOk());

  // Another secret, another challenge, any field changed after signing: refused.
  JobSecret other = secret;
  other[15] ^= 1;
  auto wrongSecret = decodeHello(bytes.data(), other, *nonceS);
  ASSERT_FALSE(wrongSecret.isOk());
  EXPECT_EQ(wrongSecret.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(decodeHello(bytes.data(), secret, *nonceC).status().code(),
            StatusCode::kUnauthenticated);
  for (size_t at : {6u, 8u, 12u, 16u, 24u, 32u, 50u}) {
    auto tampered = bytes;
    tampered[at] ^= 1;
    EXPECT_FALSE(decodeHello(tampered.data(), secret, *nonceS).isOk()) << "byte " << at;
  }
  auto badMagic = bytes;
  badMagic[0] ^= 1;
  EXPECT_FALSE(decodeHello(badMagic.data(), secret, *nonceS).isOk());
  auto oldVersion = challenge;
  oldVersion[4] = 1;
  auto refused = decodeChallenge(oldVersion.data());
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.status().message().find("version"), std::string::npos);

  // The server's proof: wrong secret refused, and the client's own proof reflected back
  // as an Accept does not pass for the server's (distinct direction labels).
  EXPECT_FALSE(checkAccept(accept.data(), bytes.data(), other, *nonceS).isOk());
  auto reflected = accept;
  std::memcpy(reflected.data() + 8, bytes.data() + 48, kMacBytes);
  EXPECT_EQ(checkAccept(reflected.data(), bytes.data(), secret, *nonceS).code(),
            StatusCode::kUnauthenticated);

  // The symmetric form: each direction's proof differs, and verifies only as sent.
  auto a = peerProof(secret, 0, 1, 0, 7, *nonceS, *nonceC);
  auto b = peerProof(secret, 1, 0, 0, 7, *nonceC, *nonceS);
  EXPECT_NE(a, b);
  EXPECT_EQ(a, peerProof(secret, 0, 1, 0, 7, *nonceS, *nonceC));
  EXPECT_NE(a, peerProof(other, 0, 1, 0, 7, *nonceS, *nonceC));
  EXPECT_NE(a, peerProof(secret, 0, 1, 1, 7, *nonceS, *nonceC));
}

// Everything `fd` receives until the peer closes the connection or `deadline` passes.
// *closed says which.
std::vector<uint8_t> readUntilClosed(int fd, Deadline deadline, bool* closed) {
  std::vector<uint8_t> got;
  *closed = false;
  for (;;) {
    uint8_t byte;
    Status st = net::readFull(fd, &byte, 1, deadline);
    if (!st.isOk()) {
      *closed = st.code() == StatusCode::kRemoteError;
      return got;
    }
    got.push_back(byte);
  }
}

// fault: a client's handshake bytes, recorded on the wire from a successful
// connection, replayed to a new store server of the same job secret | refused: the
// server sends only its Challenge and closes the connection, no Accept | handshake_test
TEST(HandshakeReplay, RecordedClientBytesAreRefusedByANewServer) {
  const JobSecret secret = testSecret(9);
  std::vector<uint8_t> recorded;
  {
    auto server = StoreServer::start("127.0.0.1", 0, secret);
    ASSERT_TRUE(server.isOk()) << server.status().toString();
    testing::RecordingProxy proxy((*server)->port());
    ASSERT_NE(proxy.port(), 0);
    auto store = connectTcpStore("127.0.0.1", proxy.port(), secret, Clock::now() + 5s);
    ASSERT_TRUE(store.isOk()) << store.status().toString();
    ASSERT_TRUE((*store)->set("k", Bytes{1, 2, 3}).isOk());
    auto value = (*store)->get("k", Clock::now() + 2s);
    ASSERT_TRUE(value.isOk());
    auto flows = proxy.flows();
    ASSERT_EQ(flows.size(), 1u);
    recorded = flows[0].toTarget;  // the Hello, then the set and get requests
    ASSERT_GE(recorded.size(), net::kHelloBytes);
    EXPECT_FALSE(containsSecretPiece(recorded, secret));
    EXPECT_FALSE(containsSecretPiece(flows[0].toClient, secret));
  }
  // A new job with the same secret, on a new listener: the replay is refused.
  auto server = StoreServer::start("127.0.0.1", 0, secret);
  ASSERT_TRUE(server.isOk()) << server.status().toString();
  auto sock = net::connectWithDeadline("127.0.0.1", (*server)->port(), Clock::now() + 2s);
  ASSERT_TRUE(sock.isOk());
  ASSERT_TRUE(
      net::writeFull(sock->fd(), recorded.data(), recorded.size(), Clock::now() + 2s).isOk());
  bool closed = false;
  std::vector<uint8_t> answer = readUntilClosed(sock->fd(), Clock::now() + 5s, &closed);
  EXPECT_TRUE(closed) << "the server kept a connection that replayed another's handshake";
  EXPECT_LE(answer.size(), net::kChallengeBytes) << "the server answered a replayed Hello";
  // The server still serves its job.
  auto good = connectTcpStore("127.0.0.1", (*server)->port(), secret, Clock::now() + 5s);
  ASSERT_TRUE(good.isOk()) << good.status().toString();
  EXPECT_TRUE((*good)->set("after", Bytes{1}).isOk());
}

// fault: a server's Challenge and Accept, recorded on the wire, replayed to a connecting
// rank by an impostor that does not know the secret | the rank refuses the
// connection: Unauthenticated | handshake_test
TEST(HandshakeReplay, RecordedServerBytesDoNotConvinceAClient) {
  const JobSecret secret = testSecret(21);
  std::vector<uint8_t> recorded;
  {
    auto server = StoreServer::start("127.0.0.1", 0, secret);
    ASSERT_TRUE(server.isOk());
    testing::RecordingProxy proxy((*server)->port());
    auto store = connectTcpStore("127.0.0.1", proxy.port(), secret, Clock::now() + 5s);
    ASSERT_TRUE(store.isOk()) << store.status().toString();
    auto flows = proxy.flows();
    ASSERT_EQ(flows.size(), 1u);
    recorded = flows[0].toClient;
    ASSERT_EQ(recorded.size(), net::kChallengeBytes + net::kAcceptBytes);
  }
  auto impostor = net::listen("127.0.0.1", 0);
  ASSERT_TRUE(impostor.isOk());
  auto port = net::localPort(impostor->fd());
  ASSERT_TRUE(port.isOk());
  std::thread replayer([&] {
    auto conn = net::acceptWithDeadline(impostor->fd(), Clock::now() + 5s);
    if (!conn.isOk()) return;
    (void)net::writeFull(conn->fd(), recorded.data(), recorded.size(), Clock::now() + 2s);
    uint8_t hello[net::kHelloBytes];
    (void)net::readFull(conn->fd(), hello, sizeof(hello), Clock::now() + 2s);
    std::this_thread::sleep_for(100ms);  // keep the connection open while the client checks
  });
  auto fooled = connectTcpStore("127.0.0.1", *port, secret, Clock::now() + 5s);
  replayer.join();
  ASSERT_FALSE(fooled.isOk());
  EXPECT_EQ(fooled.status().code(), StatusCode::kUnauthenticated) << fooled.status().toString();
}

}  // namespace
}  // namespace collie
