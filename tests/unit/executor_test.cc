// Executor: runs real schedules between two ranks (threads) over an in-memory
// transport: the results are right; a point-to-point batch takes in what is queued
// behind it and completes it; and each way of failing gives its message: no progress
// until the timeout (naming the peer and what for), the abort flag, a broken
// connection, ranks running different collectives (naming the field), a team step's
// error. A team step runs first: what it ran ends the collective, a decline on every
// rank runs the fallback steps. Also what it reports about its transports.
#include "core/engine/executor.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "core/plan/fingerprint.h"

namespace collie {
namespace {

using namespace std::chrono_literals;

// Messages between ranks 0 and 1: toward[r] holds those for rank r, in order.
struct Wire {
  struct Message {
    uint64_t tag;
    std::vector<uint8_t> bytes;
  };
  std::mutex mutex;
  std::deque<Message> toward[2];
};

class PipeConnection : public Connection {
 public:
  PipeConnection(std::shared_ptr<Wire> wire, int rank, int peer)
      : wire_(std::move(wire)), rank_(rank), peer_(peer) {}
  Status postSend(const void* data, size_t bytes, uint64_t tag, Completion* done) override {
    std::lock_guard<std::mutex> lock(wire_->mutex);
    const auto* p = static_cast<const uint8_t*>(data);
    wire_->toward[peer_].push_back({tag, std::vector<uint8_t>(p, p + bytes)});
    sends_.push_back(done);
    return Status();
  }
  Status postRecv(void* data, size_t bytes, uint64_t tag, Completion* done) override {
    recvs_.push_back({static_cast<uint8_t*>(data), bytes, tag, done});
    return Status();
  }
  Status progress(bool* progressed) override {
    if (broken) return remoteError("rank " + std::to_string(peer_) + " hung up", peer_);
    for (Completion* done : sends_) done->complete();
    *progressed = *progressed || !sends_.empty();
    sends_.clear();
    std::lock_guard<std::mutex> lock(wire_->mutex);
    while (!recvs_.empty() && !wire_->toward[rank_].empty()) {
      Wire::Message message = std::move(wire_->toward[rank_].front());
      wire_->toward[rank_].pop_front();
      Recv recv = recvs_.front();
      recvs_.pop_front();
      *progressed = true;
      if (message.tag != recv.tag || message.bytes.size() != recv.bytes) {
        recv.done->mismatch(message.tag);
        recv.done->complete(mismatchError("tag or length differs", peer_));
        continue;
      }
      if (recv.bytes) std::memcpy(recv.data, message.bytes.data(), recv.bytes);
      recv.done->complete();
    }
    return Status();
  }
  int peer() const override { return peer_; }
  bool broken = false;

 private:
  struct Recv {
    uint8_t* data;
    size_t bytes;
    uint64_t tag;
    Completion* done;
  };
  std::shared_ptr<Wire> wire_;
  int rank_, peer_;
  std::vector<Completion*> sends_;
  std::deque<Recv> recvs_;
};

class PipeTransport : public Transport {
 public:
  explicit PipeTransport(int useful = 0) : useful_(useful) {}
  const char* name() const override { return "pipe"; }
  TransportCaps caps() const override {
    TransportCaps caps;
    caps.usefulChannels = useful_;
    return caps;
  }
  bool canConnect(int, const std::string&) const override { return true; }
  Result<std::vector<std::unique_ptr<Connection>>> connect(const std::vector<int>&) override {
    return unsupported("connected by the test");
  }
  void waitForActivity(std::chrono::microseconds) override { std::this_thread::sleep_for(20us); }

 private:
  int useful_;
};

EngineConfig configOf(int rank, std::chrono::microseconds timeout = 10s) {
  EngineConfig config;
  config.rank = rank;
  config.nranks = 2;
  config.timeout = timeout;
  return config;
}

// Rank `rank`'s side of the wire, one channel.
TransportSet pipeSet(const std::shared_ptr<Wire>& wire, int rank, PipeConnection** connection) {
  TransportSet set;
  set.transports.push_back(std::make_unique<PipeTransport>());
  set.transportOfPeer = {rank == 0 ? -1 : 0, rank == 1 ? -1 : 0};
  set.connections.resize(2);
  auto pipe = std::make_unique<PipeConnection>(wire, rank, 1 - rank);
  if (connection) *connection = pipe.get();
  set.connections[1 - rank].push_back(std::move(pipe));
  return set;
}

// `team`: a team step first trying those algorithms (`fallback`: then the ring).
Pending pendingOf(int rank, const CollectiveArgs& args, const void* input, void* output,
                  bool teamStep = false, TeamAlgorithms team = 0, bool fallback = true) {
  PlanParams params;
  params.rank = rank;
  params.nranks = 2;
  params.teamStep = teamStep;
  params.team = team;
  params.teamFallback = fallback;
  Result<Schedule> schedule = buildSchedule(args, params);
  EXPECT_TRUE(schedule.isOk()) << schedule.status().toString();
  const uint64_t tag = 1000 + static_cast<uint64_t>(args.dtype) * 10 +
                       (args.kind == CollectiveKind::kAllReduce ? 0 : 1);
  return makePending(std::make_shared<const Schedule>(std::move(schedule).value()), input, output,
                     tag, std::make_shared<WorkState>());
}

CollectiveArgs allReduceOf(size_t count, DataType dtype = DataType::kFloat32) {
  CollectiveArgs args;
  args.count = count;
  args.dtype = dtype;
  return args;
}

TEST(ExecutorTest, RunsAnAllReduceBetweenTwoRanks) {
  auto wire = std::make_shared<Wire>();
  std::atomic<bool> aborted{false};
  const size_t count = 10000;
  std::vector<std::vector<float>> out(2, std::vector<float>(count));
  Status statuses[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      FlightRecorder recorder(4);
      EngineConfig config = configOf(r);
      config.chunkBytes = 4096;  // several steps per channel
      Executor executor(config, pipeSet(wire, r, nullptr), aborted, &recorder);
      std::vector<float> in(count);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(i % 100) + r * 1000;
      Pending pending = pendingOf(r, allReduceOf(count), in.data(), out[r].data());
      statuses[r] = executor.execute(pending, nullptr);
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(statuses[r].isOk()) << statuses[r].toString();
    for (size_t i = 0; i < count; i += 997) {
      EXPECT_EQ(out[r][i], 2 * static_cast<float>(i % 100) + 1000)
          << "rank " << r << " [" << i << "]";
    }
  }
}

// Hands out queued point-to-point operations, as the engine's queue does.
class ListSource : public PointToPointSource {
 public:
  bool takePointToPoint(Pending* out) override {
    if (queued.empty() || !isPointToPoint(queued.front())) return false;
    *out = std::move(queued.front());
    queued.pop_front();
    return true;
  }
  std::deque<Pending> queued;
};

TEST(ExecutorTest, PointToPointBatchTakesInWhatIsQueuedBehindIt) {
  // Rank 1 sends, then receives; rank 0 posts its receive first and only then (queued
  // behind it) its send: without the adoption rank 0 would wait for a message rank 1
  // sends only after its receive completed... which needs rank 0's send.
  auto wire = std::make_shared<Wire>();
  std::atomic<bool> aborted{false};
  std::vector<uint32_t> toZero(64), fromOne(64, 0), toOne(64), fromZero(64, 0);
  for (uint32_t i = 0; i < 64; ++i) toZero[i] = i, toOne[i] = 1000 + i;
  auto p2p = [](CollectiveKind kind, int peer) {
    CollectiveArgs args;
    args.kind = kind;
    args.count = 64;
    args.dtype = DataType::kUint32;
    args.peer = peer;
    return args;
  };
  Status status0, status1;
  std::shared_ptr<WorkState> adoptedWork;
  std::vector<FlightEntry> entries;
  std::thread rank0([&] {
    FlightRecorder recorder(4);
    Executor executor(configOf(0), pipeSet(wire, 0, nullptr), aborted, &recorder);
    ListSource source;
    Pending send = pendingOf(0, p2p(CollectiveKind::kSend, 1), toOne.data(), nullptr);
    send.tag = 2;  // the tag rank 1's receive expects
    send.flightId = recorder.queued(send.schedule->args, send.tag, "p2p");
    adoptedWork = send.work;
    source.queued.push_back(std::move(send));
    Pending recv = pendingOf(0, p2p(CollectiveKind::kRecv, 1), nullptr, fromOne.data());
    recv.tag = 1;
    status0 = executor.execute(recv, &source);
    entries = recorder.snapshot();
  });
  std::thread rank1([&] {
    FlightRecorder recorder(4);
    Executor executor(configOf(1), pipeSet(wire, 1, nullptr), aborted, &recorder);
    Pending recv = pendingOf(1, p2p(CollectiveKind::kRecv, 0), nullptr, fromZero.data());
    recv.tag = 2;
    status1 = executor.execute(recv, nullptr);
    if (!status1.isOk()) return;
    Pending send = pendingOf(1, p2p(CollectiveKind::kSend, 0), toZero.data(), nullptr);
    send.tag = 1;
    status1 = executor.execute(send, nullptr);
  });
  rank0.join();
  rank1.join();
  ASSERT_TRUE(status0.isOk()) << status0.toString();
  ASSERT_TRUE(status1.isOk()) << status1.toString();
  EXPECT_EQ(fromOne, toZero);
  EXPECT_EQ(fromZero, toOne);
  ASSERT_TRUE(adoptedWork);
  EXPECT_TRUE(adoptedWork->test());  // completed by the executor
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].state, FlightState::kDone);
}

TEST(ExecutorTest, NoProgressUntilTheTimeoutNamesThePeer) {
  auto wire = std::make_shared<Wire>();  // rank 1 never comes
  std::atomic<bool> aborted{false};
  FlightRecorder recorder(4);
  Executor executor(configOf(0, 50ms), pipeSet(wire, 0, nullptr), aborted, &recorder);
  std::vector<float> in(16, 1), out(16);
  Pending pending = pendingOf(0, allReduceOf(16), in.data(), out.data());
  const auto start = Clock::now();
  Status status = executor.execute(pending, nullptr);
  EXPECT_GE(Clock::now() - start, 50ms);
  EXPECT_EQ(status.code(), StatusCode::kTimeout);
  EXPECT_EQ(status.peer(), 1);
  EXPECT_NE(status.message().find("on rank 0 made no progress for 50 ms"), std::string::npos)
      << status.toString();
  EXPECT_NE(status.message().find("waiting for rank 1"), std::string::npos) << status.toString();
  EXPECT_NE(status.message().find("COLLIE_TIMEOUT"), std::string::npos);
  executor.closeConnections();
}

TEST(ExecutorTest, AbortFlagStopsARunningCollective) {
  auto wire = std::make_shared<Wire>();
  std::atomic<bool> aborted{false};
  FlightRecorder recorder(4);
  Executor executor(configOf(0), pipeSet(wire, 0, nullptr), aborted, &recorder);
  std::vector<float> in(16, 1), out(16);
  Pending pending = pendingOf(0, allReduceOf(16), in.data(), out.data());
  std::thread aborter([&] {
    std::this_thread::sleep_for(20ms);
    aborted = true;
  });
  Status status = executor.execute(pending, nullptr);
  aborter.join();
  EXPECT_EQ(status.code(), StatusCode::kAborted);
  EXPECT_NE(status.message().find("aborted on rank 0"), std::string::npos) << status.toString();
}

TEST(ExecutorTest, BrokenConnectionFailsNamingTheCollective) {
  auto wire = std::make_shared<Wire>();
  std::atomic<bool> aborted{false};
  FlightRecorder recorder(4);
  PipeConnection* connection = nullptr;
  Executor executor(configOf(0), pipeSet(wire, 0, &connection), aborted, &recorder);
  connection->broken = true;
  std::vector<float> in(16, 1), out(16);
  Pending pending = pendingOf(0, allReduceOf(16), in.data(), out.data());
  Status status = executor.execute(pending, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kRemoteError);
  EXPECT_EQ(status.peer(), 1);
  EXPECT_NE(status.message().find("rank 1 hung up"), std::string::npos) << status.toString();
  EXPECT_NE(status.message().find("on rank 0"), std::string::npos) << status.toString();
}

TEST(ExecutorTest, DifferentCollectivesNameTheField) {
  auto wire = std::make_shared<Wire>();
  std::atomic<bool> aborted{false};
  Status statuses[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      FlightRecorder recorder(4);
      Executor executor(configOf(r, 2s), pipeSet(wire, r, nullptr), aborted, &recorder);
      // Same count, another dtype on rank 1: the fingerprints differ in dtype only.
      const DataType dtype = r == 0 ? DataType::kFloat32 : DataType::kInt32;
      CollectiveArgs args = allReduceOf(16, dtype);
      std::vector<uint8_t> in(64, 1), out(64);
      Pending pending = pendingOf(r, args, in.data(), out.data());
      pending.tag = makeFingerprint(5, args);
      statuses[r] = executor.execute(pending, nullptr);
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), StatusCode::kMismatch) << statuses[r].toString();
    EXPECT_EQ(statuses[r].peer(), 1 - r);
    EXPECT_NE(statuses[r].message().find("run different collectives: dtype differs"),
              std::string::npos)
        << statuses[r].toString();
  }
}

// A team whose run() does what the test says and records how it was called.
class ScriptedTeam : public TeamCollectives {
 public:
  TeamOffer offer() const override {
    TeamOffer offer;
    offer.algorithms = teamBit(Algorithm::kBoard) | teamBit(Algorithm::kCma);
    offer.boardBytes = 4096;
    return offer;
  }
  bool runsInline(const CollectiveArgs&, TeamAlgorithms, const void*, const void*) const override {
    return true;
  }
  Result<TeamOutcome> run(const CollectiveArgs&, TeamAlgorithms algorithms, bool fallback,
                          const FoldOrder&, uint64_t, const void*, void*,
                          std::chrono::microseconds timeout, const std::atomic<bool>&) override {
    ++calls;
    seenAlgorithms = algorithms;
    seenFallback = fallback;
    seenTimeout = timeout;
    if (!fail.isOk()) return fail;
    return outcome;
  }
  TeamOutcome outcome{Algorithm::kBoard};
  Status fail;
  int calls = 0;
  TeamAlgorithms seenAlgorithms = 0;
  bool seenFallback = false;
  std::chrono::microseconds seenTimeout{0};
};

// Rank `rank`'s side of the wire (the test gives the executor its scripted team).
TransportSet teamSet(const std::shared_ptr<Wire>& wire, int rank) {
  return pipeSet(wire, rank, nullptr);
}

TEST(ExecutorTest, TeamStepThatRunsEndsTheCollective) {
  auto wire = std::make_shared<Wire>();
  ScriptedTeam team;
  std::atomic<bool> aborted{false};
  FlightRecorder recorder(4);
  Executor executor(configOf(0, 123ms), teamSet(wire, 0), aborted, &recorder, &team);
  ASSERT_EQ(executor.team(), &team);
  EXPECT_EQ(executor.teamOffer().boardBytes, 4096u);
  std::vector<float> in(16, 1), out(16, -1);
  Pending pending =
      pendingOf(0, allReduceOf(16), in.data(), out.data(), true, teamBit(Algorithm::kBoard), false);
  EXPECT_EQ(pending.schedule->algorithm, Algorithm::kBoard);
  ASSERT_TRUE(executor.execute(pending, nullptr).isOk());
  EXPECT_EQ(team.calls, 1);
  EXPECT_EQ(team.seenAlgorithms, teamBit(Algorithm::kBoard));
  EXPECT_FALSE(team.seenFallback);  // a board alone: nothing to fall back to
  EXPECT_EQ(team.seenTimeout, std::chrono::microseconds(123000));
  EXPECT_EQ(out, std::vector<float>(16, -1));  // the scripted team wrote nothing...
  EXPECT_TRUE(wire->toward[1].empty());        // ...and no step sent anything
  team.fail = remoteError("board torn", 1);
  Status status = executor.execute(pending, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kRemoteError);
  EXPECT_NE(status.message().find("(team step board) on rank 0"), std::string::npos)
      << status.toString();
  executor.closeConnections();
  EXPECT_EQ(executor.team(), nullptr);  // gone with its transport
}

TEST(ExecutorTest, TeamStepDeclinedOnEveryRankRunsTheFallback) {
  auto wire = std::make_shared<Wire>();
  std::atomic<bool> aborted{false};
  ScriptedTeam teams[2];
  const size_t count = 1000;
  std::vector<std::vector<float>> out(2, std::vector<float>(count, -1));
  Status statuses[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    teams[r].outcome = TeamOutcome{};  // declined
    ranks.emplace_back([&, r] {
      FlightRecorder recorder(4);
      Executor executor(configOf(r), teamSet(wire, r), aborted, &recorder, &teams[r]);
      std::vector<float> in(count, 1.5f + r);
      Pending pending = pendingOf(r, allReduceOf(count), in.data(), out[r].data(), true,
                                  teamBit(Algorithm::kCma));
      EXPECT_EQ(pending.schedule->fallback, Algorithm::kRing);
      statuses[r] = executor.execute(pending, nullptr);
      EXPECT_TRUE(pending.teamDeclined);
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(statuses[r].isOk()) << statuses[r].toString();
    EXPECT_EQ(teams[r].calls, 1);
    EXPECT_TRUE(teams[r].seenFallback);
    EXPECT_EQ(out[r], std::vector<float>(count, 4.0f)) << "rank " << r;
  }
}

TEST(ExecutorTest, ReportsItsTransports) {
  std::atomic<bool> aborted{false};
  FlightRecorder recorder(0);
  EngineConfig config = configOf(1);
  config.nranks = 3;
  config.nchannels = 4;
  TransportSet set;
  ScriptedTeam team;
  set.transports.push_back(std::make_unique<PipeTransport>(0));
  set.transports.push_back(std::make_unique<PipeTransport>(2));
  set.transportOfPeer = {0, -1, 1};
  set.connections.resize(3);
  Executor executor(config, std::move(set), aborted, &recorder, &team);
  EXPECT_EQ(executor.usefulChannels(), 2);  // the least nonzero limit
  EXPECT_EQ(executor.transportTo(0), "pipe");
  EXPECT_EQ(executor.transportTo(1), "self");
  EXPECT_EQ(executor.transportTo(7), "none");
  EXPECT_EQ(executor.team(), nullptr);  // two transports: no team
  EXPECT_FALSE(executor.teamOffer().any());
}

}  // namespace
}  // namespace collie
