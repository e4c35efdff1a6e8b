// Transport micro-benchmarks (Google Benchmark): two ranks as threads of this process,
// connected by one transport from the registry (shm, tcp over loopback, and whatever
// else the build has), driven through the Connection API with no engine in between.
//
//   PingPong/<transport>/<bytes>:  rank 0 sends, rank 1 echoes; the time is half a
//                                  round trip (one-way latency).
//   Stream/<transport>/<bytes>:    rank 0 keeps a window of 4 messages in flight to
//                                  rank 1; bytes_per_second is the delivered bandwidth.
//
// Both ranks wait as the engine does (busy poll, then block in the transport),
// so on a loaded machine the figures include the time a thread waits for a core.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collie/store.h"
#include "core/transport/transport.h"

namespace collie {
namespace {

struct Pair {
  std::unique_ptr<Transport> transports[2];
  std::unique_ptr<Connection> conns[2];  // conns[r]: rank r's connection to the other
};

// Connects two ranks through transport `name`; null (and a message) when it cannot.
std::unique_ptr<Pair> connectPair(const std::string& name, std::string* error) {
  const TransportFactory* factory = TransportRegistry::instance().find(name);
  if (factory == nullptr) {
    *error = name + " is not in this build";
    return nullptr;
  }
  auto pair = std::make_unique<Pair>();
  auto store = makeInMemoryStore();
  const std::string jobKey = "bench" + std::to_string(std::rand());
  Status errors[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      TransportContext ctx;
      ctx.rank = r;
      ctx.nranks = 2;
      ctx.hostId = "benchhost";
      ctx.jobKey = jobKey;
      ctx.store = store;
      ctx.timeout = std::chrono::milliseconds(10000);
      Result<std::unique_ptr<Transport>> t = factory->create(ctx);
      if (!t.isOk()) {
        errors[r] = t.status();
        return;
      }
      pair->transports[r] = std::move(*t);
      auto conns = pair->transports[r]->connect({1 - r});
      if (!conns.isOk()) {
        errors[r] = conns.status();
        return;
      }
      pair->conns[r] = std::move((*conns)[0]);
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : errors) {
    if (!s.isOk()) {
      *error = s.toString();
      return nullptr;
    }
  }
  return pair;
}

// Polls `conn` until `done` is set, as the engine does: busy polling for 50 us
// (yielding after 5 us), then blocking in the transport's waitForActivity(). False on a connection
// error.
bool drive(Transport* transport, Connection* conn, const Completion& done) {
  auto idleSince = std::chrono::steady_clock::now();
  while (!done.done) {
    bool progressed = false;
    if (!conn->progress(&progressed).isOk()) return false;
    const auto now = std::chrono::steady_clock::now();
    if (progressed) {
      idleSince = now;
    } else if (now - idleSince > std::chrono::microseconds(50)) {
      transport->waitForActivity(std::chrono::microseconds(5000));
    } else if (now - idleSince > std::chrono::microseconds(5)) {
      std::this_thread::yield();
    }
  }
  return done.status.isOk();
}

void PingPong(benchmark::State& state, const std::string& name) {
  std::string error;
  auto pair = connectPair(name, &error);
  if (!pair) {
    state.SkipWithError(error.c_str());
    return;
  }
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> a(bytes, 1), b(bytes);
  std::atomic<bool> stop{false};
  // Rank 1 echoes until told to stop (the stop message is a zero-length one).
  std::thread echo([&] {
    std::vector<uint8_t> buf(bytes);
    while (true) {
      Completion got;
      pair->conns[1]->postRecv(buf.data(), bytes, 0, &got);
      if (!drive(pair->transports[1].get(), pair->conns[1].get(), got) || stop.load()) return;
      Completion sent;
      pair->conns[1]->postSend(buf.data(), bytes, 0, &sent);
      if (!drive(pair->transports[1].get(), pair->conns[1].get(), sent)) return;
    }
  });
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    Completion sent, got;
    pair->conns[0]->postSend(a.data(), bytes, 0, &sent);
    pair->conns[0]->postRecv(b.data(), bytes, 0, &got);
    if (!drive(pair->transports[0].get(), pair->conns[0].get(), sent) ||
        !drive(pair->transports[0].get(), pair->conns[0].get(), got)) {
      state.SkipWithError("connection failed");
      break;
    }
  }
  const std::chrono::duration<double, std::micro> elapsed =
      std::chrono::steady_clock::now() - start;
  state.counters["one_way_us"] =
      elapsed.count() / std::max<double>(1, 2.0 * static_cast<double>(state.iterations()));
  stop = true;
  Completion last;
  pair->conns[0]->postSend(a.data(), bytes, 0, &last);
  drive(pair->transports[0].get(), pair->conns[0].get(), last);
  echo.join();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 *
                          static_cast<int64_t>(bytes));
}

void Stream(benchmark::State& state, const std::string& name) {
  std::string error;
  auto pair = connectPair(name, &error);
  if (!pair) {
    state.SkipWithError(error.c_str());
    return;
  }
  const size_t bytes = static_cast<size_t>(state.range(0));
  constexpr int kWindow = 4;
  std::vector<uint8_t> src(bytes, 7);
  std::atomic<int64_t> expected{-1};
  // The receiver takes messages until it got `expected` of them.
  std::thread sink([&] {
    std::vector<std::vector<uint8_t>> bufs(kWindow, std::vector<uint8_t>(bytes));
    Completion done[kWindow];
    int64_t received = 0, posted = 0;
    while (expected.load() < 0 || received < expected.load()) {
      while (posted - received < kWindow && (expected.load() < 0 || posted < expected.load())) {
        done[posted % kWindow] = Completion();
        pair->conns[1]->postRecv(bufs[posted % kWindow].data(), bytes, 0, &done[posted % kWindow]);
        ++posted;
      }
      if (received < posted &&
          !drive(pair->transports[1].get(), pair->conns[1].get(), done[received % kWindow])) {
        return;
      }
      while (received < posted && done[received % kWindow].done) ++received;
    }
  });
  Completion sent[kWindow];
  int64_t posted = 0, finished = 0;
  for (auto _ : state) {
    if (posted - finished == kWindow) {
      if (!drive(pair->transports[0].get(), pair->conns[0].get(), sent[finished % kWindow])) {
        state.SkipWithError("connection failed");
        break;
      }
      ++finished;
    }
    sent[posted % kWindow] = Completion();
    pair->conns[0]->postSend(src.data(), bytes, 0, &sent[posted % kWindow]);
    ++posted;
  }
  expected = posted;
  while (finished < posted)
    drive(pair->transports[0].get(), pair->conns[0].get(), sent[finished++ % kWindow]);
  sink.join();
  state.SetBytesProcessed(posted * static_cast<int64_t>(bytes));
}

void registerAll() {
  for (const TransportFactory& factory : TransportRegistry::instance().factories()) {
    const std::string name = factory.name;
    benchmark::RegisterBenchmark(("PingPong/" + name).c_str(),
                                 [name](benchmark::State& s) { PingPong(s, name); })
        ->Arg(8)
        ->Arg(4096)
        ->Arg(65536)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("Stream/" + name).c_str(),
                                 [name](benchmark::State& s) { Stream(s, name); })
        ->Arg(64 << 10)
        ->Arg(1 << 20)
        ->Arg(4 << 20)
        ->UseRealTime();
  }
}

}  // namespace
}  // namespace collie

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  collie::registerAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
