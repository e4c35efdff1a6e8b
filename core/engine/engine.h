// Engine: one communicator's collectives, from submission to completion.
//
// submit() plans a collective (schedules are cached by their arguments), gives it a
// fingerprint and queues it; the progress thread runs queued collectives one at a
// time, in submission order, spinning for COLLIE_BUSY_POLL and then blocking in the
// transports' waitForActivity(). A collective that sees no progress for the timeout
// fails with a Status naming the peers it waits for. The first failure is sticky: the
// connections may hold half a message, so every pending and later collective fails
// with the same error (prefixed by its own description).
//
// A failure is also spread: the failing rank leaves its reason on the FailureReasons,
// leaves each peer a record that it failed the collective (Executor::abandon) and
// closes every connection, so that its peers fail at once (instead of at their
// timeout) and report the same root cause, and a late peer that already holds all
// its data does not report the failed collective a success (executor.h, "One
// outcome"). A rank that only sends in a collective (a broadcast root) can finish it
// before a receiver rejects its data; it learns of the failure on its next
// collective with those peers.
//
// abort() fails the running and every queued collective with Aborted, closes the
// connections and returns once that is done (bounded: the progress thread checks for
// it on every turn). Destroying the engine does the same for collectives still
// pending, then joins the progress thread.
//
// Inline runs: when nothing is queued or running, a collective whose plan allows it
// runs on the submitting thread, which saves the two thread hand-offs that dominate
// small messages. The plan decides: a team step (core/plan/team_step.h) runs inline when
// the team says so (TeamCollectives::runsInline: on shm the board's collectives and
// direct on registered buffers, up to 256 KiB per rank), a schedule without one up to
// kScheduleInlineMaxBytes per rank; point-to-point never. When a team declines a
// collective run inline (every rank alike), its fallback steps run inline too when
// small, else on the progress thread, ahead of what was queued meanwhile. The schedule
// planned last for an inline collective is kept, so that a loop of equal small
// collectives plans (and locks, allocates) nothing. Collectives with counts per rank or
// peer (alltoallv, the v kinds) are planned for each call and run inline by the same
// rule (their size: the larger of what a rank sends and receives).
//
// Runs at submit: a larger collective is queued, so that the caller's work overlaps it,
// unless its callers have been seen to wait for their collectives at once
// (core/engine/wait_pattern.h); then, when nothing is queued or running, it runs on the
// submitting thread as the progress thread would run it, and submit() returns it done.
//
// Point-to-point is queued, never run at submit (a send that blocked its caller until
// the peer receives could deadlock a program that posts the matching receive later on
// the same thread), but a thread that waits for its operation runs it when it is next in
// line, as for collectives, and returns once its own is done (ProgressQueue::runIfNext).
// Once a communicator's point-to-point operations are seen to be waited for at once
// (their own WaitPattern), they are queued without waking the progress thread (quiet
// pushes, progress_queue.h): a blocking ping-pong then makes no thread hand-off at all.
//
// submitGroup() queues several point-to-point operations as one unit: the progress
// thread posts every send and receive of the group before waiting for any, so a group
// whose sends and receives match the peers' is deadlock-free whatever the message
// sizes and whatever order each rank listed them in. Each operation keeps its own
// per-peer sequence number, so grouped and ungrouped operations match each other.
//
// Tagged point-to-point (a send or receive given a user tag): matched by peer and tag
// (the n-th send to a peer with tag t meets that peer's n-th receive from this rank with
// tag t) instead of by order, through envelopes and the executor's TagMatcher
// (core/engine/tag_matcher.h). Untagged operations keep their path unchanged. One pair of
// ranks uses one or the other: a rank refuses (InvalidArgument, checkTagUse()) a tagged
// operation with a peer it exchanged untagged ones with through the API, and the reverse;
// a peer that mixes them anyway fails with Mismatch at the first message of the other
// kind.
//
// The engine is the path of a collective through its pieces: the Planner
// (core/engine/planner.h: schedules, their cache, the tuned constants), the
// ProgressQueue (progress_queue.h: tags, submission order, the inline claim, the
// progress thread), the Executor (executor.h: running schedules and their team steps
// on the connections and the team, deadlines and their messages), the FailurePolicy
// (failure_policy.h: the sticky failure, the failure reasons, closing) and the FlightRecorder
// (flight_recorder.h). A Work's state is core/engine/work_state.h.
//
// Thread safety: submit(), submitGroup(), abort(), failure() and transportTo() may be
// called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collie/communicator.h"
#include "core/engine/engine_config.h"
#include "core/engine/executor.h"
#include "core/engine/failure_policy.h"
#include "core/engine/flight_recorder.h"
#include "core/engine/planner.h"
#include "core/engine/progress_queue.h"
#include "core/engine/work_state.h"
#include "core/tune/tuner.h"

namespace collie {

class QueueWaitRunner;

class Engine : private ProgressQueue::Runner {
 public:
  // `reasons` may be null (failures are then not explained across ranks).
  Engine(EngineConfig config, TransportSet transports, std::unique_ptr<FailureReasons> reasons);
  ~Engine() override;

  // `p2pTag`: a send's or receive's user tag (tagged point-to-point, above); none for
  // every other kind.
  Result<Work> submit(const CollectiveArgs& args, const void* input, void* output,
                      std::optional<int64_t> p2pTag = std::nullopt);
  // How many collectives ran at submit in this process (tests, benchmarks).
  static uint64_t runAtSubmitCount();
  // One operation of submitGroup(): a kSend or kRecv (to or from args.peer).
  struct GroupOp {
    CollectiveArgs args;
    const void* input = nullptr;
    void* output = nullptr;
    std::optional<int64_t> tag;  // tagged point-to-point (above)
  };
  // The Work completes when every operation did. An empty group completes at once.
  Result<Work> submitGroup(const std::vector<GroupOp>& ops);
  // For the API's send, recv and sendRecv (not the engine's own messages, such as the
  // tuner's probe): InvalidArgument when this rank already used the other kind of
  // point-to-point (tagged or untagged, `tag`) with args.peer; records the kind on first
  // use. See "Tagged point-to-point" above.
  Status checkTagUse(const CollectiveArgs& args, const std::optional<int64_t>& tag);
  // The sticky failure (OK while healthy): the first collective error, or Aborted.
  Status failure() { return failures_.failure(); }
  void abort();
  std::string transportTo(int peer) const { return executor_.transportTo(peer); }
  const EngineConfig& config() const { return config_; }
  // The tuner's constants (the same on every rank); set once at creation.
  void setTuneConstants(const TuneConstants& constants) { planner_.setTuneConstants(constants); }
  TuneConstants tuneConstants() { return planner_.tuneConstants(); }
  // How many channels this rank's transports say are worth using: the least nonzero
  // TransportCaps::usefulChannels of the transports serving its peers, capped at
  // config().nchannels (config().nchannels when none limits it).
  int usefulChannels() const { return executor_.usefulChannels(); }
  // The most channels a schedule may use (1..config().nchannels, the same on every
  // rank; ignored when config().channelsFixed); set once at creation.
  void setPlanChannels(int channels) { planner_.setPlanChannels(channels); }
  // The tuner's predicted time of `args` in microseconds (Planner::predictMicros).
  double predictMicros(const CollectiveArgs& args) { return planner_.predictMicros(args); }
  // The flight recorder as JSON (see flight_recorder.h), with the sticky error if any.
  std::string dumpFlightRecorder();

 private:
  // ProgressQueue::Runner, on the progress thread (run() also on a waiter).
  Status run(Pending& pending) override;
  bool hasParked() const override { return executor_.hasParked(); }
  void resumeParked() override;
  void closeIdle(const Status& reason, bool publish) override;
  // A WorkState for a queued operation, with the wait runner and its Submission in its
  // pattern (the collectives' or the point-to-point one) as queued at `nowNs`
  // (ThreadMark::steadyNowNs()); `*quiet`: a point-to-point operation whose submitters
  // wait at once, to be queued without a wake-up.
  std::shared_ptr<WorkState> queuedWork(bool pointToPoint, int64_t nowNs, bool* quiet);
  // What markSubmitted() records for an operation queued at `nowNs`.
  static ThreadMark submittedMark(bool pointToPoint, int64_t nowNs);

  // The fast path of submit(): runs the collective on the calling thread when nothing
  // is queued or running and its plan allows (see above; `anySize`: at any size, for a
  // collective run at submit). Returns false (having done nothing) when it cannot, and
  // then submit() queues it.
  bool submitInline(const CollectiveArgs& args, const void* input, void* output, bool anySize,
                    Result<Work>* result);
  // submitInline() for a collective planned per call (a layout or block counts): planned
  // and run here when small (or `anySize`); false, having done nothing, otherwise.
  bool submitPlannedInline(const CollectiveArgs& args, const void* input, void* output,
                           bool anySize, Result<Work>* result);
  // With the running claim held: whether the schedule kept from the last inline
  // collective is the one of `args` (same arguments, nothing replanned since).
  bool keptPlanFits(const CollectiveArgs& args) const {
    return inlineSchedule_ != nullptr && inlineGeneration_ == planner_.generation() &&
           args.kind == inlineArgs_.kind && args.count == inlineArgs_.count &&
           args.dtype == inlineArgs_.dtype && args.op == inlineArgs_.op &&
           args.root == inlineArgs_.root;
  }
  // With the running claim held: plans `args` and keeps its schedule (and what the
  // inline path needs of it); the planner's error otherwise.
  Status keepPlan(const CollectiveArgs& args);
  // With the running claim held: runs `pending`'s steps to the end on this thread.
  Status executeInline(Pending& pending);
  // With the running claim held: runs `schedule` (planned for `args`) on this thread,
  // tagged as an inline collective; the Work it returns is done.
  Work runInline(const std::shared_ptr<const Schedule>& schedule, const CollectiveArgs& args,
                 const void* input, void* output);
  // The Work an inline run returns: the shared done state, or its failure.
  static Work inlineResult(Status status);
  // Records the end of run collective `tag`; a failure is given up on (and returned
  // explained).
  Status finish(uint64_t flightId, uint64_t tag, Status status);
  // After the first failure, on the thread holding the running claim: see
  // FailurePolicy::giveUp(). `failedTag` (when set) is the collective that failed: the
  // peers get a record of it before the connections close (Executor::abandon). Returns
  // the error to give the failed collective.
  Status giveUp(Status status, bool publish, std::optional<uint64_t> failedTag);
  void closeConnections();
  // Writes the flight recorder to config_.traceDump (nothing when it is empty).
  void writeFlightRecorder(const char* why);

  const EngineConfig config_;
  FailurePolicy failures_;
  FlightRecorder recorder_;
  Executor executor_;
  Planner planner_;
  // The last inline collective's arguments and schedule (see planInline()); used only
  // with the running claim held.
  CollectiveArgs inlineArgs_;
  std::shared_ptr<const Schedule> inlineSchedule_;
  uint64_t inlineGeneration_ = 0;
  bool inlineTeamStep_ = false;  // of inlineSchedule_: its team step, its set,
  TeamAlgorithms inlineTeam_ = 0;
  bool inlineFallback_ = false;  // whether steps follow it
  // Per peer: 0 before any point-to-point, then kUntagged or kTagged (checkTagUse()).
  static constexpr uint8_t kUntaggedUse = 1;
  static constexpr uint8_t kTaggedUse = 2;
  std::unique_ptr<std::atomic<uint8_t>[]> tagUse_;
  ProgressQueue queue_;  // its thread stops first
  // What queued Works run their collective through when their caller waits for them
  // (WorkState's WaitRunner); detached from queue_ once it stopped.
  std::shared_ptr<QueueWaitRunner> waitRunner_;
};

}  // namespace collie
