// Timeline: timestamped events of one rank (layer compute, bucket all-reduces), and
// writers that draw several ranks' events as a Chrome-trace JSON or an SVG picture.
//
// Times are microseconds since the Timeline's epoch (a steady_clock instant; ranks
// set it right after a common barrier so that their axes line up). Events travel
// between ranks as fixed-size arrays of doubles (toDoubles / fromDoubles), e.g.
// through Communicator::allGather.
//
// Thread safety: record() and events() may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "collie/status.h"

namespace collie::ddp {

enum class EventKind : int {
  kForward = 0,    // index = layer
  kBackward = 1,   // index = layer
  kAllReduce = 2,  // index = bucket; start = when it could run (issued and its
                   // predecessor done), issue time kept in `issueUs`
  kStep = 3,       // the whole step
};

struct TimelineEvent {
  EventKind kind = EventKind::kStep;
  int index = 0;
  int step = 0;
  int phase = 0;  // 0 = no overlap (all-reduce after backward), 1 = bucketed overlap
  int rank = 0;
  double startUs = 0;
  double endUs = 0;
  double issueUs = 0;
};

inline constexpr size_t kDoublesPerEvent = 8;

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  Timeline() : epoch_(Clock::now()) {}
  void resetEpoch() { epoch_ = Clock::now(); }
  double nowUs() const {
    return std::chrono::duration<double, std::micro>(Clock::now() - epoch_).count();
  }

  // Context stamped onto every later event.
  void setContext(int rank, int step, int phase);
  void record(EventKind kind, int index, double startUs, double endUs, double issueUs = 0);
  std::vector<TimelineEvent> events() const;
  void clear();

 private:
  Clock::time_point epoch_;
  mutable std::mutex mutex_;
  int rank_ = 0;
  int step_ = 0;
  int phase_ = 0;
  std::vector<TimelineEvent> events_;
};

// Fixed-size encoding: `capacity` events, unused slots marked by kind -1.
std::vector<double> toDoubles(const std::vector<TimelineEvent>& events, size_t capacity);
std::vector<TimelineEvent> fromDoubles(const double* data, size_t capacity);

// Chrome trace ("traceEvents", complete "X" events): pid = rank, tid 0 = compute,
// tid 1 = communication. Opens in chrome://tracing and ui.perfetto.dev.
std::string chromeTraceJson(const std::vector<TimelineEvent>& events);

// An SVG with one panel per phase present for `step` (no overlap above, overlap
// below), both on one time scale; per rank a compute lane and an all-reduce lane.
std::string timelineSvg(const std::vector<TimelineEvent>& events, int step, int nranks,
                        const std::string& title);

// Writes `text` to `path` through a temporary file and rename (atomic replace).
Status writeFileAtomically(const std::string& path, const std::string& text);

}  // namespace collie::ddp
