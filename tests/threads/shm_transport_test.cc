// The shm transport with ranks as threads of one process (each rank maps the others'
// segments, exactly as processes would). The tag and length mismatch is checked with
// every other transport's by tests/transport/conformance_test.cc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "tests/support/smaps.h"
#include "threads/shm_test_util.h"

namespace collie::testing {
namespace {

using std::chrono::milliseconds;

std::string uniqueJobKey(const std::string& name) {
  static std::atomic<int> counter{0};
  return "shmtest-" + name + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

// Connects `nranks` ranks, one thread each, with FIFOs of `buffSize` (COLLIE_BUFFSIZE;
// "": the default); fails the test on any error.
std::vector<ShmRank> connectAll(int nranks, int nchannels, const std::string& jobKey,
                                const std::string& buffSize = "") {
  auto store = makeInMemoryStore();
  std::vector<ShmRank> ranks(nranks);
  std::vector<Status> status(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      status[r] = connectShmRank(
          shmContext(store, jobKey, r, nranks, nchannels, {{"COLLIE_BUFFSIZE", buffSize}}),
          &ranks[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; ++r) EXPECT_TRUE(status[r].isOk()) << status[r].toString();
  // Every segment name was unlinked once all peers mapped it.
  for (int r = 0; r < nranks; ++r) {
    auto entry = store->get(jobKey + "/shm/" + std::to_string(r), Clock::now());
    EXPECT_TRUE(entry.isOk());
    if (!entry.isOk()) continue;
    std::string text(entry->begin(), entry->end());
    std::string path = "/dev/shm" + text.substr(0, text.find(' '));
    EXPECT_NE(access(path.c_str(), F_OK), 0) << path << " was left in /dev/shm";
  }
  return ranks;
}

// Runs `body(rank)` on one thread per rank and returns each rank's status.
template <typename Body>
std::vector<Status> runRanks(int nranks, Body body) {
  std::vector<Status> status(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) threads.emplace_back([&, r] { status[r] = body(r); });
  for (auto& t : threads) t.join();
  return status;
}

class ShmAllPairsTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmAllPairsTest, EveryPairExchangesEverySizeBothWays) {
  const int nranks = GetParam();
  const int nchannels = 2;
  const size_t fifo = 64 * 1024;
  const std::vector<size_t> sizes = {0, 1, 4097, 3 * fifo + 5};
  std::vector<ShmRank> ranks = connectAll(nranks, nchannels, uniqueJobKey("pairs"), "64K");
  ASSERT_FALSE(HasFailure());

  auto status = runRanks(nranks, [&](int me) -> Status {
    ShmRank& rank = ranks[me];
    std::vector<std::vector<uint8_t>> sendBufs, recvBufs;
    std::vector<Completion> done(2 * (nranks - 1) * nchannels * sizes.size());
    std::vector<Completion*> all;
    size_t next = 0;
    struct Expect {
      int src, ch, msg;
      size_t buf;
    };
    std::vector<Expect> expects;
    for (int peer : rank.peers) {
      for (int ch = 0; ch < nchannels; ++ch) {
        for (int m = 0; m < static_cast<int>(sizes.size()); ++m) {
          std::vector<uint8_t> out(sizes[m]);
          for (size_t i = 0; i < out.size(); ++i) out[i] = patternByte(me, peer, ch, m, i);
          sendBufs.push_back(std::move(out));
          recvBufs.emplace_back(sizes[m], 0);
        }
      }
    }
    size_t buf = 0;
    for (int peer : rank.peers) {
      for (int ch = 0; ch < nchannels; ++ch) {
        for (int m = 0; m < static_cast<int>(sizes.size()); ++m, ++buf) {
          Connection* c = rank.conn(peer, ch);
          Completion* r = &done[next++];
          Completion* s = &done[next++];
          COLLIE_RETURN_IF_ERROR(
              c->postRecv(recvBufs[buf].data(), sizes[m], testTag(peer, me, ch, m), r));
          COLLIE_RETURN_IF_ERROR(
              c->postSend(sendBufs[buf].data(), sizes[m], testTag(me, peer, ch, m), s));
          all.push_back(r);
          all.push_back(s);
          expects.push_back({peer, ch, m, buf});
        }
      }
    }
    COLLIE_RETURN_IF_ERROR(driveShm(rank.transport.get(), rank.all(), all, milliseconds(20000)));
    for (Completion* c : all) COLLIE_RETURN_IF_ERROR(c->status);
    for (const Expect& e : expects) {
      const auto& got = recvBufs[e.buf];
      for (size_t i = 0; i < got.size(); ++i) {
        if (got[i] != patternByte(e.src, me, e.ch, e.msg, i)) {
          return internalError("rank " + std::to_string(me) + ": byte " + std::to_string(i) +
                               " from rank " + std::to_string(e.src) + " is wrong");
        }
      }
    }
    return Status();
  });
  for (int r = 0; r < nranks; ++r) EXPECT_TRUE(status[r].isOk()) << status[r].toString();
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmAllPairsTest, ::testing::Values(2, 3, 4));

TEST(ShmTransportTest, ManySmallMessagesArriveInOrder) {
  // 4 KiB FIFO: the sender must wait for space many times
  std::vector<ShmRank> ranks = connectAll(2, 1, uniqueJobKey("small"), "4K");
  ASSERT_FALSE(HasFailure());
  constexpr int kMessages = 20000;
  auto status = runRanks(2, [&](int me) -> Status {
    Connection* c = ranks[me].conn(1 - me, 0);
    std::vector<uint64_t> values(kMessages);
    std::vector<Completion> done(kMessages);
    std::vector<Completion*> all;
    for (int i = 0; i < kMessages; ++i) {
      all.push_back(&done[i]);
      if (me == 0) {
        values[i] = 0x5eed0000ull + i;
        COLLIE_RETURN_IF_ERROR(c->postSend(&values[i], 8, testTag(0, 1, 0, i), &done[i]));
      } else {
        COLLIE_RETURN_IF_ERROR(c->postRecv(&values[i], 8, testTag(0, 1, 0, i), &done[i]));
      }
    }
    COLLIE_RETURN_IF_ERROR(driveShm(ranks[me].transport.get(), {c}, all, milliseconds(20000)));
    for (int i = 0; i < kMessages; ++i) {
      if (values[i] != 0x5eed0000ull + i) return internalError("message out of order");
    }
    return Status();
  });
  EXPECT_TRUE(status[0].isOk()) << status[0].toString();
  EXPECT_TRUE(status[1].isOk()) << status[1].toString();
}

// KiB of this process's resident pages in mappings of /dev/shm files (the segments).
size_t shmResidentKiB() {
  return smapsKiB("Rss", [](unsigned long, unsigned long, const std::string& header) {
    return header.find("/dev/shm/") != std::string::npos;
  });
}

// Each end maps its FIFO ahead of the messages posted to it, 256 KiB at a time (no minor
// fault per page over the first lap); what no message reached stays unmapped, and a
// message of 64 KiB or more maps it whole.
TEST(ShmTransportTest, MessagesMapTheFifoWindowByWindowAhead) {
  std::vector<ShmRank> ranks = connectAll(2, 1, uniqueJobKey("prefault"), "1M");
  ASSERT_FALSE(HasFailure());
  auto exchange = [&](size_t bytes) {
    auto status = runRanks(2, [&](int me) -> Status {
      Connection* c = ranks[me].conn(1 - me, 0);
      std::vector<uint8_t> data(bytes, static_cast<uint8_t>(me + 1));
      Completion done;
      if (me == 0) {
        COLLIE_RETURN_IF_ERROR(c->postSend(data.data(), bytes, testTag(0, 1, 0, 0), &done));
      } else {
        COLLIE_RETURN_IF_ERROR(c->postRecv(data.data(), bytes, testTag(0, 1, 0, 0), &done));
      }
      COLLIE_RETURN_IF_ERROR(
          driveShm(ranks[me].transport.get(), {c}, {&done}, milliseconds(20000)));
      if (me == 1 && data[bytes - 1] != 1) return internalError("wrong bytes received");
      return Status();
    });
    EXPECT_TRUE(status[0].isOk()) << status[0].toString();
    EXPECT_TRUE(status[1].isOk()) << status[1].toString();
  };
  // Sender and receiver are threads of this process, each with its own mapping: every
  // window counts twice.
  const size_t before = shmResidentKiB();
  exchange(4096);
  const size_t first = shmResidentKiB() - before;
  EXPECT_GE(first, 2 * 256u - 16) << "a 4 KiB message did not map the first window ahead";
  EXPECT_LT(first, 2 * 512u) << "a 4 KiB message mapped " << first << " KiB";
  for (int i = 0; i < 70; ++i) exchange(4096);  // now up to ~290 KiB: the second window
  const size_t second = shmResidentKiB() - before;
  EXPECT_GE(second, 2 * 512u - 16) << "the second window was not mapped";
  EXPECT_LT(second, 2 * 768u) << "70 x 4 KiB more mapped " << second << " KiB in all";
  exchange(64 * 1024);  // 64 KiB: all of the 1 MiB FIFO
  EXPECT_GE(shmResidentKiB() - before, 2 * 1024u - 16) << "the FIFO was not mapped whole";
}

TEST(ShmTransportTest, ClosedPeerFailsPendingOperationsNamingIt) {
  std::vector<ShmRank> ranks = connectAll(3, 1, uniqueJobKey("closed"));
  ASSERT_FALSE(HasFailure());
  // Data sent before the peer leaves is still delivered.
  uint32_t early = 42, earlyIn = 0, late = 0;
  Completion sent, got, pending;
  ASSERT_TRUE(ranks[2].conn(0, 0)->postSend(&early, 4, 1, &sent).isOk());
  ASSERT_TRUE(
      driveShm(ranks[2].transport.get(), ranks[2].all(), {&sent}, milliseconds(5000)).isOk());
  ranks[2].connections.clear();
  ranks[2].transport.reset();
  ASSERT_TRUE(ranks[0].conn(2, 0)->postRecv(&earlyIn, 4, 1, &got).isOk());
  ASSERT_TRUE(ranks[0].conn(2, 0)->postRecv(&late, 4, 2, &pending).isOk());
  auto start = std::chrono::steady_clock::now();
  Status s =
      driveShm(ranks[0].transport.get(), ranks[0].all(), {&got, &pending}, milliseconds(5000));
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(got.done && got.status.isOk()) << got.status.toString();
  EXPECT_EQ(earlyIn, 42u);
  EXPECT_EQ(s.code(), StatusCode::kRemoteError) << s.toString();
  EXPECT_EQ(s.peer(), 2);
  EXPECT_TRUE(pending.done);
  EXPECT_EQ(pending.status.code(), StatusCode::kRemoteError);
  EXPECT_LT(took, milliseconds(1000));
}

// A sender asleep on a full FIFO is woken when the receiver leaves, and fails.
TEST(ShmTransportTest, SenderBlockedOnAFullFifoFailsWhenTheReceiverLeaves) {
  std::vector<ShmRank> ranks = connectAll(2, 1, uniqueJobKey("blocked"), "4K");
  ASSERT_FALSE(HasFailure());
  std::vector<uint8_t> big(64 * 1024, 7);
  Completion sent;
  ASSERT_TRUE(ranks[0].conn(1, 0)->postSend(big.data(), big.size(), 1, &sent).isOk());
  Status s;
  std::chrono::steady_clock::duration took{};
  std::thread sender([&] {
    auto start = std::chrono::steady_clock::now();
    s = driveShm(ranks[0].transport.get(), ranks[0].all(), {&sent}, milliseconds(5000));
    took = std::chrono::steady_clock::now() - start;
  });
  std::this_thread::sleep_for(milliseconds(50));
  ranks[1].connections.clear();
  ranks[1].transport.reset();
  sender.join();
  EXPECT_EQ(s.code(), StatusCode::kRemoteError) << s.toString();
  EXPECT_EQ(s.peer(), 1);
  EXPECT_TRUE(sent.done);
  EXPECT_EQ(sent.status.code(), StatusCode::kRemoteError);
  EXPECT_LT(took, milliseconds(1000));
}

// More ranks than cores with tiny FIFOs: every rank streams to its ring neighbour
// through many FIFO refills; spin-then-block must keep this fast.
TEST(ShmTransportTest, OversubscribedRingCompletesQuickly) {
  const int nranks = 6;
  std::vector<ShmRank> ranks = connectAll(nranks, 1, uniqueJobKey("ring"), "4K");
  ASSERT_FALSE(HasFailure());
  constexpr size_t kBytes = 256 * 1024;
  constexpr int kRounds = 20;
  auto start = std::chrono::steady_clock::now();
  auto status = runRanks(nranks, [&](int me) -> Status {
    const int next = (me + 1) % nranks, prev = (me + nranks - 1) % nranks;
    std::vector<uint8_t> out(kBytes), in(kBytes);
    for (int round = 0; round < kRounds; ++round) {
      for (size_t i = 0; i < kBytes; ++i) out[i] = patternByte(me, next, 0, round, i);
      Completion s, r;
      COLLIE_RETURN_IF_ERROR(ranks[me].conn(prev, 0)->postRecv(in.data(), kBytes, round, &r));
      COLLIE_RETURN_IF_ERROR(ranks[me].conn(next, 0)->postSend(out.data(), kBytes, round, &s));
      COLLIE_RETURN_IF_ERROR(
          driveShm(ranks[me].transport.get(), ranks[me].all(), {&s, &r}, milliseconds(20000)));
      for (size_t i = 0; i < kBytes; i += 97) {
        if (in[i] != patternByte(prev, me, 0, round, i)) return internalError("corrupt data");
      }
    }
    return Status();
  });
  auto took = std::chrono::steady_clock::now() - start;
  for (int r = 0; r < nranks; ++r) EXPECT_TRUE(status[r].isOk()) << status[r].toString();
  // 6 x 20 x 256 KiB through 4 KiB FIFOs: ~7700 FIFO refills per rank.
  EXPECT_LT(took, milliseconds(10000));
  std::printf("[ info ] oversubscribed ring: %.1f ms\n",
              std::chrono::duration<double, std::milli>(took).count());
}

TEST(ShmTransportTest, PingPongLatencyAndStreamBandwidth) {
  std::vector<ShmRank> ranks = connectAll(2, 1, uniqueJobKey("perf"));
  ASSERT_FALSE(HasFailure());
  constexpr int kIters = 5000;
  constexpr size_t kStream = 64 << 20;
  std::vector<uint8_t> big0(kStream, 1), big1(kStream, 0);
  double pingUs = 0, gbps = 0;
  auto status = runRanks(2, [&](int me) -> Status {
    Connection* c = ranks[me].conn(1 - me, 0);
    Transport* t = ranks[me].transport.get();
    uint64_t value = 0;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kIters; ++i) {
      Completion s, r;
      if (me == 0) {
        value = i;
        COLLIE_RETURN_IF_ERROR(c->postSend(&value, 8, i, &s));
        COLLIE_RETURN_IF_ERROR(c->postRecv(&value, 8, i, &r));
      } else {
        COLLIE_RETURN_IF_ERROR(c->postRecv(&value, 8, i, &r));
        COLLIE_RETURN_IF_ERROR(driveShm(t, {c}, {&r}, milliseconds(10000)));
        COLLIE_RETURN_IF_ERROR(c->postSend(&value, 8, i, &s));
      }
      COLLIE_RETURN_IF_ERROR(driveShm(t, {c}, {&s, &r}, milliseconds(10000)));
      if (value != static_cast<uint64_t>(i)) return internalError("ping-pong value");
    }
    auto mid = std::chrono::steady_clock::now();
    Completion d;
    if (me == 0) {
      COLLIE_RETURN_IF_ERROR(c->postSend(big0.data(), kStream, 99, &d));
    } else {
      COLLIE_RETURN_IF_ERROR(c->postRecv(big1.data(), kStream, 99, &d));
    }
    COLLIE_RETURN_IF_ERROR(driveShm(t, {c}, {&d}, milliseconds(20000)));
    auto end = std::chrono::steady_clock::now();
    if (me == 1) {
      pingUs = std::chrono::duration<double, std::micro>(mid - start).count() / kIters / 2;
      gbps = kStream / std::chrono::duration<double>(end - mid).count() / 1e9;
    }
    return Status();
  });
  ASSERT_TRUE(status[0].isOk()) << status[0].toString();
  ASSERT_TRUE(status[1].isOk()) << status[1].toString();
  EXPECT_EQ(big0, big1);
  std::printf("[ info ] 8-byte one-way latency %.2f us, 64 MiB stream %.2f GB/s\n", pingUs, gbps);
  // Loose bounds (the test box is a shared 2-core machine, and this runs under TSan
  // too): they catch a wait that sleeps out its timeout instead of being woken, not a
  // slow copy. A missed wake-up costs up to 100 ms (the transport's longest sleep), and
  // the stream refills its 4 MiB FIFO at least 16 times, so missing them all would take
  // 64 MiB below 0.04 GB/s; TSan on a busy box measured 0.19.
  EXPECT_LT(pingUs, 2000.0);
  EXPECT_GT(gbps, 0.05);
}

TEST(ShmTransportTest, IsRegisteredAsShm) {
  const TransportFactory* factory = TransportRegistry::instance().find("shm");
  ASSERT_NE(factory, nullptr);
  EXPECT_EQ(factory->priority, 100);
  EXPECT_NE(factory->create, nullptr);
}

TEST(ShmTransportTest, RejectsBadPeerLists) {
  auto store = makeInMemoryStore();
  auto transport = createShmTransport(shmContext(store, uniqueJobKey("bad"), 0, 2, 1));
  ASSERT_TRUE(transport.isOk());
  EXPECT_FALSE((*transport)->canConnect(1, "otherhost"));
  EXPECT_TRUE((*transport)->canConnect(1, "testhost"));
  EXPECT_TRUE((*transport)->caps().sameHostOnly);
  auto conns = (*transport)->connect({0});
  EXPECT_EQ(conns.status().code(), StatusCode::kInvalidArgument);
}

TEST(ShmTransportTest, MissingPeerTimesOutNamingIt) {
  auto store = makeInMemoryStore();
  auto ctx = shmContext(store, uniqueJobKey("missing"), 0, 2, 1);
  ctx.timeout = milliseconds(200);
  auto transport = createShmTransport(ctx);
  ASSERT_TRUE(transport.isOk());
  auto conns = (*transport)->connect({1});
  EXPECT_EQ(conns.status().code(), StatusCode::kTimeout) << conns.status().toString();
  EXPECT_EQ(conns.status().peer(), 1);
  // The failed connect left nothing behind in /dev/shm.
  auto entry = store->get(ctx.jobKey + "/shm/0", Clock::now());
  ASSERT_TRUE(entry.isOk());
  std::string text(entry->begin(), entry->end());
  transport->reset();
  std::string path = "/dev/shm" + text.substr(0, text.find(' '));
  EXPECT_NE(access(path.c_str(), F_OK), 0) << path;
}

}  // namespace
}  // namespace collie::testing
