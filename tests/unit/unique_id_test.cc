#include "collie/unique_id.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "core/net/job_secret.h"
#include "core/net/sha256.h"

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

std::string hexOf(const Sha256Digest& digest) {
  std::string out;
  char two[3];
  for (uint8_t b : digest) {
    std::snprintf(two, sizeof(two), "%02x", b);
    out += two;
  }
  return out;
}

TEST(Sha256, KnownAnswers) {  // FIPS 180-4 examples
  EXPECT_EQ(hexOf(sha256("", 0)),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hexOf(sha256("abc", 3)),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string twoBlocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(hexOf(sha256(twoBlocks.data(), twoBlocks.size())),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 million;
  const std::string a1000(1000, 'a');
  for (int i = 0; i < 1000; ++i) million.update(a1000);  // streamed in pieces
  EXPECT_EQ(hexOf(million.finish()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(JobSecret, UserTextIsCheckedAndNeverEchoed) {
  EXPECT_TRUE(jobSecretFromUserText(" 0123456789abcdef0123456789ABCDEF\n", "X").isOk());
  for (const char* bad :
       {"nothex", "0x0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdeg",
        "00000000000000000000000000000000", ""}) {
    Result<JobSecret> secret = jobSecretFromUserText(bad, "COLLIE_JOB_SECRET");
    ASSERT_FALSE(secret.isOk()) << bad;
    EXPECT_EQ(secret.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(secret.status().message().find("COLLIE_JOB_SECRET"), std::string::npos);
    EXPECT_NE(secret.status().message().find("32 hex digits"), std::string::npos);
    if (std::string(bad).size() > 0 && std::string(bad) != std::string(32, '0')) {
      EXPECT_EQ(secret.status().message().find(bad), std::string::npos) << "echoed " << bad;
    }
  }
  JobSecret zero{};
  EXPECT_FALSE(checkJobSecret(zero, "test").isOk());
}

// fault: store key tags and split/shrink secrets derived from the job secret | SHA-256 derived: no
// piece of the secret, children reveal nothing of the parent | unique_id_test
TEST(JobSecret, PublicTagsAndDerivedSecretsRevealNothingOfTheSecret) {
  for (int trial = 0; trial < 50; ++trial) {
    Result<UniqueId> id = UniqueId::generate("127.0.0.1", 1);
    ASSERT_TRUE(id.isOk());
    const std::string hex = secretToHex(id->secret);
    const std::string tag = publicJobTag(id->secret);
    EXPECT_EQ(tag.size(), 16u);
    EXPECT_EQ(tag, publicJobTag(id->secret));  // equal secrets, equal tags
    // No piece of 8 hex digits of the secret appears in its tag (the old tag was the
    // secret's first 8 digits). A chance match is ~2^-32 per position.
    for (size_t i = 0; i + 8 <= hex.size(); ++i) {
      EXPECT_EQ(tag.find(hex.substr(i, 8)), std::string::npos) << hex << " " << tag;
    }
    JobSecret a = deriveJobSecret(id->secret, "split/0/1");
    JobSecret b = deriveJobSecret(id->secret, "split/0/2");
    EXPECT_NE(a, b);
    EXPECT_NE(a, id->secret);
    EXPECT_EQ(a, deriveJobSecret(id->secret, "split/0/1"));
    EXPECT_NE(publicJobTag(a), tag);
  }
}

}  // namespace
}  // namespace collie
