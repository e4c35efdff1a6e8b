#include "core/engine/engine.h"

#include "core/engine/cycle_clock.h"
#include "core/engine/fingerprint.h"
#include "core/log/log.h"

namespace collie {

namespace {
// abort() waits this long at most for the progress thread to close the connections
// (it normally takes a few milliseconds plus FailurePolicy::kPublishWait at worst).
constexpr auto kCloseWait = std::chrono::seconds(2);
// Collectives up to this many bytes per rank run on the submitting thread when the
// engine is idle (without an offload): at that size the two thread hand-offs cost more
// than the wire, and blocking the caller for that long loses no useful overlap.
constexpr size_t kScheduleInlineMaxBytes = 64 * 1024;
}  // namespace

Engine::Engine(EngineConfig config, TransportSet transports, std::unique_ptr<FailureBoard> board)
    : config_(std::move(config)),
      failures_(config_.rank, std::move(board)),
      recorder_(config_.traceDepth),
      executor_(config_, std::move(transports), failures_.abortFlag(), &recorder_),
      offered_(config_.algorithm == Algorithm::kAuto ? executor_.collectiveOffload() : nullptr),
      planner_(config_, offered_),
      queue_(config_.nranks, &failures_, &recorder_, offered_) {
  queue_.start(this);
}

Engine::~Engine() {
  queue_.stop(
      abortedError("communicator of rank " + std::to_string(config_.rank) + " was destroyed"));
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
  // A submitter may still be asking the offload (part of a transport) whether it takes
  // a collective, under the queue's lock, having seen no failure: let it finish first.
  queue_.fence();
  executor_.closeConnections();
}

Status Engine::giveUp(Status status, bool publish) {
  return failures_.giveUp(std::move(status), publish, [&](const Status& sticky) {
    closeConnections();
    if (publish) writeFlightRecorder(sticky.toString().c_str());
  });
}

Status Engine::finish(uint64_t flightId, Status status) {
  recorder_.finished(flightId, status.isOk());
  if (!status.isOk()) {
    COLLIE_LOG(WARN, COLL) << status.toString();
    status = giveUp(std::move(status), true);
  }
  return status;
}

Status Engine::run(Pending& pending) {
  recorder_.running(pending.flightId);
  Status status;
  if (pending.offloaded) status = executor_.runOffloaded(pending);
  if (status.isOk() && !pending.offloaded)
    status = executor_.execute(pending, &queue_);  // or declined
  return finish(pending.flightId, std::move(status));
}

void Engine::closeIdle(const Status& reason, bool publish) { giveUp(reason, publish); }

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
    parts.push_back(Pending::Part{*schedule, op.input, op.output, 0});
  }
  auto work = std::make_shared<WorkState>();
  if (parts.empty()) {
    work->complete(Status());
    return Work(work);
  }
  Pending pending =
      makePending(parts.front().schedule, parts.front().input, parts.front().output, 0, work);
  pending.group.assign(parts.begin() + 1, parts.end());
  queue_.push(std::move(pending), "group", false);
  return Work(work);
}

Result<Work> Engine::submit(const CollectiveArgs& args, const void* input, void* output) {
  Result<Work> result = Work();
  if (offered_ != nullptr) {
    if (submitInline(args, input, output, &result)) return result;
  } else if (submitScheduleInline(args, input, output, &result)) {
    return result;
  }
  Result<std::shared_ptr<const Schedule>> schedule = planner_.plan(args);
  if (!schedule.isOk()) return schedule.status();
  auto work = std::make_shared<WorkState>();
  // A forced algorithm (COLLIE_ALGO, Options::algorithm) runs as asked, not offloaded
  // (offered_ is null then).
  queue_.push(makePending(*schedule, input, output, 0, work),
              algorithmName((*schedule)->algorithm).data(), true);
  return Work(work);
}

Work Engine::inlineResult(Status status) {
  if (status.isOk()) return Work(WorkState::succeeded());
  auto work = std::make_shared<WorkState>();
  work->complete(std::move(status));
  return Work(std::move(work));
}

bool Engine::submitInline(const CollectiveArgs& args, const void* input, void* output,
                          Result<Work>* result) {
  // No lock, allocation, clock read or syscall unless it fails or is declined: the
  // running claim taken with one compare-exchange, a sequence number, the board, the
  // claim released.
  if (!queue_.claimIdle()) return false;
  if (!offered_->accepts(args) || !offered_->runsInline(args, input, output)) {
    queue_.releaseInline();
    return false;
  }
  const uint64_t tag = queue_.tagInline(args);
  const uint64_t start = CycleClock::now();
  Result<OffloadOutcome> outcome = executor_.offload(args, tag, input, output);
  if (outcome.isOk() && *outcome == OffloadOutcome::kDeclined) {
    // Every rank declined it: it runs its schedule on the progress thread, ahead of
    // anything queued meanwhile. Planning fails alike on every rank, if at all.
    Result<std::shared_ptr<const Schedule>> schedule = planner_.plan(args);
    auto work = std::make_shared<WorkState>();
    if (schedule.isOk()) {
      Pending pending = makePending(*schedule, input, output, tag, work);
      pending.flightId = recorder_.queued(args, tag, algorithmName((*schedule)->algorithm).data());
      queue_.pushFront(std::move(pending));
    }
    queue_.releaseInline();
    *result = schedule.isOk() ? Result<Work>(Work(work)) : Result<Work>(schedule.status());
    return true;
  }
  Status status = outcome.status();
  recorder_.recordInline(args, tag, "oneshot", start, status.isOk());
  if (!status.isOk()) status = giveUp(std::move(status), true);
  queue_.releaseInline();
  *result = inlineResult(std::move(status));
  return true;
}

bool Engine::submitScheduleInline(const CollectiveArgs& args, const void* input, void* output,
                                  Result<Work>* result) {
  // Point-to-point never: a send blocking its caller until the peer receives could
  // deadlock a program that posts the matching receive later on the same thread.
  if (args.kind == CollectiveKind::kSend || args.kind == CollectiveKind::kRecv ||
      args.count * dataTypeSize(args.dtype) > kScheduleInlineMaxBytes) {
    return false;
  }
  if (!queue_.claimIdle()) return false;
  Result<std::shared_ptr<const Schedule>> schedule = planner_.plan(args);
  if (!schedule.isOk()) {
    queue_.releaseInline();
    *result = schedule.status();
    return true;
  }
  Pending pending = makePending(*schedule, input, output, queue_.tagInline(args), nullptr);
  pending.flightId =
      recorder_.queued(args, pending.tag, algorithmName((*schedule)->algorithm).data());
  recorder_.running(pending.flightId);
  Status status = finish(pending.flightId, executor_.execute(pending, nullptr));
  queue_.releaseInline();
  *result = inlineResult(std::move(status));
  return true;
}

}  // namespace collie
