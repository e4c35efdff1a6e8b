// Executor: runs queued operations on the connections of one communicator.
//
// execute() runs a Pending's schedule (and its group's) to the end: one Execution
// (core/engine/schedule_execution.h) per operation, each advanced on every turn, so that every
// send and receive of a group is in flight before any is waited for. A point-to-point
// batch also takes in the point-to-point operations queued behind it while it runs
// (torch's batch_isend_irecv posts every irecv before its isend, one call at a time)
// and completes each as it finishes. Between turns without progress it spins for
// EngineConfig::wait.busyPoll (yielding after wait.pureSpin; both adapted to ranks
// outnumbering cores, core/transport/wait_policy.h), then blocks in the transports'
// waitForActivity().
//
// Deadlines and their messages: an operation that sees no progress for
// EngineConfig::timeout fails with kTimeout naming the peers it waits for (and what
// for); one whose connection broke fails with the connection's error; the abort flag
// (checked on every turn) fails it with kAborted; a kMismatch names the fields the
// ranks disagree on when the transport kept the peer's tag. Every error names the
// collective and this rank. A failed batch keeps its executions (their completions may
// still be pointed at by the connections) until closeConnections().
//
// A schedule whose channel 0 starts with a team step (core/plan/team_step.h) goes to the
// team (core/team/team_collectives.h: a BoardCollectives over the transport's team board,
// when one transport serves every peer and has one) first, bounded by the same timeout and abort
// flag (runTeam()); only when every rank declined it do its fallback steps run. Where the step may
// try cma with a schedule behind it, SingleCopyChoice (core/engine/single_copy_choice.h) may
// withhold cma from it, and the whole collective is timed for that choice.
//
// A pre-multiplied sum (ReduceOp::kPreMulSum) first multiplies this rank's input by its
// factor (Pending::scalar) with the kernel backend's scale(), once, into the output
// (all-reduce; reduce on its root) or into scratch the executor keeps (reduce-scatter,
// reduce on other ranks), and then runs its schedule, which reduces like kSum, on that
// copy (docs/decisions/premul-sum.md).
//
// A point-to-point batch (run by the progress thread, or by a thread that waits for its
// operation: ProgressQueue::runIfNext) returns as soon as its own operation is done, so
// that its Work completes then: what it took in from the queue and is still in flight is
// parked, and the next holder of the running claim takes it over, the progress thread
// through resumeParked() or another point-to-point batch, which starts with it. Nothing
// else runs while a batch is parked (hasParked(): the queue lets no collective start),
// so the operations of the connections stay in their order. Held to the end of what it
// took in, an operation's Work could wait for a receive that the peer posts only after
// hearing from the operation's caller (tests/threads/p2p_waiter_test.cc).
//
// Tagged point-to-point: the executor keeps the TagMatcher (core/engine/tag_matcher.h)
// of its connections, which outlives the batches: a send that arrives before its receive
// was posted is held there until a later batch posts it.
//
// One outcome per collective: a collective run on the connections is reported a success
// only when no peer it received from already left a record that it failed it
// (Connection::abandoned; the failing rank's engine leaves them through abandon() before
// it closes). A team keeps the same rule itself (core/team/team_collectives.h).
//
// Thread safety: teamOffer(), usefulChannels() and transportTo() are fixed at
// construction and may be read from any thread; team() (null once closeConnections()
// ran) only by the thread holding the engine's running claim. Everything else runs on the
// one thread that holds the engine's running claim (the progress thread, or a caller
// running a collective inline).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/engine/engine_config.h"
#include "core/engine/flight_recorder.h"
#include "core/engine/pending.h"
#include "core/engine/schedule_execution.h"
#include "core/engine/single_copy_choice.h"
#include "core/engine/tag_matcher.h"
#include "core/team/team_collectives.h"
#include "core/transport/transport.h"

namespace collie {

// The transports of a communicator and which one serves each peer.
struct TransportSet {
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<int> transportOfPeer;  // index into transports, -1 for this rank
  ConnectionTable connections;       // [peer][channel]
};

class Executor {
 public:
  // `aborted` and `recorder` must outlive the executor. `scriptedTeam` (tests; must
  // outlive the executor) runs the team steps instead of the team built over the
  // transport's board.
  Executor(const EngineConfig& config, TransportSet transports, const std::atomic<bool>& aborted,
           FlightRecorder* recorder, TeamCollectives* scriptedTeam = nullptr);

  // The team (null unless one transport serves every peer and has one) and its offer
  // (empty without a team).
  TeamCollectives* team() const { return team_; }
  const TeamOffer& teamOffer() const { return teamOffer_; }
  // The least nonzero TransportCaps::usefulChannels of the transports, capped at
  // config.nchannels (config.nchannels when none limits it).
  int usefulChannels() const { return usefulChannels_; }
  // The name of the transport that serves `peer` ("self", "none").
  std::string transportTo(int peer) const;

  // Runs `pending` as described above (its team step first, unless
  // pending.teamDeclined; where the step may try cma, SingleCopyChoice says whether, and
  // the whole collective is timed for it); OK once every operation finished. `adopt`
  // (may be null) is where a point-to-point batch takes further operations from; those it
  // took are completed here (recorded finished, their Work completed).
  Status execute(Pending& pending, PointToPointSource* adopt);
  // Whether a point-to-point batch left operations in flight (above), and runs them to
  // their end (adopting from `adopt` meanwhile), completing each; on failure
  // `*failedTag` is the operation that failed.
  bool hasParked() const { return parked_.has_value(); }
  Status resumeParked(PointToPointSource* adopt, uint64_t* failedTag);
  // The team's run() of a team step (its set, and whether a fallback follows), with the
  // engine's timeout and abort flag; errors name the collective, the team step and this
  // rank. Inlined: it is on the board's fast path.
  // `fold`: the schedule's (Schedule::fold).
  [[gnu::always_inline]] Result<TeamOutcome> runTeam(const CollectiveArgs& args,
                                                     const FoldOrder& fold,
                                                     TeamAlgorithms algorithms, bool fallback,
                                                     uint64_t tag, const void* input,
                                                     void* output) {
    if (team_ == nullptr) return teamFailed(Status(), tag, algorithms);
    Result<TeamOutcome> outcome =
        team_->run(args, algorithms, fallback, fold, tag, input, output, config_.timeout, aborted_);
    if (!outcome.isOk()) return teamFailed(outcome.status(), tag, algorithms);
    return outcome;
  }

  // Leaves every peer a record that this rank failed collective `tag` with `why`
  // (Connection::abandon); called before closeConnections() after a failure.
  void abandon(uint64_t tag, const Status& why);
  // Destroys the connections and transports (which tells the peers), then the failed
  // executions. The team is gone with them.
  void closeConnections();

 private:
  struct Adopted {
    Pending pending;
    size_t first = 0;  // its executions are executions[first, first + count)
    size_t count = 0;
    bool done = false;
  };
  // The operations a point-to-point batch runs together, and its clocks.
  struct Batch {
    std::vector<std::unique_ptr<Execution>> executions;
    std::vector<Adopted> adopted;  // taken in from the queue or a parked batch
    // Since when the batch has made no progress: stamped at its first idle turn after
    // progress (not per turn: a turn that moves data reads no clock), unset until then.
    Clock::time_point idleSince;
    bool idleStamped = false;
    // Idle turns since the clock was last read, while purely spinning (drive() reads it
    // every kSpinTurnsPerClockRead turns then).
    uint32_t unclockedSpins = 0;
    bool spinning = false;
    uint64_t failedTag = 0;  // set when the batch fails: what it names
  };
  // One execution for the operation and one for each further part of its group, finished
  // ones reused where there are (spareExecutions_).
  void appendExecutions(const Pending& pending,
                        std::vector<std::unique_ptr<Execution>>* executions);
  std::unique_ptr<Execution> makeExecution(const Pending& pending, const Pending::Part* part);
  // After drive(): keeps the batch's finished executions and its vector for the next
  // batch (what failed or was parked is no longer in it).
  void recycle(Batch& batch);
  void waitForActivity(const std::vector<Connection*>& active);
  // kPreMulSum: pending.input scaled by pending.scalar into the output or scratch;
  // pending.input then points at the scaled copy.
  Status preMultiply(Pending& pending);
  // Before the schedule's steps of an all-to-all in place (pending.input ==
  // pending.output): its input copied to scratch, pending.input then pointing at the copy,
  // so that no block a peer still reads is overwritten by the block received in its
  // place. Nothing for other collectives. (The team step takes it in place itself:
  // TeamCollectives::run.)
  Status stageInPlaceInput(Pending& pending);
  // scratch_ of at least `bytes` (grown, never shrunk), or the error naming `pending`.
  Result<uint8_t*> scratch(const Pending& pending, size_t bytes, const char* what);
  // execute() after the team step: the schedule's steps.
  Status executeSteps(Pending& pending, PointToPointSource* adopt);
  // Runs `batch` (its first `own` executions are `lead`'s; a resumed batch has no lead)
  // until every execution finished, or, untilOwnDone, until the lead's did (then parks
  // the rest).
  Status drive(Batch& batch, Pending* lead, size_t own, PointToPointSource* adopt,
               bool untilOwnDone);
  // Keeps the operations of `batch` still in flight as parked_.
  void park(Batch& batch);
  // SingleCopyChoice::end() with the time since `start` (nothing for an untimed trial),
  // logged (INFO, TUNE) where it made or changed a choice.
  void recordTrial(const SingleCopyChoice::Trial& trial, Algorithm ran, Clock::time_point start);
  // A team step's failure (`status`; OK: there is no team) with the collective, the
  // step and this rank.
  Status teamFailed(const Status& status, uint64_t tag, TeamAlgorithms algorithms) const;
  Status timedOut(const Pending& pending,
                  const std::vector<std::unique_ptr<Execution>>& executions) const;
  Status explainMismatch(Status status,
                         const std::vector<std::unique_ptr<Execution>>& executions) const;

  const EngineConfig config_;
  // Before transports_: its receives point into the matcher, so the connections go first.
  TagMatcher matcher_;
  TransportSet transports_;
  std::vector<std::string> transportNames_;  // per peer
  int usefulChannels_;
  // The team over the transport's board; after transports_, so that it goes first.
  std::unique_ptr<TeamCollectives> boardTeam_;
  TeamCollectives* team_ = nullptr;  // boardTeam_ or the scripted team
  TeamOffer teamOffer_;
  // Whether a large all-reduce's team step may try cma, timed against its schedule
  // (COLLIE_TUNE_ADAPT_MAX).
  SingleCopyChoice singleCopy_{0, 0};
  const std::atomic<bool>& aborted_;
  FlightRecorder* const recorder_;
  std::vector<ChannelMemory> channelMemory_;
  // preMultiply()'s copy where the output cannot hold it, or stageInPlaceInput()'s (one
  // collective uses it at a time); grows, never shrinks.
  std::unique_ptr<uint8_t[]> scratch_;
  size_t scratchBytes_ = 0;
  // Executions that failed keep their completions alive until the connections that
  // may point at them are gone.
  std::vector<std::unique_ptr<Execution>> failedExecutions_;
  std::optional<Batch> parked_;  // see above
  // Finished executions and a batch's emptied vector, kept so that a small send or
  // receive makes no allocation here (the malloc/free pairs were about a fifth of an
  // 8 B ping-pong's one-way time); at most kSpareExecutions are kept.
  static constexpr size_t kSpareExecutions = 8;
  // drive() reads the clock every this many idle turns while purely spinning (Batch).
  static constexpr uint32_t kSpinTurnsPerClockRead = 4;
  std::vector<std::unique_ptr<Execution>> spareExecutions_;
  std::vector<std::unique_ptr<Execution>> spareBatch_;
  std::vector<Connection*> active_;  // drive()'s, reused
};

}  // namespace collie
