// The TCP store: server plus client threads, timeouts, authentication, garbage input.
#include "collie/store.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <vector>

#include "core/net/handshake.h"
#include "core/net/socket.h"

namespace collie {
namespace {

using namespace std::chrono_literals;

JobSecret testSecret(uint8_t seed) {
  JobSecret s{};
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(seed + i);
  return s;
}

struct StoreFixture : ::testing::Test {
  void SetUp() override {
    auto server = StoreServer::start("127.0.0.1", 0, testSecret(1));
    ASSERT_TRUE(server.isOk()) << server.status().toString();
    server_ = std::move(*server);
  }
  std::shared_ptr<Store> client(const JobSecret& secret = testSecret(1)) {
    auto c = connectTcpStore("127.0.0.1", server_->port(), secret, Clock::now() + 5s);
    EXPECT_TRUE(c.isOk()) << c.status().toString();
    return c.isOk() ? *c : nullptr;
  }
  std::unique_ptr<StoreServer> server_;
};

Bytes bytesOf(const std::string& s) { return Bytes(s.begin(), s.end()); }

TEST_F(StoreFixture, SetGetAddFromSeveralThreads) {
  constexpr int kThreads = 6;
  std::vector<std::thread> threads;
  std::vector<Status> results(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto store = client();
      if (!store) return;
      // Each thread waits for the key of the next one before setting its own: the
      // blocking gets must not stall the server.
      int next = (t + 1) % kThreads;
      if (t != 0) {
        results[t] = store->set("k" + std::to_string(t), bytesOf("v" + std::to_string(t)));
        if (!results[t].isOk()) return;
      }
      auto v = store->get("k" + std::to_string(next), Clock::now() + 10s);
      if (!v.isOk()) {
        results[t] = v.status();
        return;
      }
      if (*v != bytesOf("v" + std::to_string(next))) results[t] = internalError("wrong value");
      if (t == 0) results[t] = store->set("k0", bytesOf("v0"));
      for (int i = 0; i < 100 && results[t].isOk(); ++i) {
        auto n = store->add("counter", 1);
        if (!n.isOk()) results[t] = n.status();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(results[t].isOk()) << t << results[t].toString();
  auto store = client();
  auto total = store->add("counter", 0);
  ASSERT_TRUE(total.isOk());
  EXPECT_EQ(*total, kThreads * 100);
  // Large values and a shared client used from several threads.
  Bytes big(5 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 31);
  ASSERT_TRUE(store->set("big", big).isOk());
  std::vector<std::thread> readers;
  std::atomic<int> good{0};
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      auto v = store->get("big", Clock::now() + 10s);
      if (v.isOk() && *v == big) ++good;
    });
  }
  for (auto& th : readers) th.join();
  EXPECT_EQ(good.load(), 4);
}

TEST_F(StoreFixture, GetTimesOutAndClientStaysUsable) {
  auto store = client();
  auto start = Clock::now();
  auto v = store->get("never", Clock::now() + 300ms);
  ASSERT_FALSE(v.isOk());
  EXPECT_EQ(v.status().code(), StatusCode::kTimeout);
  EXPECT_NE(v.status().message().find("never"), std::string::npos);
  EXPECT_LT(Clock::now() - start, 3s);
  ASSERT_TRUE(store->set("after", bytesOf("x")).isOk());
  auto w = store->get("after", Clock::now() + 1s);
  ASSERT_TRUE(w.isOk());
  EXPECT_EQ(*w, bytesOf("x"));
}

TEST_F(StoreFixture, WrongSecretIsRejectedAndServerKeepsServing) {
  auto bad = connectTcpStore("127.0.0.1", server_->port(), testSecret(9), Clock::now() + 2s);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnauthenticated) << bad.status().toString();
  auto good = client();
  ASSERT_NE(good, nullptr);
  EXPECT_TRUE(good->set("a", bytesOf("b")).isOk());
}

TEST_F(StoreFixture, GarbageBytesDoNotKillTheServer) {
  std::mt19937 rng(42);
  auto good = client();
  ASSERT_NE(good, nullptr);
  for (int trial = 0; trial < 20; ++trial) {
    auto sock = net::connectWithDeadline("127.0.0.1", server_->port(), Clock::now() + 2s);
    ASSERT_TRUE(sock.isOk());
    std::vector<uint8_t> junk(1 + rng() % 3000);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    (void)net::writeFull(sock->fd(), junk.data(), junk.size(), Clock::now() + 1s);
  }
  // An authenticated client that then sends a malformed request is dropped alone.
  auto sock = net::connectWithDeadline("127.0.0.1", server_->port(), Clock::now() + 2s);
  ASSERT_TRUE(sock.isOk());
  ASSERT_TRUE(net::sendHello(sock->fd(), net::Hello{}, testSecret(1), Clock::now() + 2s).isOk());
  uint8_t request[16] = {1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f};  // set with a 2 GiB key
  ASSERT_TRUE(net::writeFull(sock->fd(), request, sizeof(request), Clock::now() + 1s).isOk());
  uint8_t byte;
  Status closed = net::readFull(sock->fd(), &byte, 1, Clock::now() + 5s);
  EXPECT_EQ(closed.code(), StatusCode::kRemoteError) << closed.toString();

  EXPECT_TRUE(good->set("still", bytesOf("alive")).isOk());
  auto v = client()->get("still", Clock::now() + 2s);
  ASSERT_TRUE(v.isOk()) << v.status().toString();
  EXPECT_EQ(*v, bytesOf("alive"));
}

TEST(StoreClient, ConnectRetriesUntilDeadline) {
  auto start = Clock::now();
  // Port 1 on loopback: nobody listens there.
  auto c = connectTcpStore("127.0.0.1", 1, testSecret(1), Clock::now() + 300ms);
  ASSERT_FALSE(c.isOk());
  EXPECT_EQ(c.status().code(), StatusCode::kTimeout) << c.status().toString();
  EXPECT_LT(Clock::now() - start, 3s);
}

}  // namespace
}  // namespace collie
