#include "core/engine/flight_recorder.h"

#include <chrono>
#include <nlohmann/json.hpp>

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

FlightRecorder::FlightRecorder(size_t depth) : ring_(depth) {}

FlightEntry& FlightRecorder::add(const CollectiveArgs& args, uint64_t tag, const char* algorithm,
                                 uint64_t* id) {
  *id = nextId_++;
  FlightEntry& entry = ring_[*id % ring_.size()];
  entry = FlightEntry{};
  entry.id = *id;
  entry.tag = tag;
  entry.bytes = args.count * dataTypeSize(args.dtype);
  entry.kind = args.kind;
  entry.dtype = args.dtype;
  entry.op = args.op;
  entry.root = args.root;
  entry.algorithm = algorithm;
  return entry;
}

uint64_t FlightRecorder::queued(const CollectiveArgs& args, uint64_t tag, const char* algorithm) {
  if (ring_.empty()) return 0;
  const auto now = static_cast<int64_t>(CycleClock::now());
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t id;
  add(args, tag, algorithm, &id).queuedUs = now;
  return id;
}

void FlightRecorder::recordInline(const CollectiveArgs& args, uint64_t tag, const char* algorithm,
                                  uint64_t startTicks, bool ok) {
  if (ring_.empty()) return;
  const auto now = static_cast<int64_t>(CycleClock::now());
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t id;
  FlightEntry& entry = add(args, tag, algorithm, &id);
  entry.queuedUs = entry.startUs = static_cast<int64_t>(startTicks);
  entry.endUs = now;
  entry.state = ok ? FlightState::kDone : FlightState::kFailed;
}

FlightEntry* FlightRecorder::find(uint64_t id) {
  if (id == 0 || ring_.empty()) return nullptr;
  FlightEntry& entry = ring_[id % ring_.size()];
  return entry.id == id ? &entry : nullptr;
}

void FlightRecorder::running(uint64_t id) {
  if (id == 0) return;
  const auto now = static_cast<int64_t>(CycleClock::now());
  std::lock_guard<std::mutex> lock(mutex_);
  if (FlightEntry* entry = find(id)) {
    entry->state = FlightState::kRunning;
    entry->startUs = now;
  }
}

void FlightRecorder::finished(uint64_t id, bool ok) {
  if (id == 0) return;
  const auto now = static_cast<int64_t>(CycleClock::now());
  std::lock_guard<std::mutex> lock(mutex_);
  if (FlightEntry* entry = find(id)) {
    entry->state = ok ? FlightState::kDone : FlightState::kFailed;
    entry->endUs = now;
  }
}

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  std::vector<FlightEntry> out;
  const double scale = clock_.scale();
  std::lock_guard<std::mutex> lock(mutex_);
  if (ring_.empty()) return out;
  const uint64_t first = nextId_ > ring_.size() ? nextId_ - ring_.size() : 1;
  for (uint64_t id = first; id < nextId_; ++id) {
    const FlightEntry& entry = ring_[id % ring_.size()];
    if (entry.id != id) continue;
    out.push_back(entry);
    for (int64_t* time : {&out.back().queuedUs, &out.back().startUs, &out.back().endUs}) {
      *time = clock_.toWallUs(static_cast<uint64_t>(*time), scale);
    }
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
