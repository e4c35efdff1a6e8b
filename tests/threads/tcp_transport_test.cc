// tcp transport: ranks as threads over the in-memory store, on loopback.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/transport/transport.h"

namespace collie {
void registerTcpTransport(TransportRegistry& registry);
namespace {

using namespace std::chrono_literals;
using Conns = std::vector<std::unique_ptr<Connection>>;

JobSecret secretOf(uint8_t seed) {
  JobSecret s{};
  for (auto& b : s) b = seed++;
  return s;
}

struct Job {
  std::shared_ptr<Store> store = makeInMemoryStore();
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<Conns> conns;
  std::vector<std::vector<int>> peers;
  std::string jobKey = "job" + std::to_string(std::rand());
  int nchannels = 1;

  TransportContext context(int rank, int n) const {
    TransportContext ctx;
    ctx.rank = rank;
    ctx.nranks = n;
    ctx.nchannels = nchannels;
    ctx.jobKey = jobKey;
    ctx.secret = secretOf(3);
    ctx.store = store;
    ctx.timeout = 10s;
    return ctx;
  }

  void create(int n) {
    setenv("COLLIE_SOCKET_IFNAME", "lo", 1);
    TransportRegistry registry;
    registerTcpTransport(registry);
    const TransportFactory* factory = registry.find("tcp");
    ASSERT_NE(factory, nullptr);
    EXPECT_EQ(factory->priority, 200);
    for (int r = 0; r < n; ++r) {
      auto t = factory->create(context(r, n));
      ASSERT_TRUE(t.isOk()) << t.status().toString();
      transports.push_back(std::move(*t));
    }
  }

  void connectAll() {
    int n = static_cast<int>(transports.size());
    conns.resize(n);
    peers.resize(n);
    std::vector<Status> results(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      for (int p = 0; p < n; ++p) {
        if (p != r) peers[r].push_back(p);
      }
      threads.emplace_back([&, r] {
        auto c = transports[r]->connect(peers[r]);
        if (c.isOk()) {
          conns[r] = std::move(*c);
        } else {
          results[r] = c.status();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) ASSERT_TRUE(results[r].isOk()) << r << results[r].toString();
  }

  Connection* conn(int rank, int peer, int channel = 0) {
    int idx = peer < rank ? peer : peer - 1;
    return conns[rank][idx * nchannels + channel].get();
  }
};

uint8_t pattern(int src, int dst, size_t size, size_t i) {
  return static_cast<uint8_t>(src * 31 + dst * 7 + size * 3 + i * 13 + (i >> 9));
}

// Drives `conns` until every completion is done or an error; returns the first error.
Status drive(Transport* transport, Conns& conns, std::vector<Completion>& done, Deadline deadline) {
  for (;;) {
    bool progressed = false;
    for (auto& c : conns) COLLIE_RETURN_IF_ERROR(c->progress(&progressed));
    bool all = true;
    for (auto& d : done) all = all && d.done;
    if (all) return Status();
    if (Clock::now() > deadline) return timeoutError("test drive timed out");
    if (!progressed) transport->waitForActivity(1ms);
  }
}

class TcpTransportRanks : public ::testing::TestWithParam<int> {};

TEST_P(TcpTransportRanks, AllPairsExchangeAllSizesBothWays) {
  const int n = GetParam();
  const std::vector<size_t> sizes = {0, 1, 4097, (8u << 20) + 3};
  Job job;
  job.nchannels = 2;
  job.create(n);
  job.connectAll();
  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::vector<std::vector<uint8_t>> sendBufs, recvBufs;
      std::vector<Completion> done;
      std::vector<std::tuple<int, size_t, size_t>> checks;  // peer, size, recv index
      size_t ops = (n - 1) * job.nchannels * sizes.size() * 2;
      done.resize(ops);
      sendBufs.reserve(ops);
      recvBufs.reserve(ops);
      size_t k = 0;
      for (int p : job.peers[r]) {
        for (int ch = 0; ch < job.nchannels; ++ch) {
          for (size_t size : sizes) {
            uint64_t tag = (uint64_t{1} << 40) | size;
            auto& in = recvBufs.emplace_back(size, 0);
            checks.emplace_back(p, size, recvBufs.size() - 1);
            Status st = job.conn(r, p, ch)->postRecv(in.data(), size, tag, &done[k++]);
            auto& out = sendBufs.emplace_back(size);
            for (size_t i = 0; i < size; ++i) out[i] = pattern(r, p, size, i);
            if (st.isOk()) st = job.conn(r, p, ch)->postSend(out.data(), size, tag, &done[k++]);
            if (!st.isOk()) {
              results[r] = st;
              return;
            }
          }
        }
      }
      results[r] = drive(job.transports[r].get(), job.conns[r], done, Clock::now() + 40s);
      if (!results[r].isOk()) return;
      for (auto& d : done) {
        if (!d.status.isOk()) results[r] = d.status;
      }
      for (auto& [p, size, idx] : checks) {
        for (size_t i = 0; i < size; ++i) {
          if (recvBufs[idx][i] != pattern(p, r, size, i)) {
            results[r] =
                internalError("rank " + std::to_string(r) + " got bad byte " + std::to_string(i) +
                              " of " + std::to_string(size) + " from " + std::to_string(p));
            return;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_TRUE(results[r].isOk()) << r << ": " << results[r].toString();
}

INSTANTIATE_TEST_SUITE_P(Ranks, TcpTransportRanks, ::testing::Values(2, 3, 4));

TEST(TcpTransport, TagOrLengthMismatchNamesThePeer) {
  for (bool tagDiffers : {true, false}) {
    Job job;
    job.create(2);
    job.connectAll();
    std::vector<uint8_t> out(100, 7), in(tagDiffers ? 100 : 50, 0xAB);
    std::vector<Completion> sendDone(1), recvDone(1);
    ASSERT_TRUE(job.conn(0, 1)->postSend(out.data(), out.size(), 0x11, &sendDone[0]).isOk());
    ASSERT_TRUE(job.conn(1, 0)
                    ->postRecv(in.data(), in.size(), tagDiffers ? 0x22 : 0x11, &recvDone[0])
                    .isOk());
    (void)drive(job.transports[0].get(), job.conns[0], sendDone, Clock::now() + 5s);
    Status st = drive(job.transports[1].get(), job.conns[1], recvDone, Clock::now() + 5s);
    ASSERT_EQ(st.code(), StatusCode::kMismatch) << st.toString();
    EXPECT_EQ(st.peer(), 0);
    EXPECT_NE(st.message().find("rank 0"), std::string::npos) << st.message();
    if (tagDiffers) {
      EXPECT_NE(st.message().find("0x11"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("0x22"), std::string::npos) << st.message();
    } else {
      EXPECT_NE(st.message().find("100"), std::string::npos) << st.message();
      EXPECT_NE(st.message().find("50"), std::string::npos) << st.message();
    }
    EXPECT_TRUE(recvDone[0].done);
    EXPECT_EQ(recvDone[0].status.code(), StatusCode::kMismatch);
    for (uint8_t b : in) ASSERT_EQ(b, 0xAB) << "bytes of a mismatched message were written";
  }
}

TEST(TcpTransport, PeerDestroyedMidTransferIsARemoteErrorNamingIt) {
  Job job;
  job.create(2);
  job.connectAll();
  const size_t size = 64u << 20;
  std::vector<uint8_t> out(size, 1), in(size, 0);
  std::vector<Completion> sendDone(1), recvDone(1);
  ASSERT_TRUE(job.conn(1, 0)->postSend(out.data(), size, 5, &sendDone[0]).isOk());
  ASSERT_TRUE(job.conn(0, 1)->postRecv(in.data(), size, 5, &recvDone[0]).isOk());
  // Only the sender moves: it fills the socket buffers, far short of 64 MiB.
  for (int i = 0; i < 5; ++i) {
    bool progressed = false;
    ASSERT_TRUE(job.conn(1, 0)->progress(&progressed).isOk());
  }
  EXPECT_FALSE(recvDone[0].done);
  job.conns[1].clear();
  job.transports[1].reset();
  auto start = Clock::now();
  Status st = drive(job.transports[0].get(), job.conns[0], recvDone, Clock::now() + 10s);
  EXPECT_LT(Clock::now() - start, 5s);
  ASSERT_EQ(st.code(), StatusCode::kRemoteError) << st.toString();
  EXPECT_EQ(st.peer(), 1);
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
  EXPECT_TRUE(recvDone[0].done);
  EXPECT_EQ(recvDone[0].status.code(), StatusCode::kRemoteError);
  // The broken connection keeps failing instead of hanging.
  Completion again;
  EXPECT_EQ(job.conn(0, 1)->postRecv(in.data(), 1, 6, &again).code(), StatusCode::kRemoteError);
}

TEST(TcpTransport, WrongSecretIsRefusedAndTheJobStillConnects) {
  Job job;
  job.create(2);
  auto addr = job.store->get(job.jobKey + "/tcp/addr/1", Clock::now() + 1s);
  ASSERT_TRUE(addr.isOk());
  std::string host;
  uint16_t port;
  ASSERT_TRUE(net::splitHostPort(std::string(addr->begin(), addr->end()), &host, &port).isOk());
  auto rogue = net::connectWithDeadline(host, port, Clock::now() + 2s);
  ASSERT_TRUE(rogue.isOk());
  net::Hello hello{net::Purpose::kTcpData, 0, 0, 0, net::hashJobKey(job.jobKey)};
  Status refused;
  std::thread intruder(
      [&] { refused = net::sendHello(rogue->fd(), hello, secretOf(99), Clock::now() + 8s); });
  job.connectAll();
  intruder.join();
  EXPECT_EQ(refused.code(), StatusCode::kUnauthenticated) << refused.toString();
  std::vector<uint8_t> out(10, 3), in(10, 0);
  std::vector<Completion> done(2);
  ASSERT_TRUE(job.conn(0, 1)->postSend(out.data(), 10, 1, &done[0]).isOk());
  ASSERT_TRUE(job.conn(1, 0)->postRecv(in.data(), 10, 1, &done[1]).isOk());
  auto deadline = Clock::now() + 5s;
  while (!(done[0].done && done[1].done) && Clock::now() < deadline) {
    bool progressed = false;
    ASSERT_TRUE(job.conn(0, 1)->progress(&progressed).isOk());
    ASSERT_TRUE(job.conn(1, 0)->progress(&progressed).isOk());
  }
  ASSERT_TRUE(done[1].done && done[1].status.isOk());
  EXPECT_EQ(in, out);
}

}  // namespace
}  // namespace collie
