#include "core/engine/engine.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "core/engine/cycle_clock.h"
#include "core/engine/queue_wait_runner.h"
#include "core/log/log.h"
#include "core/plan/fingerprint.h"

namespace collie {

namespace {
// abort() waits this long at most for the progress thread to close the connections
// (it normally takes a few milliseconds plus FailurePolicy::kPublishWait at worst).
constexpr auto kCloseWait = std::chrono::seconds(2);
// Schedules of collectives up to this many bytes per rank run on the submitting thread
// when the engine is idle: at that size the two thread hand-offs cost more than the
// wire, and blocking the caller for that long loses no useful overlap.
constexpr size_t kScheduleInlineMaxBytes = 64 * 1024;

std::atomic<uint64_t> gRunAtSubmit{0};

// The most elements one rank sends or receives in `args`: an alltoallv's larger side, the
// count otherwise (the v kinds' count is the sum of their blocks).
size_t elementsPerRank(const CollectiveArgs& args) {
  if (args.layout == nullptr) return args.count;
  size_t sent = 0, received = 0;
  for (size_t c : args.layout->sendCounts) sent += c;
  for (size_t c : args.layout->recvCounts) received += c;
  return std::max(sent, received);
}

// A quiet push's time (ProgressQueue::push) from the submitter's clock read, or none.
std::optional<std::chrono::steady_clock::time_point> quietAt(bool quiet, int64_t nowNs) {
  if (!quiet) return std::nullopt;
  return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(nowNs));
}

}  // namespace

uint64_t Engine::runAtSubmitCount() { return gRunAtSubmit.load(std::memory_order_relaxed); }

Engine::Engine(EngineConfig config, TransportSet transports,
               std::unique_ptr<FailureReasons> reasons)
    : config_(std::move(config)),
      failures_(config_.rank, std::move(reasons)),
      recorder_(config_.traceDepth),
      executor_(config_, std::move(transports), failures_.abortFlag(), &recorder_),
      planner_(config_, executor_.teamOffer()),
      tagUse_(new std::atomic<uint8_t>[static_cast<size_t>(config_.nranks)]()),
      queue_(config_.nranks, &failures_, &recorder_),
      waitRunner_(std::make_shared<QueueWaitRunner>(&queue_, !config_.wait.oversubscribed)) {
  queue_.start(this);
}

Engine::~Engine() {
  queue_.stop(
      abortedError("communicator of rank " + std::to_string(config_.rank) + " was destroyed"));
  waitRunner_->detach();
  closeConnections();
  writeFlightRecorder("communicator destroyed");
}

std::string Engine::dumpFlightRecorder() {
  const Status failed = failures_.failure();
  return recorder_.toJson(config_.rank, config_.nranks, failed.isOk() ? "" : failed.toString());
}

void Engine::writeFlightRecorder(const char* why) {
  if (config_.traceDump.empty() || config_.traceDepth == 0) return;
  const Status failed = failures_.failure();
  recorder_.dump(config_.traceDump, config_.rank, config_.nranks,
                 failed.isOk() ? "" : failed.toString(), why);
}

void Engine::abort() {
  queue_.abort(abortedError("communicator of rank " + std::to_string(config_.rank) +
                            " was aborted (abort() called)"));
  if (!failures_.waitClosed(kCloseWait)) {
    COLLIE_LOG(WARN, ENGINE) << "abort() on rank " << config_.rank
                             << ": the progress thread did not close the connections within "
                             << kCloseWait.count() << " s; returning anyway";
  }
}

void Engine::closeConnections() {
  // Only ever with the running claim held (or the progress thread joined), so no
  // submitter is asking the team anything meanwhile.
  executor_.closeConnections();
}

Status Engine::giveUp(Status status, bool publish, std::optional<uint64_t> failedTag) {
  return failures_.giveUp(std::move(status), publish, [&](const Status& sticky) {
    if (failedTag) executor_.abandon(*failedTag, sticky);
    closeConnections();
    if (publish) writeFlightRecorder(sticky.toString().c_str());
  });
}

Status Engine::finish(uint64_t flightId, uint64_t tag, Status status) {
  recorder_.finished(flightId, status.isOk());
  if (!status.isOk()) {
    COLLIE_LOG(WARN, COLL) << status.toString();
    status = giveUp(std::move(status), true, tag);
  }
  return status;
}

Status Engine::run(Pending& pending) {
  recorder_.running(pending.flightId);
  return finish(pending.flightId, pending.tag, executor_.execute(pending, &queue_));
}

void Engine::resumeParked() {
  uint64_t failedTag = 0;
  Status status = executor_.resumeParked(&queue_, &failedTag);
  if (status.isOk()) return;
  COLLIE_LOG(WARN, COLL) << status.toString();
  giveUp(std::move(status), true, failedTag);
}

ThreadMark Engine::submittedMark(bool pointToPoint, int64_t nowNs) {
  ThreadMark mark;
  mark.steadyNs = nowNs;
  if (pointToPoint) {
    // The clock alone: the usage's system calls would be a fifth of a small message's
    // one-way time, and a point-to-point wait counts only within kPromptWait.
    mark.cpuNs = -1;
  } else {
    mark.readUsage();
  }
  return mark;
}

std::shared_ptr<WorkState> Engine::queuedWork(bool pointToPoint, int64_t nowNs, bool* quiet) {
  WaitPattern& pattern = pointToPoint ? waitRunner_->p2pPattern() : waitRunner_->pattern();
  // Asked before queued() counts this one (waitsAtOnce looks at the last one queued).
  *quiet = pointToPoint && waitRunner_->waitersRun() && pattern.waitsAtOnce();
  return std::make_shared<WorkState>(
      waitRunner_, std::chrono::duration_cast<std::chrono::milliseconds>(config_.timeout),
      Submission{std::this_thread::get_id(), pattern.queued(nowNs), ThreadMark{}, pointToPoint});
}

void Engine::closeIdle(const Status& reason, bool publish) {
  giveUp(reason, publish, std::nullopt);
}

Status Engine::checkTagUse(const CollectiveArgs& args, const std::optional<int64_t>& tag) {
  const uint8_t want = tag ? kTaggedUse : kUntaggedUse;
  std::atomic<uint8_t>& use = tagUse_[static_cast<size_t>(args.peer)];
  uint8_t seen = use.load(std::memory_order_relaxed);
  if (seen == want) return Status();
  if (seen == 0 && use.compare_exchange_strong(seen, want)) return Status();
  if (seen == want) return Status();
  const bool send = args.kind == CollectiveKind::kSend;
  return invalidArgument(
      std::string(send ? "send" : "recv") + (tag ? " with tag " + std::to_string(*tag) : "") +
      (send ? " to" : " from") + " peer " + std::to_string(args.peer) + " on rank " +
      std::to_string(config_.rank) + ": this rank already exchanged " +
      (tag ? "untagged" : "tagged") + " point-to-point messages with peer " +
      std::to_string(args.peer) +
      "; tagged and untagged point-to-point cannot be mixed between two ranks (tag every send "
      "and receive of the pair, or none)");
}

Result<Work> Engine::submitGroup(const std::vector<GroupOp>& ops) {
  std::vector<Pending::Part> parts;
  parts.reserve(ops.size());
  for (const GroupOp& op : ops) {
    if (op.args.kind != CollectiveKind::kSend && op.args.kind != CollectiveKind::kRecv) {
      return invalidArgument("a group may hold only send and recv operations, got " +
                             std::string(collectiveName(op.args.kind)));
    }
    Result<std::shared_ptr<const Schedule>> schedule = planner_.plan(op.args);
    if (!schedule.isOk()) return schedule.status();
    PointToPointTag p2p;
    p2p.tagged = op.tag.has_value();
    p2p.value = op.tag.value_or(0);
    parts.push_back(Pending::Part{*schedule, op.input, op.output, 0, p2p});
  }
  if (parts.empty()) return Work(WorkState::succeeded());
  // One clock read for the pattern, a quiet push and the submitter's mark.
  const int64_t nowNs = ThreadMark::steadyNowNs();
  bool quiet = false;
  auto work = queuedWork(/*pointToPoint=*/true, nowNs, &quiet);
  Pending pending =
      makePending(parts.front().schedule, parts.front().input, parts.front().output, 0, work);
  pending.p2p = parts.front().p2p;
  pending.group.assign(parts.begin() + 1, parts.end());
  queue_.push(std::move(pending), "group", quietAt(quiet, nowNs));
  work->markSubmitted(submittedMark(/*pointToPoint=*/true, nowNs));
  return Work(work);
}

Result<Work> Engine::submit(const CollectiveArgs& args, const void* input, void* output,
                            std::optional<int64_t> p2pTag) {
  Result<Work> result = Work();
  if (submitInline(args, input, output, /*anySize=*/false, &result)) return result;
  // A caller that waits as long as the collective may take runs it itself (WaitRunner),
  // and once its callers are seen to wait at once, the engine runs it here (WaitPattern);
  // point-to-point is only queued (quietly, once its callers are seen to wait at once),
  // never run here: a send may have to wait for its receive (see engine.h). Where
  // a host's ranks outnumber its CPUs a waiter does not run its queued collective (a
  // rank's threads share one CPU there, and the progress thread, woken for the
  // collective, takes turns with the waiter running it: 4 ranks on 2 cores, 512 KiB-2
  // MiB, 1.01-1.10x the time with the hand-off), but collectives still run at submit,
  // which wakes nobody (4 ranks, registered 512 KiB-2 MiB: queued took 1.17-1.49x).
  const bool pointToPoint = isPointToPoint(args.kind);
  if (!pointToPoint && waitRunner_->pattern().runAtSubmit() &&
      submitInline(args, input, output, /*anySize=*/true, &result)) {
    gRunAtSubmit.fetch_add(1, std::memory_order_relaxed);
    return result;
  }
  Result<std::shared_ptr<const Schedule>> schedule = planner_.plan(args);
  if (!schedule.isOk()) return schedule.status();
  // One clock read for the pattern, a quiet push and the submitter's mark.
  const int64_t nowNs = ThreadMark::steadyNowNs();
  bool quiet = false;
  auto work = queuedWork(pointToPoint, nowNs, &quiet);
  Pending pending = makePending(*schedule, input, output, 0, work);
  pending.scalar = args.scalar;
  pending.p2p.tagged = p2pTag.has_value();
  pending.p2p.value = p2pTag.value_or(0);
  queue_.push(std::move(pending), algorithmName((*schedule)->algorithm).data(),
              quietAt(quiet, nowNs));
  // A collective's submitter's usage is read once the collective is on its way (about
  // 1 us of system calls, WaitPattern).
  work->markSubmitted(submittedMark(pointToPoint, nowNs));
  return Work(work);
}

Work Engine::inlineResult(Status status) {
  if (status.isOk()) return Work(WorkState::succeeded());
  auto work = std::make_shared<WorkState>();
  work->complete(std::move(status));
  return Work(std::move(work));
}

Status Engine::keepPlan(const CollectiveArgs& args) {
  const uint64_t generation = planner_.generation();
  Result<std::shared_ptr<const Schedule>> schedule = planner_.plan(args);
  if (!schedule.isOk()) return schedule.status();
  inlineArgs_ = args;
  inlineSchedule_ = std::move(schedule).value();
  inlineGeneration_ = generation;
  inlineTeam_ = 0;
  inlineTeamStep_ = hasTeamStep(*inlineSchedule_, &inlineTeam_);
  inlineFallback_ = inlineSchedule_->fallback != Algorithm::kAuto || inlineTeam_ == 0;
  return Status();
}

Status Engine::executeInline(Pending& pending) {
  pending.flightId = recorder_.queued(
      pending.schedule->args, pending.tag,
      algorithmName(pending.teamDeclined ? pending.schedule->fallback : pending.schedule->algorithm)
          .data());
  recorder_.running(pending.flightId);
  return finish(pending.flightId, pending.tag, executor_.execute(pending, nullptr));
}

Work Engine::runInline(const std::shared_ptr<const Schedule>& schedule, const CollectiveArgs& args,
                       const void* input, void* output) {
  Pending pending = makePending(schedule, input, output, queue_.tagInline(args), nullptr);
  pending.scalar = args.scalar;
  return inlineResult(executeInline(pending));
}

bool Engine::submitPlannedInline(const CollectiveArgs& args, const void* input, void* output,
                                 bool anySize, Result<Work>* result) {
  if (!anySize && elementsPerRank(args) * dataTypeSize(args.dtype) > kScheduleInlineMaxBytes) {
    return false;
  }
  InlineClaim claim(&queue_);
  if (!claim) return false;
  Result<std::shared_ptr<const Schedule>> schedule = planner_.plan(args);
  if (!schedule.isOk()) {
    *result = schedule.status();
    return true;
  }
  *result = runInline(*schedule, args, input, output);
  return true;
}

bool Engine::submitInline(const CollectiveArgs& args, const void* input, void* output, bool anySize,
                          Result<Work>* result) {
  // Point-to-point never: a send blocking its caller until the peer receives could
  // deadlock a program that posts the matching receive later on the same thread.
  if (args.kind == CollectiveKind::kSend || args.kind == CollectiveKind::kRecv) return false;
  // A layout (alltoallv) or block counts (the v kinds) are planned for their call: nothing
  // to keep for the next one.
  if (args.layout != nullptr || args.blocks != nullptr) {
    return submitPlannedInline(args, input, output, anySize, result);
  }
  const bool team = executor_.teamOffer().any();
  auto small = [&] { return args.count * dataTypeSize(args.dtype) <= kScheduleInlineMaxBytes; };
  if (!team && !anySize && !small()) return false;
  // The board's path takes no lock and makes no allocation, clock read or syscall unless
  // it fails or is declined: the running claim (one compare-exchange), the kept
  // schedule, a sequence number, the team, the claim released.
  InlineClaim claim(&queue_);
  if (!claim) return false;
  if (!keptPlanFits(args)) {
    Status planned = keepPlan(args);
    if (!planned.isOk()) {
      *result = std::move(planned);
      return true;
    }
  }
  const std::shared_ptr<const Schedule>& kept = inlineSchedule_;
  if (anySize) {
    // Run at submit: as the progress thread would run it (Executor::execute: the timing of
    // cma against the ring, the team step, its fallback).
    *result = runInline(kept, args, input, output);
    return true;
  }
  const Schedule& schedule = *kept;
  const TeamAlgorithms algorithms = inlineTeam_;
  if (!inlineTeamStep_) {
    if (!small()) return false;
    *result = runInline(kept, args, input, output);
    return true;
  }
  // A pre-multiplied sum's input is scaled first (Executor::execute): never inline to the
  // team, which would read the unscaled input.
  if (args.op == ReduceOp::kPreMulSum) return false;
  // With the claim held nobody closes the team meanwhile.
  TeamCollectives* teamNow = executor_.team();
  if (teamNow == nullptr || !teamNow->runsInline(args, algorithms, input, output)) return false;
  const uint64_t tag = queue_.tagInline(args);
  const uint64_t start = CycleClock::now();
  Result<TeamOutcome> outcome =
      executor_.runTeam(args, schedule.fold, algorithms, inlineFallback_, tag, input, output);
  if (outcome.isOk() && outcome->declined()) {
    // Every rank declined it: its fallback steps run, here when small, else on the
    // progress thread ahead of anything queued meanwhile.
    Pending pending = makePending(kept, input, output, tag, nullptr);
    pending.teamDeclined = true;
    if (small()) {
      Status status = executeInline(pending);
      *result = inlineResult(std::move(status));
      return true;
    }
    auto work = std::make_shared<WorkState>();
    pending.work = work;
    pending.flightId = recorder_.queued(args, tag, algorithmName(schedule.fallback).data());
    queue_.pushFront(std::move(pending));
    *result = Work(work);
    return true;
  }
  Status status = outcome.status();
  recorder_.recordInline(args, tag,
                         algorithmName(status.isOk() ? outcome->ran : schedule.algorithm).data(),
                         start, status.isOk());
  if (!status.isOk()) status = giveUp(std::move(status), true, tag);
  *result = inlineResult(std::move(status));
  return true;
}

}  // namespace collie
