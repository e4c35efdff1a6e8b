// tcp transport: ranks as threads over the in-memory store, on loopback.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/transport/transport.h"
#include "support/transport_job.h"

namespace collie {
void registerTcpTransport(TransportRegistry& registry);
namespace {

using namespace std::chrono_literals;
using testing::drive;
using testing::secretOf;

struct Job : testing::TransportJob {
  Job() : TransportJob("tcp", registerTcpTransport) {}
  void create(int n) {
    setenv("COLLIE_SOCKET_IFNAME", "lo", 1);
    TransportJob::create(n, 200);
  }
  void connectAll() {
    auto results = TransportJob::connectAll();
    for (size_t r = 0; r < results.size(); ++r) {
      ASSERT_TRUE(results[r].isOk()) << r << results[r].toString();
    }
  }
};

class TcpTransportRanks : public ::testing::TestWithParam<int> {};

TEST_P(TcpTransportRanks, AllPairsExchangeAllSizesBothWays) {
  const int n = GetParam();
  Job job;
  job.nchannels = 2;
  job.create(n);
  job.connectAll();
  auto results = testing::exchangeAllPairs(job, {0, 1, 4097, (8u << 20) + 3}, 40s);
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
  testing::expectDeadPeerFailsFast(job, 0, 1, recvDone, in.data());
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
