// ucx transport: ranks as threads over the in-memory store, each with its own UCP
// worker, over UCX's tcp on loopback and over its shared-memory transports. The contract
// every transport shares (mismatch wording, dead peer, wrong secret) is checked by
// tests/transport/conformance_test.cc; here what depends on UCX's wires.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/kernel/reduce_backend.h"
#include "core/net/process_sockets.h"
#include "core/transport/transport.h"
#include "support/reference.h"
#include "support/transport_job.h"
#include "transports/ucx/ucx_wires.h"

namespace collie {
void registerUcxTransport(TransportRegistry& registry);
namespace {

using namespace std::chrono_literals;
using testing::secretOf;

// Every rank's UCX context on loopback only, over the UCX transports `tls`
// (COLLIE_UCX_TLS, set on the context when its worker is created).
struct Job : testing::TransportJob {
  explicit Job(const std::string& tls) : TransportJob("ucx", registerUcxTransport) {
    hostPerRank = true;
    knobs = {{"COLLIE_UCX_TLS", tls}, {"COLLIE_UCX_NET_DEVICES", "lo"}};
  }
  void create(int n) { TransportJob::create(n, 150); }
};

class UcxTransportRanks : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(UcxTransportRanks, AllPairsExchangeAllSizesBothWays) {
  const auto [n, tls] = GetParam();
  Job job(tls);
  job.nchannels = 2;
  job.create(n);
  auto connected = job.connectAll();
  for (int r = 0; r < n; ++r) ASSERT_TRUE(connected[r].isOk()) << connected[r].toString();
  // 0, inline, just above inline (header + data message), large (rendezvous).
  auto results = testing::exchangeAllPairs(job, {0, 1, 8192, 8193, (4u << 20) + 3}, 30s);
  for (int r = 0; r < n; ++r) EXPECT_TRUE(results[r].isOk()) << r << ": " << results[r].toString();
}

INSTANTIATE_TEST_SUITE_P(Ranks, UcxTransportRanks,
                         ::testing::Values(std::make_tuple(2, "tcp"), std::make_tuple(3, "tcp"),
                                           std::make_tuple(3, "posix,cma"),
                                           std::make_tuple(2, "sysv")));

// Receives that reduce as the data lands: inline and large messages, in place or not,
// into user buffers aligned or not for the dtype, over sockets (whose eager fragments cut
// elements) and shared memory.
class UcxReduceOnReceive : public ::testing::TestWithParam<const char*> {};

TEST_P(UcxReduceOnReceive, MatchesTheReferenceForEverySize) {
  Job job(GetParam());
  job.create(2);
  auto connected = job.connectAll();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(connected[r].isOk()) << connected[r].toString();
  ASSERT_TRUE(job.conn(1, 0)->reducesOnReceive());
  const DataType dtype = DataType::kFloat64;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{1024}, size_t{1025}, (size_t{1} << 20) + 3}) {
      for (bool inPlace : {false, true}) {
        for (size_t shift : {size_t{0}, size_t{3}}) {  // own and output that many bytes in
          const std::vector<uint8_t> incoming = testing::makeInput(dtype, op, 1, count);
          const std::vector<uint8_t> ownBytes = testing::makeInput(dtype, op, 0, count);
          std::vector<uint8_t> ownStore(shift + ownBytes.size());
          std::vector<uint8_t> outputStore(shift + ownBytes.size(), 0xEE);
          std::copy(ownBytes.begin(), ownBytes.end(), ownStore.begin() + shift);
          uint8_t* own = ownStore.data() + shift;
          uint8_t* output = inPlace ? own : outputStore.data() + shift;
          ReduceOnReceive reduce{
              output, own, dtype, op, op == ReduceOp::kAvg ? 2 : 0, false, &hostReduceBackend()};
          std::vector<Completion> done(2);
          ASSERT_TRUE(
              job.conn(0, 1)->postSend(incoming.data(), incoming.size(), 9, &done[0]).isOk());
          ASSERT_TRUE(job.conn(1, 0)->postRecvReduce(reduce, incoming.size(), 9, &done[1]).isOk());
          ASSERT_TRUE(
              testing::drivePair(job.conn(0, 1), job.conn(1, 0), done, Clock::now() + 10s).isOk());
          ASSERT_TRUE(done[1].done && done[1].status.isOk()) << done[1].status.toString();
          EXPECT_EQ(std::vector<uint8_t>(output, output + ownBytes.size()),
                    testing::expectedReduction(dtype, op, 2, 0, count))
              << reduceOpName(op) << " count " << count << (inPlace ? " in place" : "") << " shift "
              << shift;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Wires, UcxReduceOnReceive, ::testing::Values("tcp", "posix,cma"));

TEST(UcxTransport, OnlyOtherHostsWithAnRdmaWireUnlessForced) {
  Job job("tcp");  // no RDMA transport allowed, whatever this host has
  TransportRegistry registry;
  const TransportFactory* factory = job.factory(registry);
  TransportContext ctx = job.context(0, 2);
  ctx.hostId = "a";
  auto t = factory->create(ctx);
  ASSERT_TRUE(t.isOk());
  // Each rank publishes whether it has an RDMA wire; over sockets only, tcp serves
  // peers on other hosts.
  auto flag = job.store->get(job.jobKey + "/ucx/rdma/0", Clock::now() + 1s);
  ASSERT_TRUE(flag.isOk()) << flag.status().toString();
  EXPECT_EQ(*flag, Bytes{'0'});
  EXPECT_FALSE((*t)->canConnect(1, "a"));
  EXPECT_FALSE((*t)->canConnect(1, "b"));
  ctx.forced = true;
  auto forced = factory->create(ctx);
  EXPECT_TRUE((*forced)->canConnect(1, "a"));
  EXPECT_TRUE((*forced)->canConnect(1, "b"));
}

TEST(UcxWires, RdmaWireNeedsAnRdmaResourceThatUcxTlsAllows) {
  const std::vector<ucx::UctResource> ib = {
      {"rc_mlx5", "mlx5_0:1"}, {"tcp", "eth0"}, {"posix", "memory"}};
  const std::vector<ucx::UctResource> ud = {{"ud_verbs", "mlx5_0:1"}, {"tcp", "eth0"}};
  const std::vector<ucx::UctResource> sockets = {{"tcp", "eth0"}, {"posix", "memory"}};
  using Tls = std::vector<std::string>;
  EXPECT_TRUE(ucx::rdmaWireIn(ib, Tls{}));
  EXPECT_TRUE(ucx::rdmaWireIn(ib, Tls{"all"}));
  EXPECT_TRUE(ucx::rdmaWireIn(ib, Tls{"rc", "sm"}));
  EXPECT_TRUE(ucx::rdmaWireIn(ib, Tls{"ib"}));
  EXPECT_TRUE(ucx::rdmaWireIn(ib, Tls{"^tcp"}));
  EXPECT_FALSE(ucx::rdmaWireIn(ib, Tls{"tcp", "sm"}));
  EXPECT_FALSE(ucx::rdmaWireIn(ib, Tls{"^rc"}));
  EXPECT_FALSE(ucx::rdmaWireIn(ib, Tls{"ud"}));
  EXPECT_TRUE(ucx::rdmaWireIn(ud, Tls{"^rc"}));
  EXPECT_FALSE(ucx::rdmaWireIn(sockets, Tls{}));
  EXPECT_FALSE(ucx::rdmaWireIn(sockets, Tls{"all"}));
  EXPECT_FALSE(ucx::rdmaWireIn({}, Tls{}));
}

// UCX opens its tcp sockets itself; collie sets COLLIE_TCP_CONGESTION on them as on its
// own tcp transport's: on UCX's listeners (the connections they accept inherit it) and
// on the connections UCX opened to the peers' listeners. The store here is in memory,
// so every TCP socket of this process is UCX's.
TEST(UcxTransport, TcpSocketsRunCollieTcpCongestion) {
  const std::string algorithm = net::systemCongestionControl() == "reno" ? "cubic" : "reno";
  Job job("tcp");
  job.knobs["COLLIE_TCP_CONGESTION"] = algorithm;
  job.nchannels = 2;
  job.create(2);
  auto connected = job.connectAll();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(connected[r].isOk()) << connected[r].toString();
  std::vector<std::string> listeners;
  std::vector<net::TcpSocketInfo> wires;
  auto sockets = net::processTcpSockets();
  ASSERT_TRUE(sockets.isOk()) << sockets.status().toString();
  for (const net::TcpSocketInfo& socket : *sockets) {
    if (!socket.listening) {
      wires.push_back(socket);
    } else if (net::congestionControlOf(socket.fd) == algorithm) {
      listeners.push_back(socket.local);
    }
  }
  EXPECT_GE(listeners.size(), 2u) << "one UCX listener per worker";
  int ucxWires = 0;
  for (const net::TcpSocketInfo& wire : wires) {
    bool ucx = false;
    for (const std::string& listener : listeners) {
      ucx = ucx || net::reachesListener(wire.peer, listener) || wire.local == listener;
    }
    if (!ucx) continue;
    ++ucxWires;
    EXPECT_EQ(net::congestionControlOf(wire.fd), algorithm) << wire.local << " -> " << wire.peer;
  }
  EXPECT_GE(ucxWires, 4) << "2 lanes, both ends";
  auto results = testing::exchangeAllPairs(job, {1, 8193, 1u << 20}, 30s);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(results[r].isOk()) << r << ": " << results[r].toString();
}

}  // namespace
}  // namespace collie
