// A thread that waits for its own point-to-point operation runs it (ProgressQueue::
// runIfNext), and once the operations are seen to be waited for at once they are queued
// without waking the progress thread (quiet pushes). What must hold, over shm and tcp:
// - a blocking ping-pong gives every byte back, and its waits do run their operations;
// - a waiter returns once its own operation is done, even when its batch took in another
//   that can only finish after the waiter's caller has gone on (here: a receive whose
//   send the peer makes only after a message the waiter's caller sends next);
// - a send queued quietly that its caller does not wait for still goes out: the peer
//   receives it while the sender waits for something else altogether.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "core/engine/progress_queue.h"
#include "support/rank_threads.h"

namespace collie {
namespace {

using namespace std::chrono_literals;  // NOLINT(build/namespaces)

class PointToPointWaiterTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::vector<std::unique_ptr<Communicator>> makeComms() {
    Options options;
    options.transport = GetParam();
    options.timeout = 10s;  // a deadlock fails in 10 s, not COLLIE_TIMEOUT's 300
    return testing::makeCommunicators(2, options);
  }
};

Status sendAndWait(Communicator& comm, const void* data, size_t count, int peer) {
  Result<Work> work = comm.send(data, count, DataType::kInt32, peer);
  return work.isOk() ? work->wait() : work.status();
}

Status recvAndWait(Communicator& comm, void* data, size_t count, int peer) {
  Result<Work> work = comm.recv(data, count, DataType::kInt32, peer);
  return work.isOk() ? work->wait() : work.status();
}

// Rounds of a blocking ping-pong of `count` elements: rank 0 sends and receives back,
// rank 1 the other way round and adds one. Appends what went wrong to errors[rank].
void pingPong(Communicator& comm, int rank, int rounds, size_t count, std::string* error) {
  std::vector<int32_t> buf(count);
  for (int round = 0; round < rounds && error->empty(); ++round) {
    Status status;
    if (rank == 0) {
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<int32_t>(round * 7919 + i);
      status = sendAndWait(comm, buf.data(), count, 1);
      if (status.isOk()) status = recvAndWait(comm, buf.data(), count, 1);
      for (size_t i = 0; status.isOk() && i < count; ++i) {
        if (buf[i] != static_cast<int32_t>(round * 7919 + i + 1)) {
          *error += "round " + std::to_string(round) + ": element " + std::to_string(i) + " is " +
                    std::to_string(buf[i]);
          return;
        }
      }
    } else {
      status = recvAndWait(comm, buf.data(), count, 0);
      for (int32_t& x : buf) ++x;
      if (status.isOk()) status = sendAndWait(comm, buf.data(), count, 0);
    }
    if (!status.isOk()) *error += status.toString();
  }
}

TEST_P(PointToPointWaiterTest, ABlockingPingPongIsExactAndItsWaitersRunIt) {
  auto comms = makeComms();
  ASSERT_EQ(comms.size(), 2u);
  const uint64_t before = ProgressQueue::waiterRunCount();
  std::vector<std::string> errors(2);
  testing::onEveryRank(2, [&](int r) {
    for (size_t count : {size_t{1}, size_t{1000}, size_t{300000}}) {
      pingPong(*comms[r], r, 50, count, &errors[r]);
    }
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  // 300 blocking operations on each rank: once the quiet pushes start nothing else takes
  // them from the waiters but the progress thread's look every 10 ms.
  EXPECT_GT(ProgressQueue::waiterRunCount(), before);
}

TEST_P(PointToPointWaiterTest, AWaiterReturnsOnceItsOwnOperationIsDone) {
  auto comms = makeComms();
  ASSERT_EQ(comms.size(), 2u);
  constexpr size_t kLater = 1 << 20;
  std::vector<std::string> errors(2);
  testing::onEveryRank(2, [&](int r) {
    Communicator& comm = *comms[r];
    pingPong(comm, r, 10, 16, &errors[r]);  // the waits are seen to come at once
    std::vector<int32_t> first(16, r == 0 ? -1 : 11);
    std::vector<int32_t> later(kLater, -1);
    std::vector<int32_t> go(16, r == 0 ? 22 : -1);
    Status status;
    if (r == 0) {
      // Two receives queued together, waited for one at a time: the peer sends the
      // second only after `go`, which this thread sends once the first wait returns.
      Result<Work> receiveFirst = comm.recv(first.data(), first.size(), DataType::kInt32, 1);
      Result<Work> receiveLater = comm.recv(later.data(), kLater, DataType::kInt32, 1);
      if (!receiveFirst.isOk() || !receiveLater.isOk()) {
        errors[r] += "posting failed";
        return;
      }
      status = receiveFirst->wait();
      if (status.isOk()) status = sendAndWait(comm, go.data(), go.size(), 1);
      if (status.isOk()) status = receiveLater->wait();
      if (status.isOk() && first != std::vector<int32_t>(16, 11)) errors[r] += "wrong first";
      for (size_t i = 0; status.isOk() && i < kLater; ++i) {
        if (later[i] != static_cast<int32_t>(i * 3)) {
          errors[r] += "later element " + std::to_string(i) + " is " + std::to_string(later[i]);
          break;
        }
      }
    } else {
      for (size_t i = 0; i < kLater; ++i) later[i] = static_cast<int32_t>(i * 3);
      status = sendAndWait(comm, first.data(), first.size(), 0);
      if (status.isOk()) status = recvAndWait(comm, go.data(), go.size(), 0);
      if (status.isOk()) status = sendAndWait(comm, later.data(), kLater, 0);
      if (status.isOk() && go != std::vector<int32_t>(16, 22)) errors[r] += "wrong go";
    }
    if (!status.isOk()) errors[r] += status.toString();
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST_P(PointToPointWaiterTest, ASendItsCallerDoesNotWaitForStillGoesOut) {
  auto comms = makeComms();
  ASSERT_EQ(comms.size(), 2u);
  std::atomic<bool> received{false};
  std::vector<std::string> errors(2);
  testing::onEveryRank(2, [&](int r) {
    Communicator& comm = *comms[r];
    pingPong(comm, r, 10, 16, &errors[r]);  // the next send is queued quietly
    std::vector<int32_t> data(64, r == 0 ? 5 : -1);
    if (r == 0) {
      Result<Work> send = comm.send(data.data(), data.size(), DataType::kInt32, 1);
      if (!send.isOk()) {
        errors[r] += send.status().toString();
        return;
      }
      // Waits for the peer, not for the Work: nobody runs the send on this thread.
      const auto deadline = std::chrono::steady_clock::now() + 5s;
      while (!received.load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
      }
      if (!received.load()) errors[r] += "the peer never got the send";
      Status status = send->wait();
      if (!status.isOk()) errors[r] += status.toString();
    } else {
      Status status = recvAndWait(comm, data.data(), data.size(), 0);
      if (!status.isOk()) errors[r] += status.toString();
      if (data != std::vector<int32_t>(64, 5)) errors[r] += "wrong data";
      received.store(true);
    }
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Transports, PointToPointWaiterTest, ::testing::Values("shm", "tcp"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

}  // namespace
}  // namespace collie
