// FailurePolicy: the first failure sticks; giveUp() explains an error about a peer
// with what that peer left in the failure reasons, publishes the sticky failure for the
// others, closes once (the close callback sees the sticky failure) and lets
// waitClosed() return; abort() raises the flag and makes Aborted sticky unless an
// error came first; a destroyed idle communicator publishes nothing.
#include "core/engine/failure_policy.h"

#include <gtest/gtest.h>

#include <thread>

namespace collie {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<FailureReasons> boardOf(const std::shared_ptr<Store>& store, int rank) {
  return std::make_unique<FailureReasons>(store, "job", rank);
}

TEST(FailurePolicyTest, HealthyUntilTheFirstFailureWhichSticks) {
  FailurePolicy policy(0, nullptr);
  EXPECT_TRUE(policy.failure().isOk());
  EXPECT_FALSE(policy.failing());
  EXPECT_FALSE(policy.closed());
  int closes = 0;
  Status seen;
  Status first =
      policy.giveUp(timeoutError("allreduce #3 timed out", 1), true, [&](const Status& sticky) {
        ++closes;
        seen = sticky;
      });
  EXPECT_EQ(first.code(), StatusCode::kTimeout);
  EXPECT_EQ(closes, 1);
  EXPECT_EQ(seen.message(), "allreduce #3 timed out");
  EXPECT_TRUE(policy.failing());
  EXPECT_TRUE(policy.closed());
  EXPECT_TRUE(policy.waitClosed(0ms));
  // Closed: a later error is returned as is, does not replace the sticky one and
  // closes nothing again.
  Status later = policy.giveUp(remoteError("late", 2), true, [&](const Status&) { ++closes; });
  EXPECT_EQ(later.message(), "late");
  EXPECT_EQ(closes, 1);
  EXPECT_EQ(policy.failure().message(), "allreduce #3 timed out");
  // Abort after a failure keeps the failure.
  policy.abort(abortedError("abort() called"));
  EXPECT_TRUE(policy.aborted());
  EXPECT_EQ(policy.failure().code(), StatusCode::kTimeout);
}

TEST(FailurePolicyTest, ExplainsWithThePeersReasonAndPublishesItsOwn) {
  std::shared_ptr<Store> store = makeInMemoryStore();
  // Rank 2 gave up first: it lost rank 5.
  FailurePolicy rank2(2, boardOf(store, 2));
  rank2.giveUp(remoteError("rank 5 closed its connection", 5), true, [](const Status&) {});
  // Rank 0 only sees rank 2 go silent; it reports rank 2's root cause.
  FailurePolicy rank0(0, boardOf(store, 0));
  Status explained =
      rank0.giveUp(timeoutError("waiting for rank 2", 2), true, [](const Status&) {});
  EXPECT_EQ(explained.code(), StatusCode::kRemoteError);
  EXPECT_EQ(explained.peer(), 5);
  EXPECT_NE(explained.message().find("waiting for rank 2"), std::string::npos);
  EXPECT_NE(explained.message().find("rank 2 gave up first: rank 5 closed its connection"),
            std::string::npos)
      << explained.toString();
  EXPECT_EQ(rank0.failure().peer(), 5);  // the explained error is the sticky one
  // And rank 0 published it in turn.
  std::optional<Status> published = FailureReasons(store, "job", 1).lookup(0, 1s);
  ASSERT_TRUE(published.has_value());
  EXPECT_EQ(published->peer(), 5);
}

TEST(FailurePolicyTest, AbortIsStickyAndWaitClosedFollowsGiveUp) {
  std::shared_ptr<Store> store = makeInMemoryStore();
  FailurePolicy policy(1, boardOf(store, 1));
  policy.abort(abortedError("abort() called on rank 1"));
  EXPECT_TRUE(policy.aborted());
  EXPECT_TRUE(policy.abortFlag().load());
  EXPECT_TRUE(policy.failing());
  EXPECT_EQ(policy.failure().code(), StatusCode::kAborted);
  EXPECT_FALSE(policy.waitClosed(10ms));  // nobody closed yet
  std::thread closer([&] {
    std::this_thread::sleep_for(20ms);
    // The progress thread closes with the sticky reason; an abort is not explained.
    policy.giveUp(policy.failure(), true, [](const Status&) {});
  });
  EXPECT_TRUE(policy.waitClosed(5s));
  closer.join();
  std::optional<Status> published = FailureReasons(store, "job", 0).lookup(1, 1s);
  ASSERT_TRUE(published.has_value());
  EXPECT_EQ(published->code(), StatusCode::kAborted);
}

TEST(FailurePolicyTest, DestroyedIdlePublishesNothing) {
  std::shared_ptr<Store> store = makeInMemoryStore();
  FailurePolicy policy(3, boardOf(store, 3));
  policy.abort(abortedError("communicator of rank 3 was destroyed"));
  bool closed = false;
  policy.giveUp(policy.failure(), false, [&](const Status&) { closed = true; });
  EXPECT_TRUE(closed);
  EXPECT_TRUE(policy.closed());
  EXPECT_FALSE(FailureReasons(store, "job", 0).lookup(3, 50ms).has_value());
}

}  // namespace
}  // namespace collie
