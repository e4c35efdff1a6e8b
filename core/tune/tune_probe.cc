#include "core/tune/tune_probe.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include "core/config/config.h"
#include "core/log/log.h"

namespace collie {
namespace {

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 1);
  }
  return "unknown-cpu";
}

std::string encode(const TuneConstants& c) {
  std::ostringstream out;
  out.precision(9);
  out << c.alphaUs << " " << c.bwGBps << " " << c.source;
  return out.str();
}

bool decode(const std::string& text, TuneConstants* out) {
  std::istringstream in(text);
  TuneConstants c;
  if (!(in >> c.alphaUs >> c.bwGBps >> c.source)) return false;
  if (!(c.alphaUs > 0 && c.alphaUs < 1e6 && c.bwGBps > 0 && c.bwGBps < 1e4)) return false;
  *out = c;
  return true;
}

bool fromConfig(TuneConstants* out) {
  std::string alpha = configString("COLLIE_TUNE_ALPHA_US");
  std::string bw = configString("COLLIE_TUNE_BW_GBPS");
  if (alpha.empty() || bw.empty()) return false;
  if (!decode(alpha + " " + bw + " config", out)) {
    COLLIE_LOG(WARN, INIT) << "ignoring COLLIE_TUNE_ALPHA_US='" << alpha
                           << "' / COLLIE_TUNE_BW_GBPS='" << bw << "': expected positive numbers";
    return false;
  }
  return true;
}

// Round trips of `bytes` between ranks 0 and 1; returns the mean one-way microseconds.
Result<double> pingPong(Engine& engine, size_t bytes, int iterations, Deadline deadline) {
  const int rank = engine.config().rank;
  std::vector<uint8_t> buffer(bytes, 0x5A);
  CollectiveArgs send, recv;
  send.kind = CollectiveKind::kSend;
  recv.kind = CollectiveKind::kRecv;
  send.dtype = recv.dtype = DataType::kUint8;
  send.count = recv.count = bytes;
  send.root = recv.root = 1 - rank;
  auto waitFor = [&](const CollectiveArgs& args) -> Status {
    Result<Work> work = engine.submit(args, buffer.data(), buffer.data());
    if (!work.isOk()) return work.status();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return work->wait(std::max(left, std::chrono::milliseconds(1)));
  };
  Clock::time_point start;
  for (int i = -1; i < iterations; ++i) {  // iteration -1 warms up
    if (i == 0) start = Clock::now();
    COLLIE_RETURN_IF_ERROR(waitFor(rank == 0 ? send : recv));
    COLLIE_RETURN_IF_ERROR(waitFor(rank == 0 ? recv : send));
  }
  double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  return us / (2.0 * iterations);
}

Result<TuneConstants> probe(Engine& engine, Deadline deadline) {
  Result<double> small = pingPong(engine, 8, 20, deadline);
  if (!small.isOk()) return small.status();
  Result<double> large = pingPong(engine, 1 << 20, 3, deadline);
  if (!large.isOk()) return large.status();
  TuneConstants c;
  c.source = "probe";
  c.alphaUs = std::max(*small, 0.1);
  const double transferUs = std::max(*large - *small, 1.0);
  c.bwGBps = (1 << 20) / transferUs / 1000.0;
  return c;
}

Bytes toBytes(const std::string& text) { return Bytes(text.begin(), text.end()); }

}  // namespace

std::string tuneCachePath(const std::string& transport) {
  std::string dir = configString("COLLIE_TUNE_CACHE");
  if (dir == "off" || dir == "0") return "";
  if (dir.empty()) {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    if (xdg && *xdg) {
      dir = std::string(xdg) + "/collie";
    } else if (home && *home) {
      dir = std::string(home) + "/.cache/collie";
    } else {
      return "";
    }
  }
  // The build (version and compile time of this file), the CPU and the transport.
  std::string key = std::string(COLLIE_TUNE_BUILD_ID) + "|" + __DATE__ + " " + __TIME__ + "|" +
                    cpuModel() + "|" + transport;
  char name[64];
  std::snprintf(name, sizeof name, "tune-%016zx-%s.txt", std::hash<std::string>{}(key),
                transport.c_str());
  return dir + "/" + name;
}

bool storedTuneConstants(const std::string& transport, TuneConstants* out) {
  if (fromConfig(out)) return true;
  const std::string path = tuneCachePath(transport);
  if (path.empty()) return false;
  std::ifstream in(path);
  std::string line;
  if (std::getline(in, line) && decode(line, out)) {
    out->source = "cache " + path;
    return true;
  }
  return false;
}

Result<TuneConstants> agreeOnTuneConstants(Engine& engine, Store& store, const std::string& jobKey,
                                           Deadline deadline) {
  const int rank = engine.config().rank;
  const int nranks = engine.config().nranks;
  TuneConstants constants;
  if (nranks < 2) return constants;
  const std::string planKey = jobKey + "/tune/plan";
  const std::string valueKey = jobKey + "/tune/constants";
  if (rank == 0) {
    const std::string path = tuneCachePath(engine.transportTo(1));
    bool known = storedTuneConstants(engine.transportTo(1), &constants);
    if (known && constants.source != "config") constants.source = "cache";
    COLLIE_RETURN_IF_ERROR(store.set(planKey, toBytes(known ? "known" : "probe")));
    if (!known) {
      Result<TuneConstants> probed = probe(engine, deadline);
      if (!probed.isOk()) return probed.status().withContext("tuning probe with rank 1");
      constants = *probed;
      if (!path.empty()) {
        std::string dir = path.substr(0, path.rfind('/'));
        std::string parent = dir.substr(0, dir.rfind('/'));
        ::mkdir(parent.c_str(), 0755);
        ::mkdir(dir.c_str(), 0755);
        std::string tmp = path + ".tmp" + std::to_string(::getpid());
        std::ofstream(tmp) << encode(constants) << "\n";
        if (std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
      }
      COLLIE_LOG(INFO, INIT) << "tuning probe: alpha " << constants.alphaUs << " us, "
                             << constants.bwGBps << " GB/s over " << engine.transportTo(1);
    }
    COLLIE_RETURN_IF_ERROR(store.set(valueKey, toBytes(encode(constants))));
    return constants;
  }
  if (rank == 1) {
    Result<Bytes> plan = store.get(planKey, deadline);
    if (!plan.isOk()) return plan.status().withContext("rank 1 waiting for rank 0's tuning plan");
    if (std::string(plan->begin(), plan->end()) == "probe") {
      Result<TuneConstants> probed = probe(engine, deadline);
      if (!probed.isOk()) return probed.status().withContext("tuning probe with rank 0");
    }
  }
  Result<Bytes> value = store.get(valueKey, deadline);
  if (!value.isOk()) return value.status().withContext("waiting for rank 0's tuning constants");
  if (!decode(std::string(value->begin(), value->end()), &constants)) {
    return remoteError("rank 0 published malformed tuning constants", 0);
  }
  return constants;
}

}  // namespace collie
