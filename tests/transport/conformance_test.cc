// The connection contract (core/transport/transport.h) checked on every transport in
// this build's registry, from this one file (Gloo's parameterised transport tests):
// ranks as threads over the in-memory store, each transport forced for every pair of
// one host. Covered per transport: bytes arrive equal for every size (0, 1, 4 KiB,
// 1 MiB + odd) between 2 and 3 ranks on 2 channels; messages match in posting order
// whichever side posts first; a tag or length mismatch fails the receive with the one
// wording of core/transport/message_check.h, writing nothing; a peer that goes away
// fails the pending receives within a deadline, naming it; a peer with another job
// secret is refused (where the transport authenticates peers); postRecvReduce (where
// the transport reduces on receive); and, through the fault-injecting wrapper
// (support/faulty_connection.h), what the transport and the engine above it report
// when a message is dropped, delayed, truncated or corrupted, or the link closes.
//
// A transport that cannot carry messages between two ranks here skips every test with
// the reason its factory gives (ibverbs without an RDMA device, cuda_ipc which carries
// no host messages): decided by creating it, never by its name.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "collie/communicator.h"
#include "core/kernel/reduce_backend.h"
#include "core/transport/transport.h"
#include "support/faulty_connection.h"
#include "support/rank_threads.h"
#include "support/transport_job.h"

namespace collie {
namespace {

using namespace std::chrono_literals;  // NOLINT(build/namespaces)
using testing::drive;
using testing::Fault;
using testing::secretOf;

constexpr const char* kHost = "conformance-host";

// Wires on loopback only (tcp, and UCX over tcp), where the environment does not choose
// others (a CI job may, through COLLIE_SOCKET_IFNAME, UCX_TLS or UCX_NET_DEVICES).
KnobOverrides loopbackKnobs() {
  KnobOverrides knobs;
  auto unless = [&](const char* variable, const char* knob, const char* value) {
    const char* set = std::getenv(variable);
    if (set == nullptr || *set == '\0') knobs[knob] = value;
  };
  unless("COLLIE_SOCKET_IFNAME", "COLLIE_SOCKET_IFNAME", "lo");
  unless("UCX_TLS", "COLLIE_UCX_TLS", "tcp");
  unless("UCX_NET_DEVICES", "COLLIE_UCX_NET_DEVICES", "lo");
  // A build without ucx has no such knobs.
  for (auto it = knobs.begin(); it != knobs.end();) {
    it = KnobRegistry::instance().find(it->first) == nullptr ? knobs.erase(it) : std::next(it);
  }
  return knobs;
}

std::vector<std::string> registeredTransports() {
  std::vector<std::string> names;
  for (const TransportFactory& f : TransportRegistry::instance().factories()) {
    if (f.name != "faulty") names.push_back(f.name);
  }
  return names;
}

struct Job : testing::TransportJob {
  explicit Job(const std::string& transport) : TransportJob(transport, nullptr) {
    hostId = kHost;
    forced = true;
    knobs = loopbackKnobs();
  }
  // Creates and connects n ranks; fails the test on any error.
  void start(int n) {
    create(n);
    if (::testing::Test::HasFatalFailure()) return;
    auto results = connectAll();
    for (int r = 0; r < n; ++r)
      ASSERT_TRUE(results[r].isOk()) << r << ": " << results[r].toString();
  }
};

// Why `name` cannot carry messages between two ranks of this host, or "" when it can:
// its factory refuses to create it forced (no device, no host messages), or it cannot
// connect two ranks of one host.
std::string unusableReason(const std::string& name) {
  static std::map<std::string, std::string> reasons;
  auto it = reasons.find(name);
  if (it != reasons.end()) return it->second;
  Job probe(name);
  TransportRegistry unused;
  const TransportFactory* factory = probe.factory(unused);
  std::string reason;
  if (factory == nullptr) {
    reason = "not registered";
  } else {
    auto transport = factory->create(probe.context(0, 2));
    if (!transport.isOk()) {
      reason = transport.status().toString();
    } else if (!(*transport)->canConnect(1, kHost)) {
      reason = "cannot connect two ranks of one host";
    }
  }
  reasons[name] = reason;
  return reason;
}

#define SKIP_IF_UNUSABLE(name)                                                  \
  do {                                                                          \
    const std::string why = unusableReason(name);                               \
    if (!why.empty()) GTEST_SKIP() << (name) << " is not usable here: " << why; \
  } while (0)

// --- Bytes arrive equal: transport x ranks x size ---------------------------------

class ConformanceExchange : public ::testing::TestWithParam<std::tuple<std::string, int, size_t>> {
};

TEST_P(ConformanceExchange, EveryPairExchangesTheSizeBothWaysOnTwoChannels) {
  const auto& [transport, n, size] = GetParam();
  SKIP_IF_UNUSABLE(transport);
  Job job(transport);
  job.nchannels = 2;
  job.start(n);
  ASSERT_FALSE(HasFatalFailure());
  auto results = testing::exchangeAllPairs(job, {size}, 20s);
  for (int r = 0; r < n; ++r) EXPECT_TRUE(results[r].isOk()) << r << ": " << results[r].toString();
}

INSTANTIATE_TEST_SUITE_P(Transports, ConformanceExchange,
                         ::testing::Combine(::testing::ValuesIn(registeredTransports()),
                                            ::testing::Values(2, 3),
                                            ::testing::Values(size_t{0}, size_t{1}, size_t{4096},
                                                              (size_t{1} << 20) + 3)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks_" +
                                  std::to_string(std::get<2>(info.param)) + "B";
                         });

// --- Per transport x ranks -------------------------------------------------------

class ConformanceRanks : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// The n-th send matches the n-th receive of the same (peer, channel), whichever side
// posts first: rank 0 sends kMessages of varied sizes and distinct tags to every peer;
// each peer posts half its receives before and half after the sends left.
TEST_P(ConformanceRanks, MessagesMatchInPostingOrder) {
  const std::string& transport = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  SKIP_IF_UNUSABLE(transport);
  Job job(transport);
  job.start(n);
  ASSERT_FALSE(HasFatalFailure());
  constexpr int kMessages = 40;
  auto sizeOf = [](int m) { return static_cast<size_t>((m * 977) % 5000); };
  std::vector<Status> results(n);
  testing::onEveryRank(n, [&](int r) {
    results[r] = [&]() -> Status {
      std::vector<std::vector<uint8_t>> bufs;
      std::vector<Completion> done(kMessages * (n - 1));
      bufs.reserve(done.size());
      size_t k = 0;
      for (int p = 1; p < n && r == 0; ++p) {
        for (int m = 0; m < kMessages; ++m) {
          auto& out = bufs.emplace_back(sizeOf(m));
          for (size_t i = 0; i < out.size(); ++i) out[i] = testing::pattern(0, p, m, i);
          COLLIE_RETURN_IF_ERROR(
              job.conn(0, p)->postSend(out.data(), out.size(), 100 + m, &done[k++]));
        }
      }
      if (r != 0) {
        done.resize(kMessages);
        for (int m = 0; m < kMessages; ++m) {
          if (m == kMessages / 2) {
            // Let the first half land before the rest is posted.
            for (int i = 0; i < m; ++i) {
              Completion* d = &done[i];
              while (!d->done) {
                bool progressed = false;
                COLLIE_RETURN_IF_ERROR(job.conn(r, 0)->progress(&progressed));
                if (!progressed) job.transports[r]->waitForActivity(1ms);
              }
            }
          }
          auto& in = bufs.emplace_back(sizeOf(m), 0xEE);
          COLLIE_RETURN_IF_ERROR(job.conn(r, 0)->postRecv(in.data(), in.size(), 100 + m, &done[m]));
        }
      }
      COLLIE_RETURN_IF_ERROR(
          drive(job.transports[r].get(), job.conns[r], done, Clock::now() + 20s));
      for (auto& d : done) COLLIE_RETURN_IF_ERROR(d.status);
      for (int m = 0; m < kMessages && r != 0; ++m) {
        for (size_t i = 0; i < bufs[m].size(); ++i) {
          if (bufs[m][i] != testing::pattern(0, r, m, i)) {
            return internalError("rank " + std::to_string(r) + ": message " + std::to_string(m) +
                                 " byte " + std::to_string(i) + " is wrong");
          }
        }
      }
      return Status();
    }();
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(results[r].isOk()) << r << ": " << results[r].toString();
}

// The last rank goes away while it is half-way through a large send to rank 0, which
// has that receive and one more posted: rank 0 fails within 5 s with a RemoteError
// naming it, every pending receive completes with it, and the connection stays failed.
TEST_P(ConformanceRanks, DeadPeerFailsThePendingReceivesNamingIt) {
  const std::string& transport = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  SKIP_IF_UNUSABLE(transport);
  Job job(transport);
  job.start(n);
  ASSERT_FALSE(HasFatalFailure());
  const int dead = n - 1;
  const size_t size = 64u << 20;  // more than loopback's socket buffers take at once
  std::vector<uint8_t> out(size, 1), in(size, 0), small(8, 0);
  Completion sent;
  std::vector<Completion> pending(2);
  ASSERT_TRUE(job.conn(dead, 0)->postSend(out.data(), size, 5, &sent).isOk());
  ASSERT_TRUE(job.conn(0, dead)->postRecv(in.data(), size, 5, &pending[0]).isOk());
  ASSERT_TRUE(job.conn(0, dead)->postRecv(small.data(), small.size(), 6, &pending[1]).isOk());
  for (int i = 0; i < 5; ++i) {  // only the sender moves: part of the message leaves
    bool progressed = false;
    ASSERT_TRUE(job.conn(dead, 0)->progress(&progressed).isOk());
  }
  ASSERT_FALSE(pending[0].done);
  testing::expectDeadPeerFailsFast(job, 0, dead, pending, small.data());
}

INSTANTIATE_TEST_SUITE_P(Transports, ConformanceRanks,
                         ::testing::Combine(::testing::ValuesIn(registeredTransports()),
                                            ::testing::Values(2, 3)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// --- Per transport ---------------------------------------------------------------

class Conformance : public ::testing::TestWithParam<std::string> {};

// Drives rank 0 and rank 1 of a 2-rank job until `recv` is done or 5 s passed; returns
// rank 1's last progress status (the receiver's view).
Status driveUntil(Job& job, const Completion& recv) {
  Status st;
  auto deadline = Clock::now() + 5s;
  while (!recv.done && Clock::now() < deadline) {
    bool progressed = false;
    (void)job.conn(0, 1)->progress(&progressed);
    st = job.conn(1, 0)->progress(&progressed);
    if (!progressed) std::this_thread::yield();
  }
  return st;
}

// A receive whose message carries another tag or length fails with kMismatch naming
// the sender, in the same words on every transport, before a byte reaches the buffer
// (postRecv and, where offered, postRecvReduce; an inline-sized and a large message).
TEST_P(Conformance, MismatchReadsTheSameOnEveryTransportAndWritesNothing) {
  const std::string transport = GetParam();
  SKIP_IF_UNUSABLE(transport);
  for (size_t size : {size_t{100}, size_t{100000}}) {
    for (int variant = 0; variant < 4; ++variant) {
      const bool tagDiffers = variant % 2 == 0;
      const bool reducing = variant >= 2;
      Job job(transport);
      job.start(2);
      ASSERT_FALSE(HasFatalFailure());
      if (reducing && !job.conn(1, 0)->reducesOnReceive()) continue;
      std::vector<uint8_t> out(size, 7), in(tagDiffers ? size : size / 2, 0xAB);
      const std::vector<uint8_t> own(in.size(), 1);
      const ReduceOnReceive reduce{in.data(), own.data(), DataType::kUint8,    ReduceOp::kSum,
                                   0,         false,      &hostReduceBackend()};
      const uint64_t tag = tagDiffers ? 0x22 : 0x11;
      Completion sendDone, recvDone;
      ASSERT_TRUE(job.conn(0, 1)->postSend(out.data(), out.size(), 0x11, &sendDone).isOk());
      ASSERT_TRUE((reducing ? job.conn(1, 0)->postRecvReduce(reduce, in.size(), tag, &recvDone)
                            : job.conn(1, 0)->postRecv(in.data(), in.size(), tag, &recvDone))
                      .isOk());
      Status st = driveUntil(job, recvDone);
      SCOPED_TRACE(transport + " size " + std::to_string(size) + " variant " +
                   std::to_string(variant));
      ASSERT_EQ(st.code(), StatusCode::kMismatch) << st.toString();
      EXPECT_EQ(st.peer(), 0);
      EXPECT_EQ(st.message(),
                "message from rank 0 on channel 0 has tag 0x11 and " + std::to_string(size) +
                    " bytes, but the receive posted for it expects tag " +
                    (tagDiffers ? "0x22" : "0x11") + " and " + std::to_string(in.size()) +
                    " bytes: the ranks disagree on the sequence of collectives "
                    "or their sizes");
      EXPECT_TRUE(recvDone.done);
      EXPECT_EQ(recvDone.status.code(), StatusCode::kMismatch);
      EXPECT_EQ(recvDone.hasPeerTag, tagDiffers);
      if (tagDiffers) {
        EXPECT_EQ(recvDone.peerTag, 0x11u);
      }
      for (uint8_t b : in) ASSERT_EQ(b, 0xAB) << "bytes of a mismatched message were written";
      bool progressed = false;
      EXPECT_EQ(job.conn(1, 0)->progress(&progressed).code(), StatusCode::kMismatch)
          << "the connection did not stay failed";
    }
  }
}

// A rank whose job secret differs is refused, and nobody connects to it.
TEST_P(Conformance, WrongSecretIsRefused) {
  const std::string transport = GetParam();
  SKIP_IF_UNUSABLE(transport);
  Job job(transport);
  job.timeout = 2s;
  job.secrets = {secretOf(3), secretOf(99)};
  job.create(2);
  ASSERT_FALSE(HasFatalFailure());
  if (!job.transports[0]->caps().authenticatesPeers) {
    GTEST_SKIP() << transport << " does not authenticate peers (TransportCaps::authenticatesPeers)";
  }
  auto results = job.connectAll();
  bool refused = false;
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(results[r].isOk()) << "rank " << r << " connected to a rank of another job";
    EXPECT_EQ(results[r].peer(), 1 - r) << results[r].toString();
    refused = refused || results[r].code() == StatusCode::kUnauthenticated;
  }
  EXPECT_TRUE(refused) << results[0].toString() << " / " << results[1].toString();
}

// postRecvReduce combines the incoming bytes with the local operand, for every size.
TEST_P(Conformance, ReduceOnReceiveMatchesTheSum) {
  const std::string transport = GetParam();
  SKIP_IF_UNUSABLE(transport);
  Job job(transport);
  job.start(2);
  ASSERT_FALSE(HasFatalFailure());
  if (!job.conn(1, 0)->reducesOnReceive()) {
    GTEST_SKIP() << transport << " does not reduce on receive (Connection::reducesOnReceive)";
  }
  for (size_t size : {size_t{0}, size_t{1}, size_t{4096}, (size_t{1} << 20) + 3}) {
    std::vector<uint8_t> incoming(size), own(size), output(size, 0xEE);
    for (size_t i = 0; i < size; ++i) {
      incoming[i] = testing::pattern(0, 1, size, i);
      own[i] = testing::pattern(1, 0, size, i);
    }
    const ReduceOnReceive reduce{output.data(),       own.data(), DataType::kUint8,
                                 ReduceOp::kSum,      0,          false,
                                 &hostReduceBackend()};
    std::vector<Completion> done(2);
    ASSERT_TRUE(job.conn(0, 1)->postSend(incoming.data(), size, 9, &done[0]).isOk());
    ASSERT_TRUE(job.conn(1, 0)->postRecvReduce(reduce, size, 9, &done[1]).isOk());
    ASSERT_TRUE(
        testing::drivePair(job.conn(0, 1), job.conn(1, 0), done, Clock::now() + 10s).isOk());
    ASSERT_TRUE(done[1].done && done[1].status.isOk()) << done[1].status.toString();
    for (size_t i = 0; i < size; ++i) {
      ASSERT_EQ(output[i], static_cast<uint8_t>(incoming[i] + own[i]))
          << "size " << size << " byte " << i;
    }
  }
}

// --- Faults through the wrapper, at the connection ---------------------------------

// Rank 0's connection to rank 1 injects `fault`; rank 0 sends `sizes` (tags 1, 2, ...),
// rank 1 posts receives for the same sizes and tags.
struct FaultyPair {
  Job job;
  std::unique_ptr<testing::FaultyConnection> faulty;
  std::vector<std::vector<uint8_t>> out, in;
  std::vector<Completion> sent, received;

  FaultyPair(const std::string& transport, Fault fault, const std::vector<size_t>& sizes)
      : job(transport), sent(sizes.size()), received(sizes.size()) {
    job.start(2);
    if (::testing::Test::HasFatalFailure()) return;
    faulty = std::make_unique<testing::FaultyConnection>(std::move(job.conns[0][0]), 0, fault);
    for (size_t m = 0; m < sizes.size(); ++m) {
      auto& o = out.emplace_back(sizes[m]);
      for (size_t i = 0; i < o.size(); ++i) o[i] = testing::pattern(0, 1, m, i);
      in.emplace_back(sizes[m], 0xAB);
    }
  }
  Status postAll() {
    for (size_t m = 0; m < out.size(); ++m) {
      COLLIE_RETURN_IF_ERROR(
          job.conn(1, 0)->postRecv(in[m].data(), in[m].size(), m + 1, &received[m]));
    }
    for (size_t m = 0; m < out.size(); ++m) {
      COLLIE_RETURN_IF_ERROR(faulty->postSend(out[m].data(), out[m].size(), m + 1, &sent[m]));
    }
    return Status();
  }
  // Progresses both sides until every receive is done or `limit`; returns rank 1's
  // first error.
  Status run(Clock::duration limit) {
    Status st;
    auto deadline = Clock::now() + limit;
    auto allDone = [&] {
      for (auto& d : received) {
        if (!d.done) return false;
      }
      return true;
    };
    while (!allDone() && Clock::now() < deadline) {
      bool progressed = false;
      (void)faulty->progress(&progressed);
      Status s = job.conn(1, 0)->progress(&progressed);
      if (!s.isOk() && st.isOk()) st = s;
      if (!s.isOk()) break;
      if (!progressed) std::this_thread::sleep_for(100us);
    }
    return st;
  }
};

TEST_P(Conformance, DelayedMessageArrivesLateInOrderAndIntact) {
  const std::string transport = GetParam();
  SKIP_IF_UNUSABLE(transport);
  FaultyPair pair(transport, Fault::delayed(0, 200ms), {1000, 10, 70000});
  ASSERT_FALSE(HasFatalFailure());
  auto start = Clock::now();
  ASSERT_TRUE(pair.postAll().isOk());
  Status st = pair.run(10s);
  ASSERT_TRUE(st.isOk()) << st.toString();
  EXPECT_GE(Clock::now() - start, 200ms);
  for (size_t m = 0; m < pair.out.size(); ++m) {
    EXPECT_TRUE(pair.received[m].done && pair.received[m].status.isOk());
    EXPECT_EQ(pair.in[m], pair.out[m]) << "message " << m;
  }
}

// A dropped message shifts the stream: the next one lands on its receive, whose tag
// differs (the receiver cannot tell a drop from a disagreement, and says the latter).
TEST_P(Conformance, DroppedMessageIsAMismatchOnTheNextOne) {
  const std::string transport = GetParam();
  SKIP_IF_UNUSABLE(transport);
  FaultyPair pair(transport, Fault::drop(0), {64, 64});
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(pair.postAll().isOk());
  Status st = pair.run(5s);
  ASSERT_EQ(st.code(), StatusCode::kMismatch) << st.toString();
  EXPECT_EQ(st.peer(), 0);
  EXPECT_TRUE(pair.received[0].hasPeerTag);
  EXPECT_EQ(pair.received[0].peerTag, 2u);
  EXPECT_TRUE(pair.sent[0].done && pair.sent[0].status.isOk());
}

TEST_P(Conformance, TruncatedMessageIsALengthMismatch) {
  const std::string transport = GetParam();
  SKIP_IF_UNUSABLE(transport);
  FaultyPair pair(transport, Fault::truncate(0, 10), {100});
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(pair.postAll().isOk());
  Status st = pair.run(5s);
  ASSERT_EQ(st.code(), StatusCode::kMismatch) << st.toString();
  EXPECT_EQ(st.message(),
            "message from rank 0 on channel 0 has tag 0x1 and 10 bytes, but the receive posted "
            "for it expects tag 0x1 and 100 bytes: the ranks disagree on the sequence of "
            "collectives or their sizes");
  for (uint8_t b : pair.in[0]) ASSERT_EQ(b, 0xAB);
}

// A flipped tag is caught; a flipped payload byte is not (no transport checksums its
// payload: the wire's own checks are all there is), and arrives as sent.
TEST_P(Conformance, CorruptedTagIsCaughtCorruptedPayloadIsNot) {
  const std::string transport = GetParam();
  SKIP_IF_UNUSABLE(transport);
  {
    FaultyPair pair(transport, Fault::corrupt(0, 0, /*tag=*/true), {100});
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_TRUE(pair.postAll().isOk());
    Status st = pair.run(5s);
    ASSERT_EQ(st.code(), StatusCode::kMismatch) << st.toString();
    EXPECT_EQ(pair.received[0].peerTag, 0u);  // tag 1 with its lowest bit flipped
  }
  FaultyPair pair(transport, Fault::corrupt(0, 37), {100});
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(pair.postAll().isOk());
  ASSERT_TRUE(pair.run(5s).isOk());
  std::vector<uint8_t> expected = pair.out[0];
  expected[37] ^= 0xFF;
  EXPECT_EQ(pair.in[0], expected);
  EXPECT_EQ(pair.out[0][37], testing::pattern(0, 1, 0, 37)) << "the caller's buffer changed";
}

// The link closes after 150 bytes: the first message arrives, the send that would cross
// the limit fails naming the peer, and so does every operation still pending there.
TEST_P(Conformance, ClosedLinkFailsThisSideNamingThePeer) {
  const std::string transport = GetParam();
  SKIP_IF_UNUSABLE(transport);
  FaultyPair pair(transport, Fault::closeAfter(150), {100, 100});
  ASSERT_FALSE(HasFatalFailure());
  std::vector<uint8_t> back(8);
  Completion backDone;
  ASSERT_TRUE(pair.faulty->postRecv(back.data(), back.size(), 7, &backDone).isOk());
  ASSERT_TRUE(pair.job.conn(1, 0)->postRecv(pair.in[0].data(), 100, 1, &pair.received[0]).isOk());
  ASSERT_TRUE(pair.faulty->postSend(pair.out[0].data(), 100, 1, &pair.sent[0]).isOk());
  Status closed = pair.faulty->postSend(pair.out[1].data(), 100, 2, &pair.sent[1]);
  EXPECT_EQ(closed.code(), StatusCode::kRemoteError) << closed.toString();
  EXPECT_EQ(closed.peer(), 1);
  EXPECT_NE(closed.message().find("rank 1"), std::string::npos) << closed.message();
  EXPECT_TRUE(backDone.done);
  EXPECT_EQ(backDone.status.code(), StatusCode::kRemoteError);
  bool progressed = false;
  EXPECT_EQ(pair.faulty->progress(&progressed).code(), StatusCode::kRemoteError);
}

INSTANTIATE_TEST_SUITE_P(Transports, Conformance, ::testing::ValuesIn(registeredTransports()),
                         [](const auto& info) { return info.param; });

// --- Faults through the wrapper, seen by the engine ---------------------------------

// Two communicators over `transport` wrapped by FaultyTransport; rank 0's connection
// to rank 1 on channel 0 carries `fault`, armed once both were created. Each rank runs
// one all-reduce of 256 Ki floats; returns each rank's result and how long after both
// started it ended.
struct EngineRun {
  std::vector<Status> status = std::vector<Status>(2);
  std::vector<Clock::duration> took = std::vector<Clock::duration>(2);
  bool rightSum = true;
};

EngineRun runAllReduce(const std::string& transport, Fault fault) {
  static std::atomic<bool> armed{false};
  armed = false;
  fault.armed = &armed;
  Options options;
  options.transport =
      testing::armFaultyTransport(transport, [fault](int rank, int peer, int channel) {
        return rank == 0 && peer == 1 && channel == 0 ? fault : Fault::none();
      });
  options.timeout = 2s;  // also the setup deadline: room for a loaded (sanitizer) machine
  options.hostId = kHost;
  options.config = loopbackKnobs();
  auto comms = testing::makeCommunicators(2, options);
  testing::disarmFaultyTransport();
  EngineRun run;
  if (comms.size() != 2) return run;
  armed = true;
  constexpr size_t kCount = 256 * 1024;
  const auto start = Clock::now();  // a delay counts from rank 0's post, so from before both
  testing::onEveryRank(2, [&](int r) {
    std::vector<float> in(kCount, static_cast<float>(r + 1)), out(kCount, 0);
    auto work =
        comms[r]->allReduce(in.data(), out.data(), kCount, DataType::kFloat32, ReduceOp::kSum);
    run.status[r] = work.isOk() ? work->wait(20s) : work.status();
    run.took[r] = Clock::now() - start;
    if (run.status[r].isOk()) {
      for (float v : out) {
        if (v != 3.0f) run.rightSum = false;
      }
    }
  });
  const auto teardown = Clock::now();
  comms.clear();
  EXPECT_LT(Clock::now() - teardown, 2s) << "tearing down after the fault was slow";
  return run;
}

// Every rank in `ranks` fails within the engine's timeout (2 s) and a margin (a
// Work::wait of 20 s means a hang), and its error names the other rank.
void expectFailNamingThePeer(const EngineRun& run, std::vector<int> ranks = {0, 1}) {
  for (int r : ranks) {
    const Status& st = run.status[r];
    ASSERT_FALSE(st.isOk()) << "rank " << r << " finished the all-reduce";
    EXPECT_EQ(st.peer(), 1 - r) << "rank " << r << ": " << st.toString();
    EXPECT_NE(st.message().find("rank " + std::to_string(1 - r)), std::string::npos)
        << "rank " << r << ": " << st.toString();
    EXPECT_LT(run.took[r], 6s) << "rank " << r << ": " << st.toString();
  }
}

class ConformanceEngine : public ::testing::TestWithParam<std::string> {};

// fault: one message of an all-reduce delayed 300 ms (fault-injecting connection, every transport)
// | the all-reduce completes with the right sum, that much later | transport_conformance_test
TEST_P(ConformanceEngine, DelayedMessageOnlySlowsTheCollective) {
  SKIP_IF_UNUSABLE(GetParam());
  EngineRun run = runAllReduce(GetParam(), Fault::delayed(0, 300ms));
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(run.status[r].isOk()) << r << ": " << run.status[r].toString();
  EXPECT_TRUE(run.rightSum);
  EXPECT_GE(run.took[1], 300ms);
}

// fault: one message of an all-reduce truncated (fault-injecting connection, every transport) | the
// receiver fails with Mismatch naming the sender, the sender with an error naming the receiver,
// within COLLIE_TIMEOUT | transport_conformance_test
TEST_P(ConformanceEngine, TruncatedMessageFailsBothRanksNamingThePeer) {
  SKIP_IF_UNUSABLE(GetParam());
  EngineRun run = runAllReduce(GetParam(), Fault::truncate(0, 4));
  expectFailNamingThePeer(run);
  EXPECT_EQ(run.status[1].code(), StatusCode::kMismatch) << run.status[1].toString();
}

// fault: one message of an all-reduce dropped (fault-injecting connection, every transport) | the
// receiver fails naming the sender within COLLIE_TIMEOUT; the sender fails naming the receiver or
// completes | transport_conformance_test
TEST_P(ConformanceEngine, DroppedMessageFailsTheReceiverNamingThePeer) {
  SKIP_IF_UNUSABLE(GetParam());
  // Rank 0 may finish: what it waits for can still arrive. Rank 1 cannot.
  EngineRun run = runAllReduce(GetParam(), Fault::drop(0));
  expectFailNamingThePeer(run, {1});
  if (!run.status[0].isOk()) expectFailNamingThePeer(run, {0});
}

// fault: a link closes mid all-reduce, after N bytes (fault-injecting connection, every transport)
// | both ranks fail naming each other (RemoteError on the closing side) within COLLIE_TIMEOUT |
// transport_conformance_test
TEST_P(ConformanceEngine, ClosedLinkFailsBothRanksNamingThePeer) {
  SKIP_IF_UNUSABLE(GetParam());
  EngineRun run = runAllReduce(GetParam(), Fault::closeAfter(4096));
  expectFailNamingThePeer(run);
  EXPECT_EQ(run.status[0].code(), StatusCode::kRemoteError) << run.status[0].toString();
}

INSTANTIATE_TEST_SUITE_P(Transports, ConformanceEngine, ::testing::ValuesIn(registeredTransports()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace collie
