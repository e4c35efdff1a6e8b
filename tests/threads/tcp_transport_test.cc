// tcp transport: ranks as threads over the in-memory store, on loopback. What every
// transport must do (exchange, matching, mismatch, dead peer) is checked by
// tests/transport/conformance_test.cc; here only what is tcp's own.
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
    knobs["COLLIE_SOCKET_IFNAME"] = "lo";
    TransportJob::create(n, 200);
  }
  void connectAll() {
    auto results = TransportJob::connectAll();
    for (size_t r = 0; r < results.size(); ++r) {
      ASSERT_TRUE(results[r].isOk()) << r << results[r].toString();
    }
  }
};

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
  ASSERT_TRUE(testing::drivePair(job.conn(0, 1), job.conn(1, 0), done, Clock::now() + 5s).isOk());
  ASSERT_TRUE(done[1].done && done[1].status.isOk());
  EXPECT_EQ(in, out);
}

}  // namespace
}  // namespace collie
