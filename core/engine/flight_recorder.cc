#include "core/engine/flight_recorder.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/log/log.h"
#include "core/plan/fingerprint.h"

namespace collie {

const char* flightStateName(FlightState state) {
  switch (state) {
    case FlightState::kQueued:
      return "queued";
    case FlightState::kRunning:
      return "running";
    case FlightState::kDone:
      return "done";
    case FlightState::kFailed:
      return "failed";
  }
  return "unknown";
}

namespace {

void cpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// kind | dtype << 8 | op << 16 | state << 24 | rank << 32, in one word, where rank is the
// root of a broadcast or reduce and the peer of a send or recv (the kind says which).
uint64_t packShape(const CollectiveArgs& args, FlightState state) {
  const int rank = isPointToPoint(args.kind) ? args.peer : isRooted(args.kind) ? args.root : 0;
  return static_cast<uint64_t>(args.kind) | static_cast<uint64_t>(args.dtype) << 8 |
         static_cast<uint64_t>(args.op) << 16 | static_cast<uint64_t>(state) << 24 |
         static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 32;
}

uint64_t withState(uint64_t shape, FlightState state) {
  return (shape & ~(uint64_t{0xff} << 24)) | static_cast<uint64_t>(state) << 24;
}

void unpackShape(uint64_t shape, FlightEntry* entry) {
  entry->kind = static_cast<CollectiveKind>(shape & 0xff);
  entry->dtype = static_cast<DataType>(shape >> 8 & 0xff);
  entry->op = static_cast<ReduceOp>(shape >> 16 & 0xff);
  entry->state = static_cast<FlightState>(shape >> 24 & 0xff);
  const int rank = static_cast<int32_t>(static_cast<uint32_t>(shape >> 32));
  entry->root = isRooted(entry->kind) ? rank : 0;
  entry->peer = isPointToPoint(entry->kind) ? rank : -1;
}

constexpr auto kRelaxed = std::memory_order_relaxed;
// Tries to copy one slot before a snapshot leaves it out.
constexpr int kReadAttempts = 1 << 16;

// Opens a write of the slot for readers: odd version first, fields after it.
uint64_t beginWrite(FlightSlot& slot) {
  const uint64_t version = slot.version.load(kRelaxed) + 1;
  slot.version.store(version, kRelaxed);
  // A reader that sees a field written after this fence sees the odd version (or a
  // later one) when it checks the version again.
  std::atomic_thread_fence(std::memory_order_release);
  return version;
}

void endWrite(FlightSlot& slot, uint64_t version) {
  slot.version.store(version + 1, std::memory_order_release);
}

// By the slot's ring's one writer of the moment (the queued ring's writers' lock or the
// running claim).
void writeSlot(FlightSlot& slot, uint64_t id, const CollectiveArgs& args, uint64_t tag,
               const char* algorithm, FlightState state, int64_t queued, int64_t start,
               int64_t end) {
  const uint64_t version = beginWrite(slot);
  slot.id.store(id, kRelaxed);
  slot.tag.store(tag, kRelaxed);
  slot.bytes.store(args.count * dataTypeSize(args.dtype), kRelaxed);
  slot.shape.store(packShape(args, state), kRelaxed);
  slot.algorithm.store(algorithm, kRelaxed);
  slot.queued.store(queued, kRelaxed);
  slot.start.store(start, kRelaxed);
  slot.end.store(end, kRelaxed);
  endWrite(slot, version);
}

// Under the writers' lock: sets the state of entry `id` and one time stamp, unless the
// entry was overwritten.
void updateSlot(FlightSlot& slot, uint64_t id, FlightState state,
                std::atomic<int64_t> FlightSlot::*time, int64_t now) {
  if (slot.id.load(kRelaxed) != id) return;
  const uint64_t version = beginWrite(slot);
  slot.shape.store(withState(slot.shape.load(kRelaxed), state), kRelaxed);
  (slot.*time).store(now, kRelaxed);
  endWrite(slot, version);
}

// The writers' lock: returns the next id, holding it.
uint64_t lockWriters(std::atomic<uint64_t>& writers) {
  uint64_t word = writers.load(kRelaxed);
  for (uint32_t spins = 1;; ++spins) {
    if ((word & 1) == 0 &&
        writers.compare_exchange_weak(word, word | 1, std::memory_order_acquire, kRelaxed)) {
      return word >> 1;
    }
    // Held for a few dozen instructions, unless its holder was preempted.
    if (spins % 64 == 0) {
      std::this_thread::yield();
    } else {
      cpuRelax();
    }
    word = writers.load(kRelaxed);
  }
}

// Releases it, with the next id.
void unlockWriters(std::atomic<uint64_t>& writers, uint64_t nextId) {
  writers.store(nextId << 1, std::memory_order_release);
}

// A consistent copy of the slot; false when it was torn at every attempt.
bool readSlot(const FlightSlot& slot, FlightEntry* entry) {
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    const uint64_t version = slot.version.load(std::memory_order_acquire);
    if ((version & 1) == 0) {
      entry->id = slot.id.load(kRelaxed);
      entry->tag = slot.tag.load(kRelaxed);
      entry->bytes = slot.bytes.load(kRelaxed);
      unpackShape(slot.shape.load(kRelaxed), entry);
      entry->algorithm = slot.algorithm.load(kRelaxed);
      entry->queuedUs = slot.queued.load(kRelaxed);
      entry->startUs = slot.start.load(kRelaxed);
      entry->endUs = slot.end.load(kRelaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (slot.version.load(kRelaxed) == version) return true;
    }
    // A writer holds the slot for a few dozen instructions, unless it was preempted.
    if (attempt % 64 == 63) {
      std::this_thread::yield();
    } else {
      cpuRelax();
    }
  }
  return false;
}

}  // namespace

FlightRecorder::Ring::Ring(size_t depth)
    : slots(depth), mask(depth > 1 && (depth & (depth - 1)) == 0 ? depth - 1 : 0) {}

void FlightRecorder::Ring::read(uint64_t next, std::vector<FlightEntry>* out) const {
  const uint64_t first = next > slots.size() ? next - slots.size() : 1;
  for (uint64_t id = first; id < next; ++id) {
    FlightEntry entry;
    // An entry overwritten meanwhile is skipped.
    if (readSlot(slot(id), &entry) && entry.id == id) out->push_back(entry);
  }
}

FlightRecorder::FlightRecorder(size_t depth) : queued_(depth), inline_(depth) {}

uint64_t FlightRecorder::queued(const CollectiveArgs& args, uint64_t tag, const char* algorithm) {
  if (queued_.slots.empty()) return 0;
  const uint64_t id = lockWriters(writers_);
  // Stamped under the lock, so that the ring's time stamps follow its ids.
  const auto now = static_cast<int64_t>(CycleClock::now());
  writeSlot(queued_.slot(id), id, args, tag, algorithm, FlightState::kQueued, now, 0, 0);
  unlockWriters(writers_, id + 1);
  return id;
}

void FlightRecorder::recordInline(const CollectiveArgs& args, uint64_t tag, const char* algorithm,
                                  uint64_t startTicks, bool ok) {
  if (inline_.slots.empty()) return;
  const auto now = static_cast<int64_t>(CycleClock::now());
  const auto start = static_cast<int64_t>(startTicks);
  // One writer at a time (the running claim's holder): a plain increment.
  const uint64_t id = inlineNext_.load(kRelaxed);
  writeSlot(inline_.slot(id), id, args, tag, algorithm,
            ok ? FlightState::kDone : FlightState::kFailed, start, start, now);
  inlineNext_.store(id + 1, std::memory_order_release);
}

void FlightRecorder::update(uint64_t id, FlightState state,
                            std::atomic<int64_t> FlightSlot::*time) {
  if (id == 0 || queued_.slots.empty()) return;
  const auto now = static_cast<int64_t>(CycleClock::now());
  const uint64_t next = lockWriters(writers_);
  updateSlot(queued_.slot(id), id, state, time, now);
  unlockWriters(writers_, next);
}

void FlightRecorder::running(uint64_t id) { update(id, FlightState::kRunning, &FlightSlot::start); }

void FlightRecorder::finished(uint64_t id, bool ok) {
  update(id, ok ? FlightState::kDone : FlightState::kFailed, &FlightSlot::end);
}

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  std::vector<FlightEntry> out;
  const size_t depth = queued_.slots.size();
  if (depth == 0) return out;
  const uint64_t queuedNext = writers_.load(std::memory_order_acquire) >> 1;
  const uint64_t inlineNext = inlineNext_.load(std::memory_order_acquire);
  std::vector<FlightEntry> queued, inlined;
  queued.reserve(depth);
  inlined.reserve(depth);
  queued_.read(queuedNext, &queued);
  inline_.read(inlineNext, &inlined);
  // Merged by time stamp (ties: the queued ring first). An entry's number is its id in
  // its ring plus the other ring's records before it: those up to the other ring's next
  // unmerged entry, or all of them when none is left. Every record the other ring lost
  // to overwriting is older than any entry among the newest `depth`.
  out.reserve(queued.size() + inlined.size());
  size_t q = 0, i = 0;
  while (q < queued.size() || i < inlined.size()) {
    const bool takeQueued =
        i == inlined.size() || (q < queued.size() && queued[q].queuedUs <= inlined[i].queuedUs);
    if (takeQueued) {
      FlightEntry entry = queued[q++];
      entry.id += (i < inlined.size() ? inlined[i].id : inlineNext) - 1;
      out.push_back(entry);
    } else {
      FlightEntry entry = inlined[i++];
      entry.id += (q < queued.size() ? queued[q].id : queuedNext) - 1;
      out.push_back(entry);
    }
  }
  if (out.size() > depth) out.erase(out.begin(), out.end() - static_cast<ptrdiff_t>(depth));
  const double scale = clock_.scale();
  for (FlightEntry& entry : out) {
    for (int64_t* time : {&entry.queuedUs, &entry.startUs, &entry.endUs}) {
      *time = clock_.toWallUs(static_cast<uint64_t>(*time), scale);
    }
  }
  return out;
}

std::string FlightRecorder::toJson(int rank, int nranks, const std::string& error) const {
  nlohmann::json doc;
  doc["rank"] = rank;
  doc["nranks"] = nranks;
  doc["depth"] = queued_.slots.size();
  doc["error"] = error;
  nlohmann::json list = nlohmann::json::array();
  for (const FlightEntry& entry : snapshot()) {
    const FingerprintFields fields = decodeFingerprint(entry.tag);
    nlohmann::json item;
    item["id"] = entry.id;
    item["seq"] = fields.sequence;
    item["kind"] = std::string(collectiveName(entry.kind));
    item["bytes"] = entry.bytes;
    item["dtype"] = std::string(dataTypeName(entry.dtype));
    item["op"] = std::string(reduceOpName(entry.op));
    if (isRooted(entry.kind)) item["root"] = entry.root;
    if (isPointToPoint(entry.kind)) item["peer"] = entry.peer;
    item["algorithm"] = entry.algorithm;
    item["state"] = flightStateName(entry.state);
    CollectiveArgs args;
    args.kind = entry.kind;
    args.peer = entry.peer;
    item["fingerprint"] = describeOperation(entry.tag, args);
    item["queued_us"] = entry.queuedUs;
    item["start_us"] = entry.startUs;
    item["end_us"] = entry.endUs;
    list.push_back(std::move(item));
  }
  doc["collectives"] = std::move(list);
  return doc.dump(1);
}

std::string flightDumpPath(const std::string& pattern, int rank) {
  std::string path;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'r') {
      path += std::to_string(rank);
      ++i;
    } else {
      path += pattern[i];
    }
  }
  return path;
}

std::string FlightRecorder::dump(const std::string& destination, int rank, int nranks,
                                 const std::string& error, const char* why) const {
  if (destination.empty() || queued_.slots.empty()) return "";
  std::string text = toJson(rank, nranks, error);
  if (destination == "stderr" || destination == "-") {
    std::fprintf(stderr, "collie flight recorder of rank %d (%s):\n%s\n", rank, why, text.c_str());
    return "stderr";
  }
  const std::string path = flightDumpPath(destination, rank);
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    COLLIE_LOG(WARN, ENGINE) << "cannot write the flight recorder to " << path
                             << " (COLLIE_TRACE_DUMP): " << std::strerror(errno);
    return "";
  }
  std::fwrite(text.data(), 1, text.size(), file);
  std::fputc('\n', file);
  std::fclose(file);
  COLLIE_LOG(INFO, ENGINE) << "flight recorder of rank " << rank << " written to " << path << " ("
                           << why << ")";
  return path;
}

}  // namespace collie
