#include "core/engine/flight_recorder.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/engine/fingerprint.h"

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

// kind | dtype << 8 | op << 16 | state << 24 | root << 32, in one word.
uint64_t packShape(const CollectiveArgs& args, FlightState state) {
  return static_cast<uint64_t>(args.kind) | static_cast<uint64_t>(args.dtype) << 8 |
         static_cast<uint64_t>(args.op) << 16 | static_cast<uint64_t>(state) << 24 |
         static_cast<uint64_t>(static_cast<uint32_t>(args.root)) << 32;
}

uint64_t withState(uint64_t shape, FlightState state) {
  return (shape & ~(uint64_t{0xff} << 24)) | static_cast<uint64_t>(state) << 24;
}

void unpackShape(uint64_t shape, FlightEntry* entry) {
  entry->kind = static_cast<CollectiveKind>(shape & 0xff);
  entry->dtype = static_cast<DataType>(shape >> 8 & 0xff);
  entry->op = static_cast<ReduceOp>(shape >> 16 & 0xff);
  entry->state = static_cast<FlightState>(shape >> 24 & 0xff);
  entry->root = static_cast<int32_t>(static_cast<uint32_t>(shape >> 32));
}

constexpr auto kRelaxed = std::memory_order_relaxed;
// Tries to copy one slot before a snapshot leaves it out.
constexpr int kReadAttempts = 1 << 16;

uint64_t lockSlot(FlightSlot& slot) {
  uint64_t version = slot.version.load(kRelaxed);
  while ((version & 1) != 0 || !slot.version.compare_exchange_weak(
                                   version, version + 1, std::memory_order_acquire, kRelaxed)) {
    cpuRelax();
    version = slot.version.load(kRelaxed);
  }
  // The odd version is visible before any field written after it (a reader that sees
  // one of those fields sees the version move).
  std::atomic_thread_fence(std::memory_order_release);
  return version + 1;
}

void unlockSlot(FlightSlot& slot, uint64_t version) {
  slot.version.store(version + 1, std::memory_order_release);
}

// A new entry `id`; ignored if a newer id already took the slot.
void writeSlot(FlightSlot& slot, uint64_t id, const CollectiveArgs& args, uint64_t tag,
               const char* algorithm, FlightState state, int64_t queued, int64_t start,
               int64_t end) {
  const uint64_t version = lockSlot(slot);
  if (slot.id.load(kRelaxed) < id) {  // else a newer collective overtook this one
    slot.id.store(id, kRelaxed);
    slot.tag.store(tag, kRelaxed);
    slot.bytes.store(args.count * dataTypeSize(args.dtype), kRelaxed);
    slot.shape.store(packShape(args, state), kRelaxed);
    slot.algorithm.store(algorithm, kRelaxed);
    slot.queued.store(queued, kRelaxed);
    slot.start.store(start, kRelaxed);
    slot.end.store(end, kRelaxed);
  }
  unlockSlot(slot, version);
}

// Sets the state of entry `id` and one time stamp to now, unless it was overwritten.
void updateSlot(FlightSlot& slot, uint64_t id, FlightState state,
                std::atomic<int64_t> FlightSlot::*time) {
  const auto now = static_cast<int64_t>(CycleClock::now());
  const uint64_t version = lockSlot(slot);
  if (slot.id.load(kRelaxed) == id) {
    slot.shape.store(withState(slot.shape.load(kRelaxed), state), kRelaxed);
    (slot.*time).store(now, kRelaxed);
  }
  unlockSlot(slot, version);
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

FlightRecorder::FlightRecorder(size_t depth) : ring_(depth) {}

uint64_t FlightRecorder::queued(const CollectiveArgs& args, uint64_t tag, const char* algorithm) {
  if (ring_.empty()) return 0;
  const auto now = static_cast<int64_t>(CycleClock::now());
  const uint64_t id = nextId_.fetch_add(1, kRelaxed);
  writeSlot(ring_[id % ring_.size()], id, args, tag, algorithm, FlightState::kQueued, now, 0, 0);
  return id;
}

void FlightRecorder::recordInline(const CollectiveArgs& args, uint64_t tag, const char* algorithm,
                                  uint64_t startTicks, bool ok) {
  if (ring_.empty()) return;
  const auto now = static_cast<int64_t>(CycleClock::now());
  const auto start = static_cast<int64_t>(startTicks);
  const uint64_t id = nextId_.fetch_add(1, kRelaxed);
  writeSlot(ring_[id % ring_.size()], id, args, tag, algorithm,
            ok ? FlightState::kDone : FlightState::kFailed, start, start, now);
}

void FlightRecorder::running(uint64_t id) {
  if (id == 0 || ring_.empty()) return;
  updateSlot(ring_[id % ring_.size()], id, FlightState::kRunning, &FlightSlot::start);
}

void FlightRecorder::finished(uint64_t id, bool ok) {
  if (id == 0 || ring_.empty()) return;
  updateSlot(ring_[id % ring_.size()], id, ok ? FlightState::kDone : FlightState::kFailed,
             &FlightSlot::end);
}

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  std::vector<FlightEntry> out;
  if (ring_.empty()) return out;
  const double scale = clock_.scale();
  const uint64_t next = nextId_.load(std::memory_order_acquire);
  const uint64_t first = next > ring_.size() ? next - ring_.size() : 1;
  out.reserve(next - first);
  for (uint64_t id = first; id < next; ++id) {
    FlightEntry entry;
    // An id not yet written (its writer is between taking it and locking the slot) or
    // already overwritten is skipped.
    if (!readSlot(ring_[id % ring_.size()], &entry) || entry.id != id) continue;
    for (int64_t* time : {&entry.queuedUs, &entry.startUs, &entry.endUs}) {
      *time = clock_.toWallUs(static_cast<uint64_t>(*time), scale);
    }
    out.push_back(entry);
  }
  return out;
}

std::string FlightRecorder::toJson(int rank, int nranks, const std::string& error) const {
  nlohmann::json doc;
  doc["rank"] = rank;
  doc["nranks"] = nranks;
  doc["depth"] = ring_.size();
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
    item["root"] = entry.root;
    item["algorithm"] = entry.algorithm;
    item["state"] = flightStateName(entry.state);
    item["fingerprint"] = describeFingerprint(entry.tag);
    item["queued_us"] = entry.queuedUs;
    item["start_us"] = entry.startUs;
    item["end_us"] = entry.endUs;
    list.push_back(std::move(item));
  }
  doc["collectives"] = std::move(list);
  return doc.dump(1);
}

}  // namespace collie
