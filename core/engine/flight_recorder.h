// FlightRecorder: the last N collectives of one rank, for post-mortems.
//
// A fixed ring of plain entries (allocated once; nothing is allocated per
// collective): issue id, fingerprint, kind, bytes, dtype, op, root (broadcast, reduce) or
// peer (send, recv), algorithm, state
// (queued, running, done, failed) and wall-clock timestamps in microseconds since the
// Unix epoch (comparable across ranks of one host). An entry is overwritten once N
// newer collectives were recorded; updates to an overwritten entry are ignored.
// toJson() renders the ring oldest first. Depth 0 records nothing.
//
// Timestamps are taken with CycleClock (a TSC read, no clock_gettime) and converted to
// wall-clock microseconds when the ring is read; a collective run inline by its caller
// is recorded in one call (recordInline). dump() writes the ring for a post-mortem
// (COLLIE_TRACE_DUMP): the engine calls it when it gives up and when it is destroyed.
//
// Two rings of N slots, merged when read: one for queued collectives and one for those
// run inline. Writers of the queued ring (queued, running, finished) take turns on one
// atomic word that holds its next id and a lock bit: one compare-exchange to take it,
// one release store to hand it back. The inline ring has one writer at a time by
// contract, the holder of the engine's running claim (ProgressQueue), whose acquire and
// release order one holder's records before the next's; so recordInline(), the
// small-message path's record, executes no locked instruction (the compare-exchange
// was about 4% of an 8 B all-reduce). A reader merges the two rings by the records'
// time stamps (each ring is in time order: the queued ring stamps under its lock, the
// inline ring's writers follow one another), keeps the newest N, and numbers them by
// the count of records made up to each.
//
// Thread safety: every method may be called from any thread, without a mutex, except
// recordInline(), which only the running claim's holder calls. Each slot is a seqlock
// for the readers (snapshot, toJson), which never block a writer: they copy a slot and
// retry when its version was odd or moved meanwhile; a slot still torn after 65,536
// tries (its writer preempted mid-write that long) is left out of that snapshot.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/engine/cycle_clock.h"
#include "core/plan/schedule.h"

namespace collie {

enum class FlightState : uint8_t { kQueued, kRunning, kDone, kFailed };

struct FlightEntry {
  uint64_t id = 0;  // records made up to this one, this one included (1-based)
  uint64_t tag = 0;
  uint64_t bytes = 0;
  CollectiveKind kind = CollectiveKind::kAllReduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;                // broadcast, reduce
  int peer = -1;               // send, recv
  const char* algorithm = "";  // static string
  FlightState state = FlightState::kQueued;
  int64_t queuedUs = 0;
  int64_t startUs = 0;
  int64_t endUs = 0;
};

// One entry of a FlightRecorder's ring (internal to it), a cache line of its own (writers of
// neighbouring entries do not share lines). Fields are relaxed atomics (plain moves on x86) so that
// a reader's racing copy is defined; the version orders them. Times are CycleClock ticks here;
// snapshot() converts them to microseconds.
struct alignas(64) FlightSlot {
  std::atomic<uint64_t> version{0};  // odd while being written
  std::atomic<uint64_t> id{0};
  std::atomic<uint64_t> tag{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> shape{0};  // kind, dtype, op, state, root or peer: see packShape()
  std::atomic<const char*> algorithm{""};
  std::atomic<int64_t> queued{0};
  std::atomic<int64_t> start{0};
  std::atomic<int64_t> end{0};
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t depth);

  // Records a newly queued collective; returns its id (0 when depth is 0).
  uint64_t queued(const CollectiveArgs& args, uint64_t tag, const char* algorithm);
  void running(uint64_t id);
  void finished(uint64_t id, bool ok);
  // A collective that ran to its end on the submitting thread, started at
  // `startTicks` (CycleClock::now()); queued, running and finished in one entry. Only
  // the holder of the engine's running claim calls it (see above).
  void recordInline(const CollectiveArgs& args, uint64_t tag, const char* algorithm,
                    uint64_t startTicks, bool ok);

  // {"rank":..,"nranks":..,"depth":..,"error":..,"collectives":[{..}, ..]}
  std::string toJson(int rank, int nranks, const std::string& error) const;
  // Writes toJson() to `destination` (COLLIE_TRACE_DUMP): "stderr" or "-" to standard
  // error under a heading naming the rank and `why`; else to the file
  // flightDumpPath(destination, rank), replaced. Returns where it wrote ("stderr" or the
  // path), or "" when it wrote nothing: an empty destination, depth 0, or a file that
  // cannot be written (logged as a warning; a post-mortem must not fail anything).
  std::string dump(const std::string& destination, int rank, int nranks, const std::string& error,
                   const char* why) const;
  std::vector<FlightEntry> snapshot() const;  // oldest first

 private:
  // A ring of slots indexed by a mask where the depth is a power of two (the default,
  // 64), so that the small-message path pays no division per collective.
  struct Ring {
    explicit Ring(size_t depth);
    FlightSlot& slot(uint64_t id) { return slots[mask != 0 ? id & mask : id % slots.size()]; }
    const FlightSlot& slot(uint64_t id) const {
      return slots[mask != 0 ? id & mask : id % slots.size()];
    }
    // Appends the entries [first, next) still in the ring, oldest first, times in ticks.
    void read(uint64_t next, std::vector<FlightEntry>* out) const;

    std::vector<FlightSlot> slots;
    uint64_t mask = 0;  // depth - 1 where depth is a power of two above 1, else 0
  };

  void update(uint64_t id, FlightState state, std::atomic<int64_t> FlightSlot::*time);

  CycleClock clock_;
  Ring queued_;
  Ring inline_;
  std::atomic<uint64_t> writers_{1 << 1};  // the queued ring's next id << 1 | locked
  std::atomic<uint64_t> inlineNext_{1};    // the inline ring's next id (claim holder only)
};

const char* flightStateName(FlightState state);
// A COLLIE_TRACE_DUMP path with every "%r" replaced by `rank`.
std::string flightDumpPath(const std::string& pattern, int rank);

}  // namespace collie
