// The wait policy (core/transport/wait_policy.h): the CPUs a rank counts, and how it waits
// with a core per rank and with more ranks than cores.
#include "core/transport/wait_policy.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <map>
#include <string>

namespace collie {
namespace {

using namespace std::chrono_literals;

WaitKnobs waitKnobsOf(const std::map<std::string, std::string>& variables) {
  Result<WaitKnobs> knobs = WaitKnobs::parse(Config::fromVariables(variables));
  EXPECT_TRUE(knobs.isOk()) << knobs.status().toString();
  return knobs.isOk() ? *knobs : WaitKnobs{};
}

TEST(WaitPolicy, CountsTheAffinityMaskUnlessCollieCpusSaysOtherwise) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(cpusAvailable(waitKnobsOf({})), CPU_COUNT(&set));
  EXPECT_EQ(cpusAvailable(waitKnobsOf({{"COLLIE_CPUS", "0"}})), CPU_COUNT(&set));
  EXPECT_EQ(cpusAvailable(waitKnobsOf({{"COLLIE_CPUS", "3"}})), 3);
}

TEST(WaitPolicy, ACorePerRankKeepsTheConfiguredPoll) {
  for (int ranks : {1, 2, 4}) {
    const WaitPolicy policy = waitPolicyFor(50us, ranks, 4);
    EXPECT_FALSE(policy.oversubscribed) << ranks;
    EXPECT_EQ(policy.busyPoll, 50us);
    EXPECT_EQ(policy.pureSpin, kPureSpin);
  }
  // A poll shorter than the pure spin bounds it.
  EXPECT_EQ(waitPolicyFor(2us, 2, 2).pureSpin, 2us);
}

TEST(WaitPolicy, MoreRanksThanCoresYieldFromTheStart) {
  for (int ranks : {3, 4, 8}) {
    const WaitPolicy policy = waitPolicyFor(50us, ranks, 2);
    EXPECT_TRUE(policy.oversubscribed) << ranks;
    EXPECT_EQ(policy.pureSpin, 0us);
    EXPECT_EQ(policy.busyPoll, 50us);  // it still polls, yielding, before it blocks
  }
  // Zero CPUs (a bad count) reads as one.
  EXPECT_TRUE(waitPolicyFor(50us, 2, 0).oversubscribed);
  EXPECT_FALSE(waitPolicyFor(50us, 1, 0).oversubscribed);
}

}  // namespace
}  // namespace collie
