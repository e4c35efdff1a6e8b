// COLLIE_IB_HCA parsing and matching (NCCL_IB_HCA syntax); needs no device.
#include <gtest/gtest.h>

#include "transports/ibverbs/ib_device.h"

namespace collie::ib {
namespace {

TEST(IbHca, EmptySpecSelectsEverything) { EXPECT_TRUE(hcaMatches(parseHcaSpec(""), "mlx5_0", 1)); }

TEST(IbHca, PrefixAndPort) {
  HcaSpec spec = parseHcaSpec("mlx5_0:1,mlx5_1");
  ASSERT_EQ(spec.entries.size(), 2u);
  EXPECT_EQ(spec.entries[0].port, 1);
  EXPECT_EQ(spec.entries[1].port, -1);
  EXPECT_TRUE(hcaMatches(spec, "mlx5_0", 1));
  EXPECT_FALSE(hcaMatches(spec, "mlx5_0", 2));
  EXPECT_TRUE(hcaMatches(spec, "mlx5_1", 2));
  EXPECT_TRUE(hcaMatches(spec, "mlx5_10", 1));  // prefix
  EXPECT_FALSE(hcaMatches(spec, "mlx4_0", 1));
}

TEST(IbHca, ExactAndExclude) {
  EXPECT_FALSE(hcaMatches(parseHcaSpec("=mlx5_1"), "mlx5_10", 1));
  EXPECT_TRUE(hcaMatches(parseHcaSpec("=mlx5_1"), "mlx5_1", 1));
  HcaSpec exclude = parseHcaSpec("^mlx5_0:1");
  EXPECT_TRUE(exclude.exclude);
  EXPECT_FALSE(hcaMatches(exclude, "mlx5_0", 1));
  EXPECT_TRUE(hcaMatches(exclude, "mlx5_0", 2));
  EXPECT_TRUE(hcaMatches(exclude, "mlx5_1", 1));
  HcaSpec both = parseHcaSpec("^=mlx5_1");
  EXPECT_TRUE(both.exclude && both.exact);
  EXPECT_TRUE(hcaMatches(both, "mlx5_10", 1));
  EXPECT_FALSE(hcaMatches(both, "mlx5_1", 1));
}

TEST(IbHca, MalformedPortMatchesAnyPort) {
  HcaSpec spec = parseHcaSpec("mlx5_0:x,,");
  ASSERT_EQ(spec.entries.size(), 1u);
  EXPECT_EQ(spec.entries[0].port, -1);
}

}  // namespace
}  // namespace collie::ib
