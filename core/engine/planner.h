// Planner: the schedule a collective runs with on this rank.
//
// plan() asks the tuner (core/tune/tuner.h) for the algorithm, chunk size and channel
// count of a collective, from the engine's configuration (a forced algorithm, a fixed
// chunk size or channel count) and the tuned constants, and builds its Schedule, or
// returns the one built for the same call before without asking the tuner (ScheduleCache, bounded
// by EngineConfig::scheduleCacheBytes; an alltoallv's or a v kind's, planned for its layout or
// counts, is not kept). Every rank must plan alike: the tuned constants and the plan channel count
// are agreed on through rank 0 at creation (core/engine/tune_probe.h) and set here before the first
// collective; setting either drops the cached schedules. Planning fails (InvalidArgument,
// Unsupported) the same way on every rank, before anything is queued: a forced team algorithm that
// this communicator's team cannot run is such a failure.
//
// The team offer (core/plan/team_step.h) is the communicator's team's, the same on every
// rank; with it the tuner puts a team step first in every collective but
// point-to-point (unless a schedule algorithm is forced).
//
// Thread safety: every method may be called from any thread. The cache and the tuned
// values are guarded by one mutex; schedules are built outside it (two threads
// missing the same key both build it; the second insert replaces the first).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "core/engine/engine_config.h"
#include "core/engine/schedule_cache.h"
#include "core/tune/tuner.h"

namespace collie {

class Planner {
 public:
  // `team`: what the communicator's team runs (empty without one).
  Planner(const EngineConfig& config, const TeamOffer& team);

  // The schedule of `args` on this rank, shared with the cache; or why it cannot run.
  Result<std::shared_ptr<const Schedule>> plan(const CollectiveArgs& args);

  // The predicted microseconds of `args` with the decision plan() would take; a send or
  // receive is one message: alpha + bytes / bandwidth of the tuned constants.
  double predictMicros(const CollectiveArgs& args);

  void setTuneConstants(const TuneConstants& constants);
  TuneConstants tuneConstants();
  // The most channels a schedule may use: clamped to 1..config.nchannels; ignored when
  // config.channelsFixed.
  void setPlanChannels(int channels);
  // Schedules cached now (for tests and diagnostics).
  size_t cachedSchedules();
  // How many times plan() asked the tuner (its cache misses), for tests and diagnostics.
  uint64_t tunerDecisions() const { return tunerDecisions_.load(std::memory_order_relaxed); }
  // Changes whenever cached schedules are dropped (setTuneConstants, setPlanChannels),
  // so that a caller keeping a schedule of its own knows to plan again.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  // The tuner's limits from the configuration; called with mutex_ held.
  TuneLimits limitsLocked() const;

  const EngineConfig config_;
  const TeamOffer team_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> tunerDecisions_{0};
  std::mutex mutex_;  // guards the members below
  TuneConstants tune_;
  int planChannels_;
  ScheduleCache cache_;
};

}  // namespace collie
