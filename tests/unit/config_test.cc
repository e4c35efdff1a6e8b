#include "core/config/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

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
  EXPECT_EQ(configInt("COLLIE_BUFFSIZE"), 4 << 20);  // malformed: default, with a warning
  unsetenv("COLLIE_BUFFSIZE");
  unsetenv("NCCL_BUFFSIZE");
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

}  // namespace
}  // namespace collie
