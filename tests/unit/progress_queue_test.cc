// ProgressQueue: tags count per collective and per peer and direction; the progress
// thread runs operations one at a time in submission order and completes their Work
// with the runner's status; an inline claim holds the thread off until released;
// after a failure nothing runs ("not run"); abort() has an idle thread close the
// connections; stop() fails what is left; takePointToPoint() takes only point-to-point
// operations from the front; pushFront() queues ahead of everything.
#include "core/engine/progress_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/plan/fingerprint.h"

namespace collie {
namespace {

using namespace std::chrono_literals;

// `rank` is a send's or recv's peer, else the root.
CollectiveArgs argsOf(CollectiveKind kind, int rank = 0, size_t count = 8) {
  CollectiveArgs args;
  args.kind = kind;
  (isPointToPoint(kind) ? args.peer : args.root) = rank;
  args.count = count;
  return args;
}

Pending pendingOf(const CollectiveArgs& args) {
  auto schedule = std::make_shared<Schedule>();
  schedule->args = args;
  return makePending(schedule, nullptr, nullptr, 0, std::make_shared<WorkState>());
}

// Records what it runs and returns `result` for each; closes like the engine does
// (through the failure policy).
class RecordingRunner : public ProgressQueue::Runner {
 public:
  explicit RecordingRunner(FailurePolicy* failures) : failures(failures) {}
  Status run(Pending& pending) override {
    std::unique_lock<std::mutex> lock(mutex);
    ran.push_back(pending.schedule->args.count);
    events.push_back("run " + std::to_string(pending.schedule->args.count));
    tags.push_back(pending.tag);
    threads.push_back(std::this_thread::get_id());
    // As the engine's batch does: a point-to-point run may leave operations in flight.
    if (parkOnRun && isPointToPoint(pending)) parked = true;
    cv.notify_all();
    return result;
  }
  bool hasParked() const override { return parked; }
  void resumeParked() override {
    std::unique_lock<std::mutex> lock(mutex);
    parked = false;
    resumedOn.push_back(std::this_thread::get_id());
    events.push_back("resume");
    cv.notify_all();
  }
  void closeIdle(const Status& reason, bool publish) override {
    failures->giveUp(reason, publish, [](const Status&) {});
    std::lock_guard<std::mutex> lock(mutex);
    closes.push_back({reason, publish});
    cv.notify_all();
  }
  template <typename Pred>
  bool waitFor(Pred pred) {
    std::unique_lock<std::mutex> lock(mutex);
    return cv.wait_for(lock, 5s, pred);
  }

  FailurePolicy* const failures;
  std::mutex mutex;
  std::condition_variable cv;
  Status result;
  std::vector<size_t> ran;
  std::vector<uint64_t> tags;
  std::vector<std::thread::id> threads;
  std::vector<std::pair<Status, bool>> closes;
  bool parkOnRun = false;
  std::atomic<bool> parked{false};
  std::vector<std::thread::id> resumedOn;
  std::vector<std::string> events;  // runs and resumes, in order
};

struct QueueFixture {
  QueueFixture() : failures(0, nullptr), recorder(16), queue(4, &failures, &recorder) {}
  FailurePolicy failures;
  FlightRecorder recorder;
  ProgressQueue queue;
};

TEST(ProgressQueueTest, TagsCountPerCollectiveAndPerPeerAndDirection) {
  QueueFixture f;
  auto sequenceOf = [&](const CollectiveArgs& args) {
    return decodeFingerprint(f.queue.tagInline(args)).sequence;
  };
  EXPECT_EQ(sequenceOf(argsOf(CollectiveKind::kAllReduce)), 0u);
  EXPECT_EQ(sequenceOf(argsOf(CollectiveKind::kSend, 1)), 0u);
  EXPECT_EQ(sequenceOf(argsOf(CollectiveKind::kSend, 1)), 1u);
  EXPECT_EQ(sequenceOf(argsOf(CollectiveKind::kRecv, 1)), 0u);  // other direction
  EXPECT_EQ(sequenceOf(argsOf(CollectiveKind::kSend, 2)), 0u);  // other peer
  EXPECT_EQ(sequenceOf(argsOf(CollectiveKind::kBroadcast)), 1u);
  // Queued operations draw from the same counters.
  RecordingRunner runner(&f.failures);
  f.queue.start(&runner);
  Pending send = pendingOf(argsOf(CollectiveKind::kSend, 1));
  Work sent(send.work);
  f.queue.push(std::move(send), "p2p");
  EXPECT_TRUE(sent.wait(5s).isOk());
  ASSERT_EQ(runner.tags.size(), 1u);
  EXPECT_EQ(decodeFingerprint(runner.tags[0]).sequence, 2u);
  EXPECT_EQ(decodeFingerprint(runner.tags[0]).kind, CollectiveKind::kSend);
  f.queue.stop(abortedError("done"));
}

TEST(ProgressQueueTest, RunsInOrderOnItsThreadAndCompletesTheWork) {
  QueueFixture f;
  RecordingRunner runner(&f.failures);
  runner.result = remoteError("runner said so", 2);
  f.queue.start(&runner);
  std::vector<Work> works;
  for (size_t count = 1; count <= 5; ++count) {
    Pending pending = pendingOf(argsOf(CollectiveKind::kAllReduce, 0, count));
    works.emplace_back(pending.work);
    f.queue.push(std::move(pending), "ring");
  }
  for (Work& work : works) EXPECT_EQ(work.wait(5s).code(), StatusCode::kRemoteError);
  EXPECT_EQ(runner.ran, (std::vector<size_t>{1, 2, 3, 4, 5}));
  for (std::thread::id id : runner.threads) EXPECT_NE(id, std::this_thread::get_id());
  EXPECT_EQ(f.queue.queued(), 0u);
  f.queue.stop(abortedError("done"));
}

TEST(ProgressQueueTest, InlineClaimHoldsTheThreadOff) {
  QueueFixture f;
  RecordingRunner runner(&f.failures);
  f.queue.start(&runner);
  ASSERT_TRUE(f.queue.claimIdle());
  EXPECT_FALSE(f.queue.claimIdle());  // one claim at a time
  Pending pending = pendingOf(argsOf(CollectiveKind::kAllReduce, 0, 7));
  Work work(pending.work);
  f.queue.push(std::move(pending), "ring");
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(work.test());  // the claim holds it
  EXPECT_EQ(f.queue.queued(), 1u);
  f.queue.releaseInline();  // wakes the thread: something is queued
  EXPECT_TRUE(work.wait(5s).isOk());
  EXPECT_EQ(runner.ran, (std::vector<size_t>{7}));
  // Nothing queued or running: the claim is free again.
  ASSERT_TRUE(f.queue.claimIdle());
  f.queue.releaseInline();
  f.queue.stop(abortedError("done"));
}

// releaseInline() may miss a push made while it held the claim (no fence between its
// store and its look): the progress thread, which found the claim taken, tries again
// on its own within kClaimRetry.
TEST(ProgressQueueTest, APushTheReleaseMissedStillRuns) {
  QueueFixture f;
  RecordingRunner runner(&f.failures);
  f.queue.start(&runner);
  ASSERT_TRUE(f.queue.claimIdle());
  Pending pending = pendingOf(argsOf(CollectiveKind::kAllReduce, 0, 9));
  Work work(pending.work);
  f.queue.push(std::move(pending), "ring");
  std::this_thread::sleep_for(20ms);  // the thread woke, found the claim taken
  EXPECT_FALSE(work.test());
  f.queue.releaseWithoutWake();
  EXPECT_TRUE(work.wait(5s).isOk());
  EXPECT_EQ(runner.ran, (std::vector<size_t>{9}));
  f.queue.stop(abortedError("done"));
}

TEST(ProgressQueueTest, NothingRunsAfterAFailure) {
  QueueFixture f;
  RecordingRunner runner(&f.failures);
  ASSERT_TRUE(f.queue.claimIdle());  // hold the thread while queueing
  f.queue.start(&runner);
  Pending queued = pendingOf(argsOf(CollectiveKind::kAllReduce, 0, 1));
  Work queuedWork(queued.work);
  f.queue.push(std::move(queued), "ring");
  f.failures.giveUp(timeoutError("rank 3 went silent", 3), false, [](const Status&) {});
  EXPECT_FALSE(f.queue.claimIdle());
  f.queue.releaseInline();
  Status status = queuedWork.wait(5s);
  EXPECT_EQ(status.code(), StatusCode::kTimeout);
  EXPECT_NE(status.message().find("not run"), std::string::npos) << status.toString();
  EXPECT_NE(status.message().find("rank 3 went silent"), std::string::npos);
  // Submitted after it: failed at once.
  Pending later = pendingOf(argsOf(CollectiveKind::kAllReduce, 0, 2));
  Work laterWork(later.work);
  f.queue.push(std::move(later), "ring");
  EXPECT_TRUE(laterWork.test());
  EXPECT_EQ(laterWork.status().code(), StatusCode::kTimeout);
  EXPECT_TRUE(runner.ran.empty());
  std::vector<FlightEntry> entries = f.recorder.snapshot();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].state, FlightState::kFailed);
  EXPECT_EQ(entries[1].state, FlightState::kFailed);
  f.queue.stop(abortedError("done"));
}

TEST(ProgressQueueTest, AbortHasTheIdleThreadCloseAndStopFailsWhatIsLeft) {
  QueueFixture f;
  RecordingRunner runner(&f.failures);
  f.queue.start(&runner);
  f.queue.abort(abortedError("abort() called"));
  ASSERT_TRUE(runner.waitFor([&] { return !runner.closes.empty(); }));
  EXPECT_EQ(runner.closes[0].first.code(), StatusCode::kAborted);
  EXPECT_TRUE(runner.closes[0].second);  // an abort is news for the peers
  EXPECT_TRUE(f.failures.failing());
  f.queue.stop(abortedError("done"));

  QueueFixture g;
  RecordingRunner idle(&g.failures);
  ASSERT_TRUE(g.queue.claimIdle());
  g.queue.start(&idle);
  Pending left = pendingOf(argsOf(CollectiveKind::kAllReduce, 0, 3));
  Work leftWork(left.work);
  g.queue.push(std::move(left), "ring");
  std::thread releaser([&] {
    std::this_thread::sleep_for(20ms);
    g.queue.releaseInline();
  });
  g.queue.stop(abortedError("communicator of rank 0 was destroyed"));
  releaser.join();
  Status status = leftWork.wait(5s);
  EXPECT_EQ(status.code(), StatusCode::kAborted);
  EXPECT_TRUE(idle.ran.empty());
  // The thread closed the idle connections without publishing (a destruction).
  for (const auto& close : idle.closes) EXPECT_FALSE(close.second);
}

TEST(ProgressQueueTest, TakesPointToPointOnlyFromTheFront) {
  QueueFixture f;  // not started: nothing takes from the queue but the test
  Pending out;
  EXPECT_FALSE(f.queue.takePointToPoint(&out));
  f.queue.push(pendingOf(argsOf(CollectiveKind::kSend, 1, 1)), "p2p");
  f.queue.push(pendingOf(argsOf(CollectiveKind::kRecv, 2, 2)), "p2p");
  f.queue.push(pendingOf(argsOf(CollectiveKind::kAllReduce, 0, 3)), "ring");
  f.queue.push(pendingOf(argsOf(CollectiveKind::kSend, 1, 4)), "p2p");
  std::vector<size_t> taken;
  while (f.queue.takePointToPoint(&out)) taken.push_back(out.schedule->args.count);
  EXPECT_EQ(taken, (std::vector<size_t>{1, 2}));
  EXPECT_EQ(f.queue.queued(), 2u);
  f.queue.stop(abortedError("done"));
}

TEST(ProgressQueueTest, PushFrontGoesAheadOfEverythingQueued) {
  QueueFixture f;
  RecordingRunner runner(&f.failures);
  ASSERT_TRUE(f.queue.claimIdle());  // hold the thread off while queueing
  f.queue.start(&runner);
  std::vector<Work> works;
  for (size_t count : {1, 2}) {
    Pending pending = pendingOf(argsOf(CollectiveKind::kAllReduce, 0, count));
    works.emplace_back(pending.work);
    f.queue.push(std::move(pending), "ring");
  }
  Pending front = pendingOf(argsOf(CollectiveKind::kAllReduce, 0, 3));
  works.emplace_back(front.work);
  f.queue.pushFront(std::move(front));  // a declined team step's fallback
  f.queue.releaseInline();
  for (Work& work : works) EXPECT_TRUE(work.wait(5s).isOk());
  EXPECT_EQ(runner.ran, (std::vector<size_t>{3, 1, 2}));
  f.queue.stop(abortedError("done"));
}

// A waiter's point-to-point run that leaves operations in flight: no collective starts
// (inline or queued) until the progress thread has resumed them, and it does so at once.
TEST(ProgressQueueTest, WhatAWaiterLeftInFlightIsResumedBeforeAnythingElse) {
  QueueFixture f;
  RecordingRunner runner(&f.failures);
  runner.parkOnRun = true;
  ASSERT_TRUE(f.queue.claimIdle());  // hold the thread off while queueing
  f.queue.start(&runner);
  Pending recv = pendingOf(argsOf(CollectiveKind::kRecv, 1, 1));
  Work recvWork(recv.work);
  const WorkState* recvState = recv.work.get();
  f.queue.push(std::move(recv), "p2p");
  Pending collective = pendingOf(argsOf(CollectiveKind::kAllReduce, 0, 2));
  Work collectiveWork(collective.work);
  f.queue.push(std::move(collective), "ring");
  f.queue.releaseWithoutWake();
  // The progress thread may have taken the receive first; then there is nothing to test.
  if (!f.queue.runIfNext(recvState)) GTEST_SKIP() << "the progress thread ran it first";
  EXPECT_TRUE(recvWork.test());
  ASSERT_TRUE(runner.waitFor([&] { return !runner.resumedOn.empty(); }));
  EXPECT_TRUE(collectiveWork.wait(5s).isOk());
  {
    std::lock_guard<std::mutex> lock(runner.mutex);
    EXPECT_EQ(runner.events, (std::vector<std::string>{"run 1", "resume", "run 2"}));
    ASSERT_EQ(runner.resumedOn.size(), 1u);
    EXPECT_NE(runner.resumedOn[0], std::this_thread::get_id());
  }
  f.queue.stop(abortedError("done"));
}

TEST(ProgressQueueTest, ACollectiveIsNotClaimedWhileSomethingIsParked) {
  QueueFixture f;
  RecordingRunner runner(&f.failures);
  runner.parkOnRun = true;
  f.queue.start(&runner);
  ASSERT_TRUE(f.queue.claimIdle());
  Pending send = pendingOf(argsOf(CollectiveKind::kSend, 1, 1));
  const WorkState* sendState = send.work.get();
  Work sendWork(send.work);
  f.queue.push(std::move(send), "p2p");
  f.queue.releaseWithoutWake();
  if (!f.queue.runIfNext(sendState)) GTEST_SKIP() << "the progress thread ran it first";
  // Until the progress thread resumed the parked operations, the claim is not idle.
  bool claimedWhileParked = false;
  while (runner.parked.load()) {
    if (f.queue.claimIdle()) {
      claimedWhileParked = runner.parked.load();
      f.queue.releaseInline();
    }
  }
  EXPECT_FALSE(claimedWhileParked);
  ASSERT_TRUE(runner.waitFor([&] { return !runner.resumedOn.empty(); }));
  f.queue.stop(abortedError("done"));
}

// A quiet push (its submitter was seen to wait at once) that nobody waits for after all
// still runs: the progress thread looks at the queue every kQuietTick.
TEST(ProgressQueueTest, AQuietPushNobodyWaitsForStillRuns) {
  QueueFixture f;
  RecordingRunner runner(&f.failures);
  f.queue.start(&runner);
  for (size_t count = 1; count <= 3; ++count) {
    Pending send = pendingOf(argsOf(CollectiveKind::kSend, 1, count));
    Work work(send.work);
    f.queue.push(std::move(send), "p2p", /*quietAt=*/std::chrono::steady_clock::now());
    EXPECT_TRUE(work.wait(5s).isOk());  // a short deadline: never run by the waiter
    std::this_thread::sleep_for(30ms);  // the progress thread is asleep again
  }
  EXPECT_EQ(runner.ran, (std::vector<size_t>{1, 2, 3}));
  for (std::thread::id id : runner.threads) EXPECT_NE(id, std::this_thread::get_id());
  f.queue.stop(abortedError("done"));
}

}  // namespace
}  // namespace collie
