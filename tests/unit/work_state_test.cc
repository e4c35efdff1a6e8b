// WorkState: completion wakes waiters with the final status, a wait deadline returns
// Timeout without ending the collective, a poller is called (one call at a time) until
// it returns a status, succeeded() is one shared OK state, and an empty Work handle
// behaves as documented.
#include "core/engine/work_state.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace collie {
namespace {

using namespace std::chrono_literals;

TEST(WorkStateTest, CompleteWakesAWaiterWithTheStatus) {
  auto state = std::make_shared<WorkState>();
  Work work(state);
  EXPECT_FALSE(work.test());
  EXPECT_TRUE(work.status().isOk());  // OK while running
  std::thread completer([&] {
    std::this_thread::sleep_for(20ms);
    state->complete(remoteError("rank 1 went away", 1));
  });
  Status status = work.wait();
  completer.join();
  EXPECT_EQ(status.code(), StatusCode::kRemoteError);
  EXPECT_EQ(status.peer(), 1);
  EXPECT_TRUE(work.test());
  EXPECT_EQ(work.status().code(), StatusCode::kRemoteError);
  EXPECT_EQ(Work(state).wait(0ms).code(), StatusCode::kRemoteError);  // copies share it
}

TEST(WorkStateTest, WaitDeadlinePassesWithoutEndingTheCollective) {
  auto state = std::make_shared<WorkState>();
  const auto start = std::chrono::steady_clock::now();
  Status status = state->wait(30ms);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 30ms);
  EXPECT_EQ(status.code(), StatusCode::kTimeout);
  EXPECT_NE(status.message().find("Work::wait deadline"), std::string::npos) << status.toString();
  EXPECT_FALSE(state->test());
  state->complete(Status());
  EXPECT_TRUE(state->wait(0ms).isOk());
}

TEST(WorkStateTest, PollerRunsUntilItReturnsAStatusOneCallAtATime) {
  std::atomic<int> calls{0};
  std::atomic<int> inside{0};
  std::atomic<int> mostInside{0};
  auto state = std::make_shared<WorkState>([&]() -> std::optional<Status> {
    const int now = ++inside;
    int most = mostInside.load();
    while (now > most && !mostInside.compare_exchange_weak(most, now)) {
    }
    std::this_thread::sleep_for(100us);
    --inside;
    if (++calls < 50) return std::nullopt;
    return invalidArgument("device said no");
  });
  EXPECT_FALSE(state->test());
  std::vector<std::thread> testers;
  for (int t = 0; t < 4; ++t) {
    testers.emplace_back([&] {
      while (!state->test()) {
      }
    });
  }
  Status status = state->wait(10s);
  for (std::thread& t : testers) t.join();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(calls.load(), 50);  // not called again once done
  EXPECT_EQ(mostInside.load(), 1);
  EXPECT_EQ(state->status().code(), StatusCode::kInvalidArgument);
}

TEST(WorkStateTest, PollerWaitDeadline) {
  auto state = std::make_shared<WorkState>([]() -> std::optional<Status> { return std::nullopt; });
  Status status = state->wait(20ms);
  EXPECT_EQ(status.code(), StatusCode::kTimeout);
  EXPECT_FALSE(state->test());
}

TEST(WorkStateTest, SucceededIsOneSharedOkState) {
  std::shared_ptr<WorkState> a = WorkState::succeeded();
  std::shared_ptr<WorkState> b = WorkState::succeeded();
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a.use_count(), 0);  // no reference counting
  EXPECT_TRUE(a->test());
  EXPECT_TRUE(Work(a).wait(0ms).isOk());
}

TEST(WorkStateTest, EmptyHandle) {
  Work empty;
  EXPECT_EQ(empty.wait().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(empty.test());
  EXPECT_TRUE(empty.status().isOk());
}

}  // namespace
}  // namespace collie
