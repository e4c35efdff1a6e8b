// ucx transport: ranks as threads over the in-memory store, each with its own UCP
// worker, over UCX's tcp on loopback and over its shared-memory transports.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <tuple>
#include <vector>

#include "core/transport/transport.h"

namespace collie {
void registerUcxTransport(TransportRegistry& registry);
namespace {

using namespace std::chrono_literals;
using Conns = std::vector<std::unique_ptr<Connection>>;

JobSecret secretOf(uint8_t seed) {
  JobSecret s{};
  for (auto& b : s) b = seed++;
  return s;
}

// UCX reads UCX_* when a worker is created: loopback only, the given transports.
void useTls(const std::string& tls) {
  setenv("UCX_TLS", tls.c_str(), 1);
  setenv("UCX_NET_DEVICES", "lo", 1);
  setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 1);
}

struct Job {
  std::shared_ptr<Store> store = makeInMemoryStore();
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<Conns> conns;
  std::vector<std::vector<int>> peers;
  std::string jobKey = "job" + std::to_string(std::rand());
  int nchannels = 1;
  std::vector<JobSecret> secrets;

  TransportContext context(int rank, int n) const {
    TransportContext ctx;
    ctx.rank = rank;
    ctx.nranks = n;
    ctx.nchannels = nchannels;
    ctx.hostId = "host" + std::to_string(rank);  // every rank on a host of its own
    ctx.jobKey = jobKey;
    ctx.secret = secrets.empty() ? secretOf(3) : secrets[rank];
    ctx.store = store;
    ctx.timeout = 10s;
    return ctx;
  }

  void create(int n) {
    TransportRegistry registry;
    registerUcxTransport(registry);
    const TransportFactory* factory = registry.find("ucx");
    ASSERT_NE(factory, nullptr);
    EXPECT_EQ(factory->priority, 150);
    for (int r = 0; r < n; ++r) {
      auto t = factory->create(context(r, n));
      ASSERT_TRUE(t.isOk()) << t.status().toString();
      transports.push_back(std::move(*t));
    }
  }

  std::vector<Status> connectAll() {
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
    return results;
  }

  Connection* conn(int rank, int peer, int channel = 0) {
    int idx = peer < rank ? peer : peer - 1;
    return conns[rank][idx * nchannels + channel].get();
  }
};

uint8_t pattern(int src, int dst, size_t size, size_t i) {
  return static_cast<uint8_t>(src * 31 + dst * 7 + size * 3 + i * 13 + (i >> 9));
}

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

class UcxTransportRanks : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(UcxTransportRanks, AllPairsExchangeAllSizesBothWays) {
  const auto [n, tls] = GetParam();
  useTls(tls);
  // 0, inline, just above inline (header + data message), large (rendezvous).
  const std::vector<size_t> sizes = {0, 1, 8192, 8193, (4u << 20) + 3};
  Job job;
  job.nchannels = 2;
  job.create(n);
  auto connected = job.connectAll();
  for (int r = 0; r < n; ++r) ASSERT_TRUE(connected[r].isOk()) << connected[r].toString();
  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::vector<std::vector<uint8_t>> sendBufs, recvBufs;
      std::vector<std::tuple<int, size_t, size_t>> checks;
      size_t ops = (n - 1) * job.nchannels * sizes.size() * 2;
      std::vector<Completion> done(ops);
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
      results[r] = drive(job.transports[r].get(), job.conns[r], done, Clock::now() + 30s);
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

INSTANTIATE_TEST_SUITE_P(Ranks, UcxTransportRanks,
                         ::testing::Values(std::make_tuple(2, "tcp"), std::make_tuple(3, "tcp"),
                                           std::make_tuple(3, "posix,cma"),
                                           std::make_tuple(2, "sysv")));

TEST(UcxTransport, OnlyOtherHostsUnlessForced) {
  Job job;
  TransportRegistry registry;
  registerUcxTransport(registry);
  TransportContext ctx = job.context(0, 2);
  ctx.hostId = "a";
  auto t = registry.find("ucx")->create(ctx);
  ASSERT_TRUE(t.isOk());
  EXPECT_FALSE((*t)->canConnect(1, "a"));
  EXPECT_TRUE((*t)->canConnect(1, "b"));
  ctx.forced = true;
  auto forced = registry.find("ucx")->create(ctx);
  EXPECT_TRUE((*forced)->canConnect(1, "a"));
}

TEST(UcxTransport, TagOrLengthMismatchNamesThePeerAndWritesNothing) {
  useTls("tcp");
  // Inline-sized and large messages take different paths; both must be caught.
  for (size_t size : {size_t{100}, size_t{100000}}) {
    for (bool tagDiffers : {true, false}) {
      Job job;
      job.create(2);
      auto connected = job.connectAll();
      ASSERT_TRUE(connected[0].isOk() && connected[1].isOk());
      std::vector<uint8_t> out(size, 7), in(tagDiffers ? size : size / 2, 0xAB);
      std::vector<Completion> sendDone(1), recvDone(1);
      ASSERT_TRUE(job.conn(0, 1)->postSend(out.data(), out.size(), 0x11, &sendDone[0]).isOk());
      ASSERT_TRUE(job.conn(1, 0)
                      ->postRecv(in.data(), in.size(), tagDiffers ? 0x22 : 0x11, &recvDone[0])
                      .isOk());
      Status st;
      auto deadline = Clock::now() + 5s;
      while (!recvDone[0].done && Clock::now() < deadline) {
        bool progressed = false;
        (void)job.conn(0, 1)->progress(&progressed);
        st = job.conn(1, 0)->progress(&progressed);
      }
      ASSERT_EQ(st.code(), StatusCode::kMismatch) << st.toString();
      EXPECT_EQ(st.peer(), 0);
      EXPECT_NE(st.message().find("rank 0"), std::string::npos) << st.message();
      if (tagDiffers) {
        EXPECT_NE(st.message().find("0x11"), std::string::npos) << st.message();
        EXPECT_NE(st.message().find("0x22"), std::string::npos) << st.message();
      } else {
        EXPECT_NE(st.message().find(std::to_string(size)), std::string::npos) << st.message();
      }
      EXPECT_TRUE(recvDone[0].done);
      EXPECT_EQ(recvDone[0].status.code(), StatusCode::kMismatch);
      for (uint8_t b : in) ASSERT_EQ(b, 0xAB) << "bytes of a mismatched message were written";
      Completion again;
      EXPECT_EQ(job.conn(1, 0)->postRecv(in.data(), 1, 6, &again).code(), StatusCode::kMismatch);
    }
  }
}

TEST(UcxTransport, PeerDestroyedMidTransferIsARemoteErrorNamingIt) {
  useTls("tcp");
  Job job;
  job.create(2);
  auto connected = job.connectAll();
  ASSERT_TRUE(connected[0].isOk() && connected[1].isOk());
  const size_t size = 16u << 20;
  std::vector<uint8_t> in(size, 0);
  std::vector<Completion> recvDone(1);
  ASSERT_TRUE(job.conn(0, 1)->postRecv(in.data(), size, 5, &recvDone[0]).isOk());
  job.conns[1].clear();
  job.transports[1].reset();
  auto start = Clock::now();
  Status st = drive(job.transports[0].get(), job.conns[0], recvDone, Clock::now() + 10s);
  EXPECT_LT(Clock::now() - start, 5s);
  ASSERT_EQ(st.code(), StatusCode::kRemoteError) << st.toString();
  EXPECT_EQ(st.peer(), 1);
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
  EXPECT_TRUE(recvDone[0].done);
  Completion again;
  EXPECT_EQ(job.conn(0, 1)->postRecv(in.data(), 1, 6, &again).code(), StatusCode::kRemoteError);
}

TEST(UcxTransport, WrongSecretIsRefused) {
  useTls("tcp");
  Job job;
  job.secrets = {secretOf(3), secretOf(99)};
  job.create(2);
  auto results = job.connectAll();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].code(), StatusCode::kUnauthenticated) << r << results[r].toString();
    EXPECT_EQ(results[r].peer(), 1 - r);
  }
}

}  // namespace
}  // namespace collie
