// Helpers for the shm transport tests: connecting ranks, driving connections until a
// set of operations completes (progress + waitForActivity, with a deadline), and
// deterministic payloads.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collie/store.h"
#include "core/transport/transport.h"
#include "transports/shm/shm_transport.h"

namespace collie::testing {

struct ShmRank {
  int rank = 0;
  int nchannels = 1;
  std::vector<int> peers;
  std::unique_ptr<Transport> transport;
  std::vector<std::unique_ptr<Connection>> connections;

  Connection* conn(int peer, int channel) {
    for (size_t i = 0; i < peers.size(); ++i) {
      if (peers[i] == peer) return connections[i * nchannels + channel].get();
    }
    return nullptr;
  }
  std::vector<Connection*> all() {
    std::vector<Connection*> out;
    for (auto& c : connections) out.push_back(c.get());
    return out;
  }
};

// `knobs`: the configuration's overrides ({{"COLLIE_BUFFSIZE", "4K"}}); every other knob
// is at its default.
inline TransportContext shmContext(std::shared_ptr<Store> store, const std::string& jobKey,
                                   int rank, int nranks, int nchannels,
                                   const KnobOverrides& knobs = {}) {
  TransportContext ctx;
  Result<Config> config = Config().withOverrides(knobs);
  EXPECT_TRUE(config.isOk()) << config.status().toString();
  if (config.isOk()) ctx.config = *config;
  ctx.rank = rank;
  ctx.nranks = nranks;
  ctx.nchannels = nchannels;
  ctx.hostId = "testhost";
  ctx.jobKey = jobKey;
  ctx.store = std::move(store);
  ctx.timeout = std::chrono::milliseconds(10000);
  return ctx;
}

// Creates the transport and connects to every other rank. Blocks until the peers
// connect too (call it from one thread per rank).
inline Status connectShmRank(const TransportContext& ctx, ShmRank* out) {
  out->rank = ctx.rank;
  out->nchannels = ctx.nchannels;
  out->peers.clear();
  for (int r = 0; r < ctx.nranks; ++r) {
    if (r != ctx.rank) out->peers.push_back(r);
  }
  Result<std::unique_ptr<Transport>> transport = createShmTransport(ctx);
  if (!transport.isOk()) return transport.status();
  out->transport = std::move(*transport);
  auto conns = out->transport->connect(out->peers);
  if (!conns.isOk()) return conns.status();
  out->connections = std::move(*conns);
  return Status();
}

// Progresses `conns` until every completion in `done` is set, a connection reports an
// error (returned), or `limit` passes (Timeout).
inline Status driveShm(Transport* transport, const std::vector<Connection*>& conns,
                       const std::vector<Completion*>& done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    bool progressed = false;
    for (Connection* c : conns) {
      Status s = c->progress(&progressed);
      if (!s.isOk()) return s;
    }
    bool all = true;
    for (Completion* d : done) all = all && d->done;
    if (all) return Status();
    if (std::chrono::steady_clock::now() > deadline) {
      return timeoutError("test: operations did not complete in time");
    }
    if (!progressed) transport->waitForActivity(std::chrono::milliseconds(5));
  }
}

inline uint8_t patternByte(int src, int dst, int channel, int message, size_t i) {
  return static_cast<uint8_t>(
      (src * 131 + dst * 31 + channel * 17 + message * 7 + i * 13 + (i >> 8)) & 0xff);
}

inline uint64_t testTag(int src, int dst, int channel, int message) {
  return (uint64_t{0xC011E} << 40) | (uint64_t(src) << 32) | (uint64_t(dst) << 24) |
         (uint64_t(channel) << 16) | uint64_t(message);
}

}  // namespace collie::testing
