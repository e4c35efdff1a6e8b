// FlightRecorder: the last N collectives of one rank, for post-mortems.
//
// A fixed ring of plain entries (allocated once; nothing is allocated per
// collective): issue id, fingerprint, kind, bytes, dtype, op, root, algorithm, state
// (queued, running, done, failed) and wall-clock timestamps in microseconds since the
// Unix epoch (comparable across ranks of one host). An entry is overwritten once N
// newer collectives were recorded; updates to an overwritten entry are ignored.
// toJson() renders the ring oldest first. Depth 0 records nothing.
//
// Timestamps are taken with CycleClock (a TSC read, no clock_gettime) and converted to
// wall-clock microseconds when the ring is read; a collective run inline by its caller
// is recorded in one call (recordInline) under one lock.
//
// Thread safety: every method may be called from any thread; a short mutex guards the
// ring (uncontended in practice: one submitter and the progress thread).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/engine/cycle_clock.h"
#include "core/plan/schedule.h"

namespace collie {

enum class FlightState : uint8_t { kQueued, kRunning, kDone, kFailed };

struct FlightEntry {
  uint64_t id = 0;  // 1-based issue order on this communicator; 0 = empty slot
  uint64_t tag = 0;
  uint64_t bytes = 0;
  CollectiveKind kind = CollectiveKind::kAllReduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  const char* algorithm = "";  // static string
  FlightState state = FlightState::kQueued;
  int64_t queuedUs = 0;
  int64_t startUs = 0;
  int64_t endUs = 0;
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t depth);

  // Records a newly queued collective; returns its id (0 when depth is 0).
  uint64_t queued(const CollectiveArgs& args, uint64_t tag, const char* algorithm);
  void running(uint64_t id);
  void finished(uint64_t id, bool ok);
  // A collective that ran to its end on the submitting thread, started at
  // `startTicks` (CycleClock::now()); queued, running and finished in one entry.
  void recordInline(const CollectiveArgs& args, uint64_t tag, const char* algorithm,
                    uint64_t startTicks, bool ok);

  // {"rank":..,"nranks":..,"depth":..,"error":..,"collectives":[{..}, ..]}
  std::string toJson(int rank, int nranks, const std::string& error) const;
  std::vector<FlightEntry> snapshot() const;  // oldest first

 private:
  // Times are CycleClock ticks here; snapshot() converts them to microseconds.
  FlightEntry* find(uint64_t id);
  FlightEntry& add(const CollectiveArgs& args, uint64_t tag, const char* algorithm,
                   uint64_t* id);  // requires mutex_

  CycleClock clock_;
  mutable std::mutex mutex_;
  std::vector<FlightEntry> ring_;
  uint64_t nextId_ = 1;
};

const char* flightStateName(FlightState state);

}  // namespace collie
