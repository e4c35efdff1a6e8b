#include "tools/perf_device_bound.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

namespace collie::tools {

Status drainStream(DeviceRuntime& runtime, DeviceStream stream) {
  Result<DeviceEvent> event = runtime.recordEvent(stream);
  if (!event.isOk()) return event.status();
  while (!runtime.queryEvent(*event)) std::this_thread::yield();
  runtime.destroyEvent(*event);
  return Status();
}

Result<double> measureDeviceCopy(DeviceRuntime& runtime, size_t bytes, int reps) {
  Result<DeviceStream> stream = runtime.createStream();
  if (!stream.isOk()) return stream.status();
  Result<void*> src = runtime.allocate(bytes);
  Result<void*> dst = src.isOk() ? runtime.allocate(bytes) : src;
  double best = 0;
  Status status = !src.isOk() ? src.status() : dst.status();
  for (int rep = -1; status.isOk() && rep < reps; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    status = runtime.memcpyAsync(*dst, *src, bytes, *stream);
    if (status.isOk()) status = drainStream(runtime, *stream);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (status.isOk() && rep >= 0 && seconds > 0) best = std::max(best, 2.0 * bytes / seconds);
  }
  if (dst.isOk() && src.isOk()) runtime.free(*dst);
  if (src.isOk()) runtime.free(*src);
  runtime.destroyStream(*stream);
  if (!status.isOk()) return status.withContext("collie perf: timing a device copy");
  return best;
}

DeviceBound groupDevices(const std::vector<std::pair<std::string, double>>& perRank,
                         size_t copyBytes) {
  DeviceBound bound;
  bound.copyBytes = copyBytes;
  std::map<std::string, size_t> index;
  for (const auto& [key, rate] : perRank) {
    auto [it, added] = index.emplace(key, bound.devices.size());
    if (added) bound.devices.push_back(DeviceShare{key, 0, 0});
    DeviceShare& device = bound.devices[it->second];
    device.ranks += 1;
    device.trafficBytesPerSec = std::max(device.trafficBytesPerSec, rate);
  }
  return bound;
}

bool hasDeviceBound(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter ||
         kind == CollectiveKind::kAllGather || kind == CollectiveKind::kAllToAll;
}

double deviceBoundUs(const DeviceBound& bound, const PerfShape& shape, size_t elemSize) {
  const double perRank = static_cast<double>(shape.sendElems + shape.recvElems) * elemSize;
  double us = 0;
  for (const DeviceShare& device : bound.devices) {
    if (device.trafficBytesPerSec <= 0) continue;
    us = std::max(us, device.ranks * perRank / device.trafficBytesPerSec * 1e6);
  }
  return us;
}

namespace {

double fraction(double boundUs, const PerfMeasurement& m) {
  return m.skipped || m.timing.avgUs <= 0 ? 0 : boundUs / m.timing.avgUs;
}

std::string formatFraction(double boundUs, const PerfMeasurement& m) {
  char text[32];
  if (m.skipped || boundUs <= 0) return "     -";
  std::snprintf(text, sizeof text, "%6.3f", fraction(boundUs, m));
  return text;
}

}  // namespace

std::string formatDeviceBound(const PerfArgs& args, const DeviceBound& bound,
                              const std::vector<PerfRow>& rows,
                              const std::vector<double>& boundUs) {
  std::string out = "# Device memory bound (" + std::to_string(bound.copyBytes >> 20) +
                    " MiB device copies, the fastest of each rank's, one rank at a time):\n";
  char line[256];
  for (const DeviceShare& device : bound.devices) {
    if (device.trafficBytesPerSec > 0) {
      std::snprintf(line, sizeof line, "#   %-40s copy %9.1f GB/s of memory traffic, %d rank(s)\n",
                    device.key.c_str(), device.trafficBytesPerSec / 1e9, device.ranks);
    } else {
      std::snprintf(line, sizeof line, "#   %-40s copy not measured (see stderr), %d rank(s)\n",
                    device.key.c_str(), device.ranks);
    }
    out += line;
  }
  if (!hasDeviceBound(args.collective)) {
    return out + "#   (no bound for " + std::string(collectiveName(args.collective)) +
           ": its ranks do not all read and write whole buffers)\n";
  }
  out +=
      "#   bound: every rank's input read and output written once, at its device's copy "
      "rate; fraction = bound time / measured time\n";
  out += "#       size    bound(us)  out-of-place  in-place\n";
  for (size_t i = 0; i < rows.size() && i < boundUs.size(); ++i) {
    std::snprintf(line, sizeof line, "# %10zu %12s %13s %9s\n", rows[i].sizeBytes,
                  formatTime(boundUs[i]).c_str(),
                  formatFraction(boundUs[i], rows[i].outOfPlace).c_str(),
                  formatFraction(boundUs[i], rows[i].inPlace).c_str());
    out += line;
  }
  return out;
}

nlohmann::json deviceBoundJson(const DeviceBound& bound, const std::vector<PerfRow>& rows,
                               const std::vector<double>& boundUs) {
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceShare& device : bound.devices) {
    devices.push_back({{"device", device.key},
                       {"copy_traffic_gbps", device.trafficBytesPerSec / 1e9},
                       {"ranks", device.ranks}});
  }
  nlohmann::json sizes = nlohmann::json::array();
  for (size_t i = 0; i < rows.size() && i < boundUs.size(); ++i) {
    auto of = [&](const PerfMeasurement& m) {
      return m.skipped || boundUs[i] <= 0 ? nlohmann::json(nullptr)
                                          : nlohmann::json(fraction(boundUs[i], m));
    };
    nlohmann::json row = {{"size", rows[i].sizeBytes},
                          {"bound_us", boundUs[i]},
                          {"out_of_place", of(rows[i].outOfPlace)},
                          {"in_place", of(rows[i].inPlace)}};
    sizes.push_back(row);
  }
  return {{"copy_bytes", bound.copyBytes}, {"devices", devices}, {"sizes", sizes}};
}

}  // namespace collie::tools
