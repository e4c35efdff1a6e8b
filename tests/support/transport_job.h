// Test support: N ranks of one network transport as threads of this process, over the
// in-memory store, without a Communicator: the harness the per-transport tests share.
//
// TransportJob creates one Transport per rank from a registrar (registerTcpTransport,
// registerUcxTransport ...) or the process's registry, connects every rank to every other in
// parallel and hands out the Connection of (rank, peer, channel). exchangeAllPairs() posts, on
// every rank, a send and a receive of each size to each peer on each channel, drives them to the
// end and checks every received byte against the sender's pattern. expectDeadPeerFailsFast() is the
// dead-peer check the transports share.
//
// Thread safety: a TransportJob is built and torn down by the test's thread;
// connectAll() and exchangeAllPairs() run one thread per rank and join them.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/transport/transport.h"

namespace collie::testing {

using Conns = std::vector<std::unique_ptr<Connection>>;

inline JobSecret secretOf(uint8_t seed) {
  JobSecret s{};
  for (auto& b : s) b = seed++;
  return s;
}

struct TransportJob {
  using Registrar = void (*)(TransportRegistry&);

  TransportJob(std::string name, Registrar registrar)
      : name(std::move(name)), registrar(registrar) {}

  std::string name;
  Registrar registrar;
  std::shared_ptr<Store> store = makeInMemoryStore();
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<Conns> conns;
  std::vector<std::vector<int>> peers;
  std::string jobKey = "job" + std::to_string(std::rand());
  int nchannels = 1;
  bool hostPerRank = false;                  // every rank on a host of its own
  std::string hostId;                        // every rank's host id unless hostPerRank
  bool forced = false;                       // as if COLLIE_TRANSPORT named this transport
  std::chrono::milliseconds timeout{10000};  // connection setup deadline
  std::vector<JobSecret> secrets;            // per rank; empty: all share secretOf(3)
  // Knobs of every rank's configuration, over the environment's (as Options::config
  // does for a communicator): {{"COLLIE_SOCKET_IFNAME", "lo"}}.
  KnobOverrides knobs;

  TransportContext context(int rank, int n) const {
    TransportContext ctx;
    Result<Config> config = Config::fromEnvironment().withOverrides(knobs);
    if (config.isOk()) {
      ctx.config = *config;
    } else {
      ADD_FAILURE() << "TransportJob::knobs: " << config.status().toString();
    }
    ctx.rank = rank;
    ctx.nranks = n;
    ctx.nchannels = nchannels;
    ctx.hostId = hostPerRank ? "host" + std::to_string(rank) : hostId;
    ctx.forced = forced;
    ctx.jobKey = jobKey;
    ctx.secret = secrets.empty() ? secretOf(3) : secrets[rank];
    ctx.store = store;
    ctx.timeout = timeout;
    return ctx;
  }

  // The factory from `registrar`, or from the process's registry when it is null.
  const TransportFactory* factory(TransportRegistry& registry) const {
    if (registrar == nullptr) return TransportRegistry::instance().find(name);
    registrar(registry);
    return registry.find(name);
  }

  // Creates n transports; expectedPriority < 0: not checked.
  void create(int n, int expectedPriority = -1) {
    TransportRegistry registry;
    const TransportFactory* f = factory(registry);
    ASSERT_NE(f, nullptr) << name << " is not registered";
    if (expectedPriority >= 0) {
      EXPECT_EQ(f->priority, expectedPriority);
    }
    for (int r = 0; r < n; ++r) {
      auto t = f->create(context(r, n));
      ASSERT_TRUE(t.isOk()) << t.status().toString();
      transports.push_back(std::move(*t));
    }
  }

  // Connects every rank to all others, one thread per rank; returns each rank's result.
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

inline uint8_t pattern(int src, int dst, size_t size, size_t i) {
  return static_cast<uint8_t>(src * 31 + dst * 7 + size * 3 + i * 13 + (i >> 9));
}

// Drives `conns` until every completion is done or an error; returns the first error.
inline Status drive(Transport* transport, Conns& conns, std::vector<Completion>& done,
                    Deadline deadline) {
  for (;;) {
    bool progressed = false;
    for (auto& c : conns) COLLIE_RETURN_IF_ERROR(c->progress(&progressed));
    bool all = true;
    for (auto& d : done) all = all && d.done;
    if (all) return Status();
    if (Clock::now() > deadline) return timeoutError("test drive timed out");
    if (!progressed) transport->waitForActivity(std::chrono::milliseconds(1));
  }
}

// Drives the two ends `a` and `b` of one pair until both completions are done or the
// deadline passes; returns the first error.
inline Status drivePair(Connection* a, Connection* b, std::vector<Completion>& done,
                        Deadline deadline) {
  while (!(done[0].done && done[1].done) && Clock::now() < deadline) {
    bool progressed = false;
    COLLIE_RETURN_IF_ERROR(a->progress(&progressed));
    COLLIE_RETURN_IF_ERROR(b->progress(&progressed));
  }
  return Status();
}

// Tears down rank `dead` while `survivor` still has the receives of `pending` posted on
// their connection, then checks what a user would see: driving the survivor fails
// within 5 s with a RemoteError naming the dead rank, every pending receive completes
// with that error, and the broken connection keeps failing instead of hanging.
// `scratch` is one byte for that last receive.
inline void expectDeadPeerFailsFast(TransportJob& job, int survivor, int dead,
                                    std::vector<Completion>& pending, void* scratch) {
  using std::chrono::seconds;
  job.conns[dead].clear();
  job.transports[dead].reset();
  auto start = Clock::now();
  Status st = drive(job.transports[survivor].get(), job.conns[survivor], pending,
                    Clock::now() + seconds(10));
  EXPECT_LT(Clock::now() - start, seconds(5));
  ASSERT_EQ(st.code(), StatusCode::kRemoteError) << st.toString();
  EXPECT_EQ(st.peer(), dead);
  EXPECT_NE(st.message().find("rank " + std::to_string(dead)), std::string::npos) << st.message();
  for (const Completion& d : pending) {
    EXPECT_TRUE(d.done);
    EXPECT_EQ(d.status.code(), StatusCode::kRemoteError)
        << "pending operation " << (&d - pending.data()) << ": " << d.status.toString();
  }
  Completion again;
  EXPECT_EQ(job.conn(survivor, dead)->postRecv(scratch, 1, 6, &again).code(),
            StatusCode::kRemoteError);
}

// One rank's part of exchangeAllPairs.
inline Status exchangeWithAllPeers(TransportJob& job, int r, const std::vector<size_t>& sizes,
                                   Clock::duration limit) {
  std::vector<std::vector<uint8_t>> sendBufs, recvBufs;
  std::vector<std::tuple<int, size_t, size_t>> checks;  // peer, size, receive buffer
  size_t ops = job.peers[r].size() * job.nchannels * sizes.size() * 2;
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
        COLLIE_RETURN_IF_ERROR(job.conn(r, p, ch)->postRecv(in.data(), size, tag, &done[k++]));
        auto& out = sendBufs.emplace_back(size);
        for (size_t i = 0; i < size; ++i) out[i] = pattern(r, p, size, i);
        COLLIE_RETURN_IF_ERROR(job.conn(r, p, ch)->postSend(out.data(), size, tag, &done[k++]));
      }
    }
  }
  COLLIE_RETURN_IF_ERROR(drive(job.transports[r].get(), job.conns[r], done, Clock::now() + limit));
  for (auto& d : done) COLLIE_RETURN_IF_ERROR(d.status);
  for (auto& [p, size, idx] : checks) {
    for (size_t i = 0; i < size; ++i) {
      if (recvBufs[idx][i] != pattern(p, r, size, i)) {
        return internalError("rank " + std::to_string(r) + " got bad byte " + std::to_string(i) +
                             " of " + std::to_string(size) + " from " + std::to_string(p));
      }
    }
  }
  return Status();
}

// Every rank sends each size to each peer on each channel and receives the same from
// them, all at once; returns each rank's first error (or OK).
inline std::vector<Status> exchangeAllPairs(TransportJob& job, const std::vector<size_t>& sizes,
                                            Clock::duration limit) {
  int n = static_cast<int>(job.transports.size());
  std::vector<Status> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] { results[r] = exchangeWithAllPeers(job, r, sizes, limit); });
  }
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace collie::testing
