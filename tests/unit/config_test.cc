#include "core/config/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "collie/communicator.h"
#include "collie/store.h"

namespace collie {
namespace {

TEST(ConfigTest, EveryKnobHasADefaultAndAMeaning) {
  for (const Knob& knob : configKnobs()) {
    EXPECT_TRUE(std::string(knob.name).rfind("COLLIE_", 0) == 0) << knob.name;
    EXPECT_NE(std::string(knob.meaning), "") << knob.name;
  }
}

TEST(ConfigTest, EnvironmentThenNcclAliasThenDefault) {
  unsetenv("COLLIE_BUFFSIZE");
  unsetenv("NCCL_BUFFSIZE");
  EXPECT_EQ(configInt("COLLIE_BUFFSIZE"), 4 << 20);
  EXPECT_EQ(configSource("COLLIE_BUFFSIZE"), "default");
  setenv("NCCL_BUFFSIZE", "1M", 1);
  EXPECT_EQ(configInt("COLLIE_BUFFSIZE"), 1 << 20);
  EXPECT_EQ(configSource("COLLIE_BUFFSIZE"), "NCCL_BUFFSIZE");
  setenv("COLLIE_BUFFSIZE", "65536", 1);
  EXPECT_EQ(configInt("COLLIE_BUFFSIZE"), 65536);
  EXPECT_EQ(configSource("COLLIE_BUFFSIZE"), "env");
  setenv("COLLIE_BUFFSIZE", "lots", 1);
  EXPECT_EQ(configInt("COLLIE_BUFFSIZE"), 4 << 20);  // malformed: the default
  unsetenv("COLLIE_BUFFSIZE");
  unsetenv("NCCL_BUFFSIZE");
}

TEST(ConfigTest, ValuesOutsideAKnobsRangeFallBackToTheDefault) {
  setenv("COLLIE_STORE_HANDSHAKE_TIMEOUT", "2s", 1);
  EXPECT_EQ(configDuration("COLLIE_STORE_HANDSHAKE_TIMEOUT").count(), 2'000'000);
  setenv("COLLIE_STORE_HANDSHAKE_TIMEOUT", "1ms", 1);  // below 100ms
  EXPECT_EQ(configDuration("COLLIE_STORE_HANDSHAKE_TIMEOUT").count(), 5'000'000);
  setenv("COLLIE_STORE_HANDSHAKE_TIMEOUT", "1h", 1);  // above 120s
  EXPECT_EQ(configDuration("COLLIE_STORE_HANDSHAKE_TIMEOUT").count(), 5'000'000);
  unsetenv("COLLIE_STORE_HANDSHAKE_TIMEOUT");
  setenv("COLLIE_STORE_MAX_PENDING_PER_HOST", "0", 1);  // below 1
  EXPECT_EQ(configInt("COLLIE_STORE_MAX_PENDING_PER_HOST"), 32);
  unsetenv("COLLIE_STORE_MAX_PENDING_PER_HOST");
}

TEST(ConfigTest, ParsesSizesAndDurations) {
  EXPECT_EQ(*parseSize("512K"), 512 * 1024);
  EXPECT_EQ(*parseSize("3G"), int64_t{3} << 30);
  EXPECT_FALSE(parseSize("-1").isOk());
  EXPECT_FALSE(parseSize("12Q").isOk());
  EXPECT_EQ(parseDuration("50us")->count(), 50);
  EXPECT_EQ(parseDuration("2s")->count(), 2'000'000);
  EXPECT_EQ(parseDuration("30")->count(), 30'000'000);
  EXPECT_EQ(parseDuration("1.5ms")->count(), 1500);
  EXPECT_FALSE(parseDuration("soon").isOk());
}

// Values a knob of each kind must refuse: out of range, overflowing, non-numeric, unknown.
std::vector<std::string> badValues(const Knob& knob) {
  switch (knob.kind) {
    case KnobKind::kInteger:
    case KnobKind::kAutoOrInteger: {
      std::vector<std::string> bad = {std::to_string(knob.max + 1), "99999999999999999999999",
                                      "abc", "12Q", "-1"};
      if (knob.min > 0) bad.push_back(std::to_string(knob.min - 1));
      return bad;
    }
    case KnobKind::kDecimal:
      return {"0", std::to_string(knob.max * 2), "abc", "1e400", "-3"};
    case KnobKind::kDuration:
      return {std::to_string(knob.max + 1) + "us", "9999999999", "1e30", "soon", "-1", "5parsecs"};
    case KnobKind::kChoice:
      return {"LOUD", "0x1"};
    case KnobKind::kSubsystems:
      return {"LOUD", "INIT,NOPE", "^"};
    case KnobKind::kOutputPath:
      return {"/nonexistent-collie-dir/out.json", "/tmp/"};
    case KnobKind::kSecret:
      return {"nothex", "0x0123456789abcdef0123456789abcdef", std::string(31, 'a')};
    case KnobKind::kText:
    case KnobKind::kHiddenText:
      return {};
  }
  return {};
}

TEST(ConfigTest, EveryDefaultIsAccepted) {
  for (const Knob& knob : configKnobs()) {
    EXPECT_TRUE(checkKnobValue(knob, knob.defaultValue).isOk())
        << knob.name << ": " << checkKnobValue(knob, knob.defaultValue).toString();
    EXPECT_NE(knobRange(knob), "") << knob.name;
  }
}

// fault: every knob of the table set out of range, overflowing, non-numeric or unknown |
// InvalidArgument naming the knob, the value and the accepted range; readers return the default |
// config_test
TEST(ConfigTest, EveryKnobRefusesBadValuesNamingKnobValueAndRange) {
  int checked = 0;
  for (const Knob& knob : configKnobs()) {
    const bool secret = knob.kind == KnobKind::kSecret;
    for (const std::string& value : badValues(knob)) {
      Status st = checkKnobValue(knob, value);
      ++checked;
      ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << knob.name << "='" << value << "'";
      EXPECT_NE(st.message().find(knob.name), std::string::npos) << st.toString();
      EXPECT_NE(st.message().find("accepted: " + knobRange(knob)), std::string::npos)
          << st.toString();
      if (secret) {
        EXPECT_EQ(st.message().find(value), std::string::npos)
            << "secret echoed: " << st.toString();
      } else {
        EXPECT_NE(st.message().find("'" + value + "'"), std::string::npos) << st.toString();
      }
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(ConfigTest, ValidateRefusesBadEnvironmentAndReadersNeverOverflow) {
  setenv("COLLIE_TIMEOUT", "9999999999", 1);
  Status st = validateConfig();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("COLLIE_TIMEOUT='9999999999'"), std::string::npos) << st.toString();
  EXPECT_EQ(configDuration("COLLIE_TIMEOUT"), std::chrono::seconds(300));  // not an overflow
  unsetenv("COLLIE_TIMEOUT");
  setenv("COLLIE_TRACE_DEPTH", "1000000000000", 1);
  EXPECT_FALSE(validateConfig().isOk());
  EXPECT_EQ(configInt("COLLIE_TRACE_DEPTH"), 64);
  unsetenv("COLLIE_TRACE_DEPTH");
  EXPECT_TRUE(validateConfig().isOk());
}

TEST(ConfigTest, NcclAliasValuesCollieDoesNotKnowFallBackToTheDefault) {
  setenv("NCCL_DEBUG", "VERSION", 1);  // valid for NCCL, not for collie
  setenv("NCCL_ALGO", "^nvls", 1);
  EXPECT_TRUE(validateConfig().isOk());
  EXPECT_EQ(configString("COLLIE_DEBUG"), "WARN");
  EXPECT_EQ(configSource("COLLIE_DEBUG"), "default");
  EXPECT_EQ(configString("COLLIE_ALGO"), "auto");
  setenv("NCCL_ALGO", "Tree", 1);
  EXPECT_EQ(configString("COLLIE_ALGO"), "Tree");
  EXPECT_EQ(configSource("COLLIE_ALGO"), "NCCL_ALGO");
  unsetenv("NCCL_DEBUG");
  unsetenv("NCCL_ALGO");
}

TEST(ConfigTest, SecretsAreNeverDisplayed) {
  setenv("COLLIE_JOB_SECRET", "0123456789abcdef0123456789abcdef", 1);
  setenv("COLLIE_UNIQUE_ID", "collie1:127.0.0.1:1234:0123456789abcdef0123456789abcdef", 1);
  for (const char* name : {"COLLIE_JOB_SECRET", "COLLIE_UNIQUE_ID"}) {
    EXPECT_EQ(displayValue(*findKnob(name)), "(set, hidden)") << name;
  }
  unsetenv("COLLIE_JOB_SECRET");
  unsetenv("COLLIE_UNIQUE_ID");
}

// Communicator creation refuses to start on a bad knob (it crashed with bad_alloc on
// COLLIE_TRACE_DEPTH=1000000000000) and on an all-zero secret.
TEST(ConfigTest, CommunicatorRefusesBadKnobsAndZeroSecrets) {
  Options options;
  options.store = makeInMemoryStore();
  UniqueId id;
  id.host = "127.0.0.1";
  id.secret.fill(7);
  setenv("COLLIE_TRACE_DEPTH", "1000000000000", 1);
  Result<std::unique_ptr<Communicator>> comm = Communicator::create(id, 0, 1, options);
  unsetenv("COLLIE_TRACE_DEPTH");
  ASSERT_FALSE(comm.isOk());
  EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(comm.status().message().find("COLLIE_TRACE_DEPTH"), std::string::npos);
  comm = Communicator::create(id, 0, 1, options);
  ASSERT_TRUE(comm.isOk()) << comm.status().toString();
  comm->reset();
  id.secret.fill(0);
  comm = Communicator::create(id, 0, 1, options);
  ASSERT_FALSE(comm.isOk());
  EXPECT_NE(comm.status().message().find("all zeros"), std::string::npos)
      << comm.status().toString();
}

}  // namespace
}  // namespace collie
