// Engine: the progress thread of one communicator.
//
// submit() plans a collective (schedules are cached by their arguments), gives it a
// fingerprint and queues it; the progress thread runs queued collectives one at a
// time, in submission order, spinning for COLLIE_BUSY_POLL and then blocking in the
// transports' waitForActivity(). A collective that sees no progress for the timeout
// fails with a Status naming the peers it waits for. The first failure is sticky: the
// connections may hold half a message, so every pending and later collective fails
// with the same error (prefixed by its own description).
//
// A failure is also spread: the failing rank leaves its reason on the FailureBoard
// and closes every connection, so that its peers fail at once (instead of at their
// timeout) and report the same root cause. A rank that only sends in a collective
// (a broadcast root) can finish it before a receiver rejects its data; it learns of
// the failure on its next collective with those peers.
//
// abort() fails the running and every queued collective with Aborted, closes the
// connections and returns once that is done (bounded: the progress thread checks for
// it on every turn). Destroying the engine does the same for collectives still
// pending, then joins the progress thread.
//
// Collectives that the transport can offload (CollectiveOffload) run inline on the
// submitting thread when nothing else is queued or running and the offload says so
// (runsInline), which saves two thread hand-offs; otherwise they queue like any other
// and run on the progress thread. When the offload declines one (every rank alike), it
// runs its schedule on the progress thread, ahead of what was queued meanwhile.
//
// submitGroup() queues several point-to-point operations as one unit: the progress
// thread posts every send and receive of the group before waiting for any, so a group
// whose sends and receives match the peers' is deadlock-free whatever the message
// sizes and whatever order each rank listed them in. Each operation keeps its own
// per-peer sequence number, so grouped and ungrouped operations match each other.
//
// Thread safety: submit(), submitGroup(), abort(), failure() and transportTo() may be
// called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include "collie/communicator.h"
#include "core/engine/execution.h"
#include "core/engine/failure_board.h"
#include "core/engine/flight_recorder.h"
#include "core/engine/schedule_cache.h"
#include "core/tune/tuner.h"

namespace collie {

struct EngineConfig {
  int rank = 0;
  int nranks = 1;
  int nchannels = 1;                       // connections per peer: the most a schedule may use
  bool channelsFixed = false;              // set by config: every schedule uses nchannels
  size_t chunkBytes = 512 * 1024;          // 0: the tuner picks per collective
  Algorithm algorithm = Algorithm::kAuto;  // kAuto: the tuner picks
  std::chrono::microseconds timeout{300'000'000};
  std::chrono::microseconds busyPoll{50};
  bool reduceOnReceive = true;  // COLLIE_RECV_REDUCE: use Connection::postRecvReduce()
  size_t traceDepth = 64;       // COLLIE_TRACE_DEPTH: collectives kept by the flight recorder
  std::string traceDump;        // COLLIE_TRACE_DUMP: "", "stderr" or a path (%r = rank)
  size_t scheduleCacheBytes = 4 << 20;  // schedules kept for reuse (core/engine/schedule_cache.h)
};

// The transports of a communicator and which one serves each peer.
struct TransportSet {
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<int> transportOfPeer;  // index into transports, -1 for this rank
  ConnectionTable connections;       // [peer][channel]
};

// The shared state of a Work. Once complete, wait(), test() and status() take no
// lock (status_ is immutable from then on). Host collectives are completed by the
// progress thread (complete()); device collectives have no thread of their own: they
// set a poller that wait() and test() call until it returns a status (the poller must
// be cheap, thread safe and bounded by its own deadline).
class WorkState {
 public:
  using Poller = std::function<std::optional<Status>()>;
  WorkState() = default;
  explicit WorkState(Poller poller) : poller_(std::move(poller)) {}
  void complete(Status status);
  Status wait(std::chrono::milliseconds timeout);
  bool test();
  Status status();
  // One process-wide state that is complete and OK: what a collective that finished
  // on the caller's thread returns, with no allocation and no reference counting.
  static std::shared_ptr<WorkState> succeeded();

 private:
  bool poll();  // true once done

  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;                  // guarded by mutex_ (the condition variable's)
  std::atomic<bool> finished_{false};  // set with release once status_ is final
  Status status_;
  const Poller poller_;
  std::mutex pollMutex_;  // one poller call at a time
};

class Engine {
 public:
  // `board` may be null (failures are then not explained across ranks).
  Engine(EngineConfig config, TransportSet transports, std::unique_ptr<FailureBoard> board);
  ~Engine();

  Result<Work> submit(const CollectiveArgs& args, const void* input, void* output);
  // One operation of submitGroup(): a kSend or kRecv (peer in args.root).
  struct GroupOp {
    CollectiveArgs args;
    const void* input = nullptr;
    void* output = nullptr;
  };
  // The Work completes when every operation did. An empty group completes at once.
  Result<Work> submitGroup(const std::vector<GroupOp>& ops);
  // The sticky failure (OK while healthy): the first collective error, or Aborted.
  Status failure();
  void abort();
  std::string transportTo(int peer) const;
  const EngineConfig& config() const { return config_; }
  // The tuner's constants (the same on every rank); set once at creation.
  void setTuneConstants(const TuneConstants& constants);
  TuneConstants tuneConstants();
  // How many channels this rank's transports say are worth using: the least nonzero
  // TransportCaps::usefulChannels of the transports serving its peers, capped at
  // config().nchannels (config().nchannels when none limits it).
  int usefulChannels() const { return usefulChannels_; }
  // The most channels a schedule may use (1..config().nchannels, the same on every
  // rank; ignored when config().channelsFixed); set once at creation.
  void setPlanChannels(int channels);
  // The flight recorder as JSON (see flight_recorder.h), with the sticky error if any.
  std::string dumpFlightRecorder();

 private:
  struct Pending {
    std::shared_ptr<const Schedule> schedule;
    const void* input = nullptr;
    void* output = nullptr;
    uint64_t tag = 0;
    std::shared_ptr<WorkState> work;
    bool offloaded = false;  // run by the transport's CollectiveOffload
    uint64_t flightId = 0;   // entry in the flight recorder
    // Further operations of a group (submitGroup), run alongside the first.
    struct Part {
      std::shared_ptr<const Schedule> schedule;
      const void* input;
      void* output;
      uint64_t tag;
    };
    std::vector<Part> group;
  };

  Result<std::shared_ptr<const Schedule>> plan(const CollectiveArgs& args);
  static Pending makePending(std::shared_ptr<const Schedule> schedule, const void* input,
                             void* output, uint64_t tag, std::shared_ptr<WorkState> work);
  // The fast path of submit(): runs an offloadable collective on the calling thread
  // when nothing is queued or running. Returns false (having done nothing) when it
  // cannot, and then submit() queues it.
  bool submitInline(const CollectiveArgs& args, const void* input, void* output,
                    Result<Work>* result);
  // The same for a small collective without an offload (or with a forced algorithm):
  // when nothing is queued or running, the caller runs its schedule itself, which saves
  // the two thread hand-offs that dominate small messages over the network.
  bool submitScheduleInline(const CollectiveArgs& args, const void* input, void* output,
                            Result<Work>* result);
  // Claims running_ for an inline run when nothing is queued, running or failing
  // (false: it cannot run inline now), and releases it.
  bool claimIdle();
  // claimIdle() for a collective the offload takes and runs inline.
  bool claimInline(const CollectiveArgs& args, const void* input, const void* output);
  void releaseInline();
  // The Work an inline run returns: the shared done state, or its failure.
  static Work inlineResult(Status status);
  // Requires mutex_ for point-to-point; collectives take theirs from an atomic counter
  // (under mutex_ or while running_ is claimed inline).
  uint64_t nextTag(const CollectiveArgs& args);
  void run();
  Status execute(Pending& pending);
  // A queued point-to-point operation that a running point-to-point batch took over
  // (execute()): its executions are executions[first, first + count).
  struct Adopted {
    Pending pending;
    size_t first = 0;
    size_t count = 0;
    bool done = false;
  };
  static bool isPointToPoint(const Pending& pending);
  // One execution for the operation and one for each further part of its group.
  void appendExecutions(const Pending& pending,
                        std::vector<std::unique_ptr<Execution>>* executions);
  // Moves the point-to-point operations at the front of the queue into the running
  // batch, so that a posted receive never holds back a send queued behind it.
  void adoptPointToPoint(std::vector<std::unique_ptr<Execution>>* executions,
                         std::vector<Adopted>* adopted);
  // offload_->run() with the engine's timeout and abort flag; errors name the collective.
  Result<OffloadOutcome> offload(const CollectiveArgs& args, uint64_t tag, const void* input,
                                 void* output);
  // Clears pending.offloaded when the offload declined it (then it needs execute()).
  Status runOffloaded(Pending& pending);
  void waitForActivity(const std::vector<Connection*>& active);
  // On the progress thread after the first failure: explains `status`, makes it the
  // sticky error, publishes it and closes every connection. Returns the error to give
  // the failed collective.
  Status giveUp(Status status, bool publish);
  void closeConnections();
  // Writes the flight recorder to config_.traceDump (nothing when it is empty).
  void writeFlightRecorder(const char* why);

  const EngineConfig config_;
  TransportSet transports_;                  // used by the progress thread only
  std::vector<std::string> transportNames_;  // per peer, for transportTo()
  int usefulChannels_;                       // see usefulChannels()
  std::unique_ptr<FailureBoard> board_;
  FlightRecorder recorder_;
  std::vector<ChannelMemory> channelMemory_;
  // Set when one transport serves every peer and can run small collectives itself.
  CollectiveOffload* offload_ = nullptr;

  std::mutex mutex_;  // guards the members below
  std::condition_variable queued_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  bool closed_ = false;  // connections closed after a failure or abort
  std::condition_variable closedCv_;
  Status failed_;
  std::vector<uint64_t> sendSequence_;  // per peer, point-to-point
  std::vector<uint64_t> recvSequence_;
  TuneConstants tune_;
  int planChannels_;  // see setPlanChannels()
  ScheduleCache cache_{config_.scheduleCacheBytes};

  std::atomic<bool> aborted_{false};
  // Lock-free state for the inline fast path (written under mutex_ except running_):
  // a collective is executing, claimed by compare-exchange (progress thread or inline);
  std::atomic<bool> running_{false};
  std::atomic<bool> failing_{false};    // failed_ is set
  std::atomic<size_t> queuedCount_{0};  // queue_.size()
  std::atomic<uint64_t> collectiveSequence_{0};
  // Executions that failed keep their completions alive until the connections that
  // may point at them are gone.
  std::vector<std::unique_ptr<Execution>> failedExecutions_;
  std::thread thread_;
};

}  // namespace collie
