#include "core/engine/executor.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>

#include "core/kernel/reduce_backend.h"
#include "core/log/log.h"
#include "core/plan/exchange.h"
#include "core/plan/fingerprint.h"
#include "core/team/board_collectives.h"

namespace collie {

Executor::Executor(const EngineConfig& config, TransportSet transports,
                   const std::atomic<bool>& aborted, FlightRecorder* recorder,
                   TeamCollectives* scriptedTeam)
    : config_(config),
      matcher_(config.rank, config.nranks, config.nchannels, &transports_.connections),
      transports_(std::move(transports)),
      aborted_(aborted),
      recorder_(recorder),
      channelMemory_(config.nchannels) {
  transportNames_.assign(config_.nranks, "none");
  usefulChannels_ = config_.nchannels;
  for (const std::unique_ptr<Transport>& transport : transports_.transports) {
    const int useful = transport->caps().usefulChannels;
    if (useful > 0) usefulChannels_ = std::min(usefulChannels_, useful);
  }
  for (int peer = 0; peer < config_.nranks; ++peer) {
    int index = peer < static_cast<int>(transports_.transportOfPeer.size())
                    ? transports_.transportOfPeer[peer]
                    : -1;
    if (peer == config_.rank) {
      transportNames_[peer] = "self";
    } else if (index >= 0) {
      transportNames_[peer] = transports_.transports[index]->name();
    }
  }
  if (transports_.transports.size() == 1 && config_.nranks > 1) {
    if (scriptedTeam != nullptr) {
      team_ = scriptedTeam;
    } else if (TeamBoard* board = transports_.transports[0]->teamBoard()) {
      boardTeam_ = std::make_unique<BoardCollectives>(*board);
      team_ = boardTeam_.get();
    }
    if (team_ != nullptr) teamOffer_ = team_->offer();
  }
  singleCopy_ = SingleCopyChoice(config_.adaptMaxBytes, teamOffer_.boardBytes);
}

std::string Executor::transportTo(int peer) const {
  if (peer < 0 || peer >= config_.nranks) return "none";
  return transportNames_[peer];
}

void Executor::abandon(uint64_t tag, const Status& why) {
  for (auto& channels : transports_.connections) {
    for (auto& connection : channels) {
      if (connection) connection->abandon(tag, why);
    }
  }
}

void Executor::closeConnections() {
  // Connections first: they may still point at completions of failed executions.
  // Destroying them is what tells the peers (closed sockets, shm segment marked closed).
  // The team before them: it runs on the transport's board.
  team_ = nullptr;
  boardTeam_.reset();
  transports_.connections.clear();
  transports_.transports.clear();
  matcher_.reset();
  failedExecutions_.clear();
  spareExecutions_.clear();
}

Status Executor::teamFailed(const Status& status, uint64_t tag, TeamAlgorithms algorithms) const {
  const std::string where = describeFingerprint(tag) + " (team step " +
                            teamAlgorithmsText(algorithms) + ") on rank " +
                            std::to_string(config_.rank);
  if (status.isOk()) {
    return internalError("no team collectives to run the team step").withContext(where);
  }
  return status.withContext(where);
}

void Executor::waitForActivity(const std::vector<Connection*>& active) {
  // Block in the transports that serve the waiting connections; one transport can
  // sleep longer than several that must take turns.
  std::vector<Transport*> involved;
  for (Connection* connection : active) {
    Transport* transport =
        transports_.transports[transports_.transportOfPeer[connection->peer()]].get();
    bool known = false;
    for (Transport* t : involved) known = known || t == transport;
    if (!known) involved.push_back(transport);
  }
  auto slice =
      involved.size() <= 1 ? std::chrono::microseconds(5000) : std::chrono::microseconds(500);
  for (Transport* transport : involved) transport->waitForActivity(slice);
}

void Executor::appendExecutions(const Pending& pending,
                                std::vector<std::unique_ptr<Execution>>* executions) {
  executions->push_back(makeExecution(pending, nullptr));
  for (const Pending::Part& part : pending.group) {
    executions->push_back(makeExecution(pending, &part));
  }
}

std::unique_ptr<Execution> Executor::makeExecution(const Pending& pending,
                                                   const Pending::Part* part) {
  const std::shared_ptr<const Schedule>& schedule = part ? part->schedule : pending.schedule;
  const void* input = part ? part->input : pending.input;
  void* output = part ? part->output : pending.output;
  const uint64_t tag = part ? part->tag : pending.tag;
  const PointToPointTag& p2p = part ? part->p2p : pending.p2p;
  if (spareExecutions_.empty()) {
    return std::make_unique<Execution>(schedule, input, output, tag, &transports_.connections,
                                       &channelMemory_, config_.reduceOnReceive, p2p, &matcher_);
  }
  std::unique_ptr<Execution> execution = std::move(spareExecutions_.back());
  spareExecutions_.pop_back();
  execution->restart(schedule, input, output, tag, config_.reduceOnReceive, p2p);
  return execution;
}

void Executor::recycle(Batch& batch) {
  for (std::unique_ptr<Execution>& execution : batch.executions) {
    if (execution && execution->finished() && spareExecutions_.size() < kSpareExecutions) {
      spareExecutions_.push_back(std::move(execution));
    }
  }
  batch.executions.clear();
  if (spareBatch_.capacity() < batch.executions.capacity()) spareBatch_.swap(batch.executions);
}

Status Executor::preMultiply(Pending& pending) {
  const CollectiveArgs& args = pending.schedule->args;
  auto failed = [&](const std::string& why) {
    return invalidArgument(describeOperation(pending.tag, args) + " on rank " +
                           std::to_string(config_.rank) + ": " + why);
  };
  if (!pending.scalar.present) return failed("premulsum needs this rank's scalar factor");
  size_t count = 0;
  void* dst = nullptr;
  switch (args.kind) {
    case CollectiveKind::kAllReduce:
      count = args.count;
      dst = pending.output;
      break;
    case CollectiveKind::kReduce:
      count = args.count;
      if (config_.rank == args.root) dst = pending.output;
      break;
    case CollectiveKind::kReduceScatter:
      count = args.count * static_cast<size_t>(config_.nranks);
      break;
    case CollectiveKind::kReduceScatterV:
      count = args.count;  // the sum of the blocks
      break;
    default:
      return failed("premulsum is an op of all-reduce, reduce and reduce-scatter only");
  }
  if (count == 0) return Status();
  const size_t bytes = count * dataTypeSize(args.dtype);
  if (dst == nullptr) {
    Result<uint8_t*> copy = scratch(pending, bytes, "premulsum copy");
    if (!copy.isOk()) return copy.status();
    dst = *copy;
  }
  hostReduceBackend().scale(dst, pending.input, pending.scalar.bytes, count, args.dtype);
  pending.input = dst;
  return Status();
}

Result<uint8_t*> Executor::scratch(const Pending& pending, size_t bytes, const char* what) {
  if (scratchBytes_ < bytes) {
    scratch_.reset();
    scratch_.reset(new (std::nothrow) uint8_t[bytes]);
    scratchBytes_ = scratch_ != nullptr ? bytes : 0;
    if (scratch_ == nullptr) {
      return systemError(describeOperation(pending.tag, pending.schedule->args) + " on rank " +
                             std::to_string(config_.rank) + ": the " + std::to_string(bytes) +
                             "-byte " + what,
                         ENOMEM);
    }
  }
  return scratch_.get();
}

Status Executor::stageInPlaceInput(Pending& pending) {
  if (pending.input != pending.output || pending.input == nullptr) return Status();
  const size_t bytes = inPlaceExchangeBytes(pending.schedule->args, config_.nranks);
  if (bytes == 0) return Status();
  Result<uint8_t*> copy = scratch(pending, bytes, "copy of the all-to-all's input (in place)");
  if (!copy.isOk()) return copy.status();
  std::memcpy(*copy, pending.input, bytes);
  pending.input = *copy;
  return Status();
}

Status Executor::execute(Pending& pending, PointToPointSource* adopt) {
  if (pending.schedule->args.op == ReduceOp::kPreMulSum) {
    COLLIE_RETURN_IF_ERROR(preMultiply(pending));
  }
  TeamAlgorithms algorithms = 0;
  if (pending.teamDeclined || !hasTeamStep(*pending.schedule, &algorithms)) {
    COLLIE_RETURN_IF_ERROR(stageInPlaceInput(pending));
    return executeSteps(pending, adopt);
  }
  const Schedule& schedule = *pending.schedule;
  const CollectiveArgs& args = schedule.args;
  const bool fallback = schedule.fallback != Algorithm::kAuto || algorithms == 0;
  // A group's other parts would run (and be timed) with its steps: only a lone collective
  // is a trial.
  const SingleCopyChoice::Trial trial =
      pending.group.empty()
          ? singleCopy_.begin(args.kind, args.count * dataTypeSize(args.dtype),
                              pending.input == pending.output, algorithms, fallback)
          : SingleCopyChoice::Trial{algorithms, -1};
  // The clock only for a trial: other team steps (the board's sizes, exchanges) read none.
  const Clock::time_point start = trial.slot >= 0 ? Clock::now() : Clock::time_point{};
  Result<TeamOutcome> outcome = runTeam(args, schedule.fold, trial.algorithms, fallback,
                                        pending.tag, pending.input, pending.output);
  if (!outcome.isOk()) return outcome.status();
  if (!outcome->declined()) {
    recordTrial(trial, outcome->ran, start);
    return Status();
  }
  pending.teamDeclined = true;
  COLLIE_RETURN_IF_ERROR(stageInPlaceInput(pending));
  Status status = executeSteps(pending, adopt);
  if (status.isOk()) recordTrial(trial, Algorithm::kAuto, start);
  return status;
}

void Executor::recordTrial(const SingleCopyChoice::Trial& trial, Algorithm ran,
                           Clock::time_point start) {
  if (trial.slot < 0) return;
  const double micros = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  if (singleCopy_.end(trial, ran, micros)) {
    COLLIE_LOG(INFO, TUNE) << "rank " << config_.rank << ": allreduce "
                           << singleCopy_.describe(trial);
  }
}

Status Executor::executeSteps(Pending& pending, PointToPointSource* adopt) {
  Batch batch;
  batch.executions.swap(spareBatch_);
  appendExecutions(pending, &batch.executions);
  const size_t own = batch.executions.size();
  if (!isPointToPoint(pending)) {
    adopt = nullptr;
  } else if (parked_) {
    // An earlier batch left these in flight: they join this one behind its own operation.
    for (Adopted& entry : parked_->adopted) {
      entry.first += own;
      batch.adopted.push_back(std::move(entry));
    }
    for (auto& execution : parked_->executions) batch.executions.push_back(std::move(execution));
    parked_.reset();
  }
  // A point-to-point batch returns once its own operations are done (see executor.h).
  Status status = drive(batch, &pending, own, adopt, /*untilOwnDone=*/adopt != nullptr);
  recycle(batch);
  return status;
}

void Executor::park(Batch& batch) {
  Batch kept;
  kept.idleSince = batch.idleSince;
  kept.idleStamped = batch.idleStamped;
  for (Adopted& entry : batch.adopted) {
    if (entry.done) continue;
    const size_t first = kept.executions.size();
    for (size_t i = entry.first; i < entry.first + entry.count; ++i) {
      kept.executions.push_back(std::move(batch.executions[i]));
    }
    entry.first = first;
    kept.adopted.push_back(std::move(entry));
  }
  parked_ = std::move(kept);
}

Status Executor::resumeParked(PointToPointSource* adopt, uint64_t* failedTag) {
  if (!parked_) return Status();
  Batch batch = std::move(*parked_);
  parked_.reset();
  Status status = drive(batch, nullptr, 0, adopt, /*untilOwnDone=*/false);
  if (!status.isOk()) *failedTag = batch.failedTag;
  recycle(batch);
  return status;
}

Status Executor::drive(Batch& batch, Pending* lead, size_t own, PointToPointSource* adopt,
                       bool untilOwnDone) {
  std::vector<std::unique_ptr<Execution>>& executions = batch.executions;
  std::vector<Adopted>& adopted = batch.adopted;
  // What errors are named after: the lead operation, or (a resumed batch has none) the
  // first adopted one not yet complete.
  auto named = [&]() -> const Pending& {
    if (lead != nullptr) return *lead;
    for (const Adopted& entry : adopted) {
      if (!entry.done) return entry.pending;
    }
    return adopted.front().pending;
  };
  // Completes the adopted operations that finished (all of them, with `status`, when the
  // batch failed).
  auto completeAdopted = [&](const Status& status) {
    for (Adopted& entry : adopted) {
      if (entry.done) continue;
      bool finished = true;
      for (size_t i = entry.first; i < entry.first + entry.count; ++i) {
        finished = finished && executions[i]->finished();
      }
      if (!finished && status.isOk()) continue;
      entry.done = true;
      recorder_->finished(entry.pending.flightId, status.isOk());
      entry.pending.work->complete(finished ? Status() : status);
    }
  };
  std::vector<Connection*>& active = active_;
  Status status;
  while (true) {
    // Only from the front of the queue: a collective queued in between keeps its place,
    // and so does everything behind it.
    Adopted entry;
    while (adopt != nullptr && adopt->takePointToPoint(&entry.pending)) {
      entry.first = executions.size();
      appendExecutions(entry.pending, &executions);
      entry.count = executions.size() - entry.first;
      recorder_->running(entry.pending.flightId);
      adopted.push_back(std::move(entry));
      entry = Adopted();
    }
    bool progressed = false;
    bool finished = true;
    bool ownFinished = true;
    active.clear();
    for (size_t i = 0; i < executions.size(); ++i) {
      status = executions[i]->advance(&progressed, &active);
      if (!status.isOk()) break;
      finished = finished && executions[i]->finished();
      if (i + 1 == own) ownFinished = finished;
    }
    if (!status.isOk()) break;
    completeAdopted(Status());
    if (finished) {
      // One outcome: not a success where a peer already left a record that it failed it.
      if (lead != nullptr && !isPointToPoint(*lead)) {
        for (auto& execution : executions) {
          status = execution->abandonedByPeer();
          if (!status.isOk()) break;
        }
      }
      if (status.isOk()) return Status();
      status =
          status.withContext(describeOperation(named().tag, named().schedule->args, named().p2p) +
                             " on rank " + std::to_string(config_.rank));
      break;
    }
    if (untilOwnDone && ownFinished) {
      // The batch's own operation is done, and its Work completes now; what it took in
      // stays in flight for the next holder of the running claim.
      park(batch);
      return Status();
    }
    // Checked on every turn: a collective that keeps moving must still stop at once.
    if (aborted_) {
      status = abortedError(describeOperation(named().tag, named().schedule->args, named().p2p) +
                            " aborted on rank " + std::to_string(config_.rank));
      break;
    }
    if (progressed) {
      batch.idleStamped = batch.spinning = false;
      continue;
    }
    // A pure spin turn is a poll of the connections; the clock read (~30 ns here) would
    // be as long again, so it is read every few of them (pureSpin is microseconds).
    if (batch.spinning && ++batch.unclockedSpins < kSpinTurnsPerClockRead) continue;
    batch.unclockedSpins = 0;
    const auto now = Clock::now();
    if (!batch.idleStamped) {
      batch.idleSince = now;
      batch.idleStamped = true;
    }
    batch.spinning = false;
    if (now - batch.idleSince > config_.timeout) {
      status = timedOut(named(), executions);
      break;
    }
    if (now - batch.idleSince >= config_.wait.busyPoll) {
      waitForActivity(active);
    } else if (now - batch.idleSince >= config_.wait.pureSpin) {
      // On a busy host the peer we wait for may be queued behind us on this core:
      // spinning without yielding made every step cost a whole busy-poll period
      // (8 B over tcp at load 9 on 2 cores: 115 us median, 19 us with no spin).
      std::this_thread::yield();
    } else {
      batch.spinning = true;
    }
  }
  batch.failedTag = named().tag;
  if (status.code() == StatusCode::kMismatch) status = explainMismatch(status, executions);
  completeAdopted(status);
  for (auto& execution : executions) failedExecutions_.push_back(std::move(execution));
  return status;
}

Status Executor::timedOut(const Pending& pending,
                          const std::vector<std::unique_ptr<Execution>>& executions) const {
  std::string waits;
  int waited = -1;
  for (auto& execution : executions) {
    if (execution->finished()) continue;
    waits += (waits.empty() ? "" : "; ") + execution->describeWaits();
    if (waited < 0) waited = execution->firstWaitedPeer();
  }
  std::string what = describeOperation(pending.tag, pending.schedule->args, pending.p2p);
  if (executions.size() > 1) {
    what += " (group of " + std::to_string(executions.size()) + " operations)";
  }
  return timeoutError(
      what + " on rank " + std::to_string(config_.rank) + " made no progress for " +
          std::to_string(
              std::chrono::duration_cast<std::chrono::milliseconds>(config_.timeout).count()) +
          " ms: " + waits +
          ". The peer may be dead, stuck or running a different collective; raise "
          "COLLIE_TIMEOUT if it is only slow.",
      waited);
}

Status Executor::explainMismatch(Status status,
                                 const std::vector<std::unique_ptr<Execution>>& executions) const {
  for (auto& execution : executions) {
    uint64_t peerTag = 0;
    int peer = -1;
    if (!execution->rejectedTag(&peerTag, &peer)) continue;
    std::string what = describeDisagreement(execution->tag(), peerTag, config_.rank, peer);
    if (!what.empty()) status = mismatchError(what + ". " + status.message(), peer);
    break;
  }
  return status;
}

}  // namespace collie
