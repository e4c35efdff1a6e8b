#include "collie/unique_id.h"

#include <gtest/gtest.h>

#include <random>

namespace collie {
namespace {

TEST(UniqueId, GenerateGivesRandomSecrets) {
  auto a = UniqueId::generate("127.0.0.1", 1234);
  auto b = UniqueId::generate("127.0.0.1", 1234);
  ASSERT_TRUE(a.isOk()) << a.status().toString();
  ASSERT_TRUE(b.isOk());
  EXPECT_NE(a->secret, b->secret);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 1234);
}

TEST(UniqueId, TextRoundTripIpv4NameAndIpv6) {
  for (const char* host : {"127.0.0.1", "node-17.cluster", "::1", "fe80::1%eth0"}) {
    auto id = UniqueId::generate(host, 29500);
    ASSERT_TRUE(id.isOk()) << host;
    std::string text = id->toString();
    EXPECT_EQ(text.rfind("collie1:", 0), 0u);
    if (std::string(host).find(':') != std::string::npos) {
      EXPECT_NE(text.find(std::string("[") + host + "]"), std::string::npos) << text;
    }
    auto back = UniqueId::parse(text);
    ASSERT_TRUE(back.isOk()) << back.status().toString();
    EXPECT_EQ(back->host, host);
    EXPECT_EQ(back->port, 29500);
    EXPECT_EQ(back->secret, id->secret);
  }
}

TEST(UniqueId, BytesRoundTrip) {
  auto id = UniqueId::generate("::1", 65535);
  ASSERT_TRUE(id.isOk());
  auto bytes = id->toBytes();
  auto back = UniqueId::fromBytes(bytes.data(), bytes.size());
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(back->host, "::1");
  EXPECT_EQ(back->port, 65535);
  EXPECT_EQ(back->secret, id->secret);
}

TEST(UniqueId, TextGarbageRejected) {
  const char* bad[] = {"",
                       "collie1:",
                       "collie2:h:1:00112233445566778899aabbccddeeff",
                       "collie1:h:1:0011",
                       "collie1:h:99999:00112233445566778899aabbccddeeff",
                       "collie1:h::00112233445566778899aabbccddeeff",
                       "collie1::1:00112233445566778899aabbccddeeff",
                       "collie1:[::1:1:00112233445566778899aabbccddeeff",
                       "collie1:h:1:00112233445566778899aabbccddeefg",
                       "collie1:h w:1:00112233445566778899aabbccddeeff",
                       "collie1:h:1:00112233445566778899aabbccddeeff00"};
  for (const char* text : bad) {
    auto id = UniqueId::parse(text);
    EXPECT_FALSE(id.isOk()) << text;
    if (!id.isOk()) {
      EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument) << text;
    }
  }
}

TEST(UniqueId, ByteGarbageRejected) {
  auto id = UniqueId::generate("10.0.0.1", 80);
  ASSERT_TRUE(id.isOk());
  auto good = id->toBytes();
  EXPECT_FALSE(UniqueId::fromBytes(good.data(), 64).isOk());
  EXPECT_FALSE(UniqueId::fromBytes(nullptr, 128).isOk());
  for (size_t i = 0; i < good.size(); ++i) {  // every single-byte corruption is caught
    auto bytes = good;
    bytes[i] ^= 0x5a;
    auto back = UniqueId::fromBytes(bytes.data(), bytes.size());
    ASSERT_FALSE(back.isOk()) << "byte " << i;
    EXPECT_EQ(back.status().code(), StatusCode::kInvalidArgument);
  }
  std::mt19937 rng(7);
  for (int trial = 0; trial < 1000; ++trial) {
    std::array<uint8_t, kUniqueIdBytes> bytes;
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    EXPECT_FALSE(UniqueId::fromBytes(bytes.data(), bytes.size()).isOk());
  }
  auto zeros = std::array<uint8_t, kUniqueIdBytes>{};
  auto st = UniqueId::fromBytes(zeros.data(), zeros.size()).status();
  EXPECT_NE(st.message().find("magic"), std::string::npos) << st.toString();
}

TEST(UniqueId, SecretHex) {
  JobSecret s{};
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(i * 17);
  auto back = secretFromHex(secretToHex(s));
  ASSERT_TRUE(back.isOk());
  EXPECT_EQ(*back, s);
  EXPECT_FALSE(secretFromHex("xyz").isOk());
}

}  // namespace
}  // namespace collie
