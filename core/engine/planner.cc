#include "core/engine/planner.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "core/log/log.h"

namespace collie {

Planner::Planner(const EngineConfig& config, const TeamOffer& team)
    : config_(config),
      team_(team),
      planChannels_(config.nchannels),
      cache_(config.scheduleCacheBytes) {}

void Planner::setTuneConstants(const TuneConstants& constants) {
  std::lock_guard<std::mutex> lock(mutex_);
  tune_ = constants;
  cache_.clear();
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

TuneConstants Planner::tuneConstants() {
  std::lock_guard<std::mutex> lock(mutex_);
  return tune_;
}

void Planner::setPlanChannels(int channels) {
  std::lock_guard<std::mutex> lock(mutex_);
  planChannels_ = std::clamp(channels, 1, config_.nchannels);
  cache_.clear();
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

size_t Planner::cachedSchedules() {
  std::lock_guard<std::mutex> lock(mutex_);
  return cache_.size();
}

TuneLimits Planner::limitsLocked() const {
  TuneLimits limits;
  limits.channelsFixed = config_.channelsFixed;
  limits.chunkBytes = config_.chunkBytes;
  limits.forced = config_.algorithm;
  limits.maxChannels = config_.channelsFixed ? config_.nchannels : planChannels_;
  limits.team = team_;
  limits.measuredCmaMaxBytes = config_.adaptMaxBytes;
  if (config_.hosts) {
    limits.nhosts = config_.hosts->nhosts;
    limits.localSize = config_.hosts->localSize;
  }
  limits.hostStage = config_.hostStage;
  return limits;
}

double Planner::predictMicros(const CollectiveArgs& args) {
  const size_t bytes =
      args.count *
      dataTypeSize(args.kind == CollectiveKind::kBarrier ? DataType::kUint8 : args.dtype);
  std::lock_guard<std::mutex> lock(mutex_);
  if (args.kind == CollectiveKind::kSend || args.kind == CollectiveKind::kRecv) {
    return tune_.alphaUs + static_cast<double>(bytes) / (tune_.bwGBps * 1000.0);
  }
  return decide(args.kind, bytes, config_.nranks, limitsLocked(), tune_).predictedUs;
}

Result<std::shared_ptr<const Schedule>> Planner::plan(const CollectiveArgs& args) {
  // The tuner's decision is a function of the call under the current tuned constants and
  // plan channel count (changing either clears the cache), so a schedule kept for the
  // same call is the one it would decide and build again: looked up before the tuner
  // runs, it costs a repeated call no decision.
  const ScheduleKey key =
      std::make_tuple(static_cast<int>(args.kind), args.count, static_cast<int>(args.dtype),
                      static_cast<int>(args.op), args.root, args.peer);
  // A layout (alltoallv) or block counts (the v kinds) are this call's own: its schedule
  // is neither looked up nor kept.
  const bool cacheable = args.layout == nullptr && args.blocks == nullptr;
  std::unique_lock<std::mutex> lock(mutex_);
  if (cacheable) {
    if (std::shared_ptr<const Schedule> cached = cache_.find(key)) return cached;
  }
  const size_t bytes =
      args.count *
      dataTypeSize(args.kind == CollectiveKind::kBarrier ? DataType::kUint8 : args.dtype);
  const TuneLimits limits = limitsLocked();
  const std::string unavailable = forcedTeamUnavailable(args.kind, bytes, config_.nranks, limits);
  if (!unavailable.empty()) {
    return unsupported("rank " + std::to_string(config_.rank) + ": " +
                       std::string(collectiveName(args.kind)) + " of " + std::to_string(bytes) +
                       " bytes: " + unavailable);
  }
  const TuneDecision decision = decide(args.kind, bytes, config_.nranks, limits, tune_);
  tunerDecisions_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t decidedIn = generation_.load(std::memory_order_relaxed);
  lock.unlock();
  PlanParams params;
  params.rank = config_.rank;
  params.nranks = config_.nranks;
  params.nchannels = decision.nchannels;
  params.chunkBytes = decision.chunkBytes;
  params.algorithm = decision.steps;
  params.agreeOnRoot = config_.rootAgreement;
  params.teamStep = decision.teamStep;
  params.team = decision.team;
  params.teamFallback = decision.steps != Algorithm::kAuto;
  params.hosts = config_.hosts;
  params.hostTree = decision.hostTree;
  CollectiveArgs planned = args;
  planned.scalar = ReduceScalar();  // the call's own (Pending::scalar), never the plan's
  Result<Schedule> schedule = buildSchedule(planned, params);
  if (!schedule.isOk()) return schedule.status();
  auto shared = std::make_shared<const Schedule>(std::move(schedule).value());
  COLLIE_LOG(INFO, TUNE) << "rank " << config_.rank << ": " << collectiveName(args.kind) << " of "
                         << bytes << " bytes on " << config_.nranks << " ranks -> "
                         << decisionText(decision) << " (chunk/channels of the steps), predicted "
                         << decision.predictedUs << " us for " << algorithmName(decision.algorithm);
  if (!cacheable) return shared;
  lock.lock();
  // Tuned constants set while this schedule was built make it stale: used once, not kept.
  if (generation_.load(std::memory_order_relaxed) == decidedIn) cache_.insert(key, shared);
  return shared;
}

}  // namespace collie
