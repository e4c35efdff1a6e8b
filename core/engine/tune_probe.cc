#include "core/engine/tune_probe.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include "core/config/config.h"
#include "core/log/log.h"
#include "core/tune/tune_cache.h"

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

bool fromConfig(const TuneKnobs& knobs, TuneConstants* out) {
  const std::string& alpha = knobs.alphaUs;
  const std::string& bw = knobs.bwGBps;
  if (alpha.empty() || bw.empty()) return false;
  if (!decodeTuneConstants(alpha + " " + bw + " config", out)) {
    COLLIE_LOG(WARN, INIT) << "ignoring COLLIE_TUNE_ALPHA_US='" << alpha
                           << "' / COLLIE_TUNE_BW_GBPS='" << bw << "': expected positive numbers";
    return false;
  }
  return true;
}

// `samples` round trips of `bytes` between ranks 0 and 1 after `warmup` untimed ones;
// returns the lower quartile of the one-way microseconds (a round trip halved): load
// from other processes only ever adds time, so up to three quarters of the trips may
// lose the CPU without moving the result, yet one lucky trip cannot set it either.
Result<double> pingPong(Engine& engine, int peer, size_t bytes, int warmup, int samples,
                        Deadline deadline) {
  const int rank = engine.config().rank;
  std::vector<uint8_t> buffer(bytes, 0x5A);
  CollectiveArgs send, recv;
  send.kind = CollectiveKind::kSend;
  recv.kind = CollectiveKind::kRecv;
  send.dtype = recv.dtype = DataType::kUint8;
  send.count = recv.count = bytes;
  send.peer = recv.peer = peer;
  auto waitFor = [&](const CollectiveArgs& args) -> Status {
    Result<Work> work = engine.submit(args, buffer.data(), buffer.data());
    if (!work.isOk()) return work.status();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return work->wait(std::max(left, std::chrono::milliseconds(1)));
  };
  std::vector<double> oneWayUs;
  for (int i = -warmup; i < samples; ++i) {
    const Clock::time_point start = Clock::now();
    COLLIE_RETURN_IF_ERROR(waitFor(rank == 0 ? send : recv));
    COLLIE_RETURN_IF_ERROR(waitFor(rank == 0 ? recv : send));
    if (i >= 0) {
      oneWayUs.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() /
                         2.0);
    }
  }
  const auto quartile = oneWayUs.begin() + oneWayUs.size() / 4;
  std::nth_element(oneWayUs.begin(), quartile, oneWayUs.end());
  return *quartile;
}

// Alpha: the 8-byte one-way time. Beta: 1 MiB over the 1 MiB one-way time less alpha.
// About 45 round trips, a few milliseconds on shm.
// `peer`: the other end (rank 0 probes with it, it with rank 0).
Result<TuneConstants> probe(Engine& engine, int peer, Deadline deadline) {
  constexpr size_t kLarge = size_t{1} << 20;
  Result<double> small = pingPong(engine, peer, 8, 5, 21, deadline);
  if (!small.isOk()) return small.status();
  Result<double> large = pingPong(engine, peer, kLarge, 2, 11, deadline);
  if (!large.isOk()) return large.status();
  TuneConstants c;
  c.source = "probe";
  c.alphaUs = *small;
  const double transferUs = std::max(*large - *small, *large / 2);
  c.bwGBps = static_cast<double>(kLarge) / transferUs / 1000.0;
  return clampConstants(c);
}

Bytes toBytes(const std::string& text) { return Bytes(text.begin(), text.end()); }

// The GNU build id of the object holding this code (libcollie or a static binary), so
// that any relink with other contents invalidates the cache; the version and this
// file's compile time where the linker wrote none.
std::string buildId() {
  struct Search {
    uintptr_t address;
    std::string id;
  } search{reinterpret_cast<uintptr_t>(&buildId), ""};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* search = static_cast<Search*>(data);
        bool mine = false;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && search->address >= start &&
              search->address < start + ph.p_memsz) {
            mine = true;
          }
        }
        if (!mine) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          const auto* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
          const uint8_t* end = p + ph.p_memsz;
          while (p + sizeof(ElfW(Nhdr)) <= end) {
            const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
            const uint8_t* name = p + sizeof(ElfW(Nhdr));
            const uint8_t* desc = name + ((note->n_namesz + 3) & ~3u);
            if (desc + note->n_descsz > end) break;
            if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 &&
                std::memcmp(name, "GNU", 4) == 0) {
              char hex[3];
              for (uint32_t b = 0; b < note->n_descsz; ++b) {
                std::snprintf(hex, sizeof hex, "%02x", desc[b]);
                search->id += hex;
              }
              return 1;
            }
            p = desc + ((note->n_descsz + 3) & ~3u);
          }
        }
        return 1;
      },
      &search);
  if (!search.id.empty()) return search.id;
  return std::string(COLLIE_TUNE_BUILD_ID) + " " + __DATE__ + " " + __TIME__;
}

// Rank 0's probe partners: within its host (rank 1 when it has no other rank there, as
// on one host) and, over several hosts, the lowest rank of another host (-1: none).
int intraPeer(const EngineConfig& config) {
  if (!config.hosts) return 1;
  for (int r = 1; r < config.nranks; ++r) {
    if (config.hosts->hostOf[r] == config.hosts->hostOf[0]) return r;
  }
  return 1;
}
int netPeer(const EngineConfig& config) {
  if (!config.hosts) return -1;
  for (int r = 1; r < config.nranks; ++r) {
    if (config.hosts->hostOf[r] != config.hosts->hostOf[0]) return r;
  }
  return -1;
}

bool netFromConfig(const TuneKnobs& knobs, TuneConstants* out) {
  const std::string& alpha = knobs.netAlphaUs;
  const std::string& bw = knobs.netBwGBps;
  if (alpha.empty() || bw.empty()) return false;
  TuneConstants net;
  if (!decodeTuneConstants(alpha + " " + bw + " config", &net)) return false;
  out->netAlphaUs = net.alphaUs;
  out->netBwGBps = net.bwGBps;
  return true;
}

// The inter-host constants, agreed like the others: rank 0 takes them from config or
// probes its net peer (never cached: hosts in namespaces share a host name, and the
// link's rate is the job's, not the build's), then publishes them ("none" on one host).
Status agreeOnNetConstants(Engine& engine, Store& store, const std::string& jobKey,
                           Deadline deadline, TuneConstants* constants) {
  const EngineConfig& config = engine.config();
  const int peer = netPeer(config);
  if (peer < 0) return Status();
  const std::string planKey = jobKey + "/tune/net-plan";
  const std::string valueKey = jobKey + "/tune/net";
  if (config.rank == 0) {
    TuneConstants net = *constants;
    const bool known = netFromConfig(config.tune, &net);
    COLLIE_RETURN_IF_ERROR(store.set(planKey, toBytes(known ? "known" : "probe")));
    if (!known && peer == intraPeer(config)) {
      net.netAlphaUs = constants->alphaUs;  // the first probe crossed between hosts
      net.netBwGBps = constants->bwGBps;
    } else if (!known) {
      Result<TuneConstants> probed = probe(engine, peer, deadline);
      if (!probed.isOk()) {
        return probed.status().withContext("tuning probe with rank " + std::to_string(peer));
      }
      net.netAlphaUs = probed->alphaUs;
      net.netBwGBps = probed->bwGBps;
      COLLIE_LOG(INFO, TUNE) << "tuning probe between hosts: alpha " << net.netAlphaUs << " us, "
                             << net.netBwGBps << " GB/s with rank " << peer << " over "
                             << engine.transportTo(peer);
    }
    TuneConstants exact;
    const std::string text =
        encodeTuneConstants(TuneConstants{net.netAlphaUs, net.netBwGBps, "net"});
    decodeTuneConstants(text, &exact);
    constants->netAlphaUs = exact.alphaUs;
    constants->netBwGBps = exact.bwGBps;
    return store.set(valueKey, toBytes(text));
  }
  if (config.rank == peer && peer != intraPeer(config)) {
    Result<Bytes> plan = store.get(planKey, deadline);
    if (!plan.isOk()) return plan.status().withContext("waiting for rank 0's network probe plan");
    if (std::string(plan->begin(), plan->end()) == "probe") {
      Result<TuneConstants> probed = probe(engine, 0, deadline);
      if (!probed.isOk()) return probed.status().withContext("tuning probe with rank 0");
    }
  }
  Result<Bytes> value = store.get(valueKey, deadline);
  if (!value.isOk()) return value.status().withContext("waiting for rank 0's network constants");
  TuneConstants net;
  if (!decodeTuneConstants(std::string(value->begin(), value->end()), &net)) {
    return remoteError("rank 0 published malformed network constants", 0);
  }
  constants->netAlphaUs = net.alphaUs;
  constants->netBwGBps = net.bwGBps;
  return Status();
}

// What, besides the constants, decides a plan: every rank must have the same.
std::string limitsText(const EngineConfig& config) {
  return std::string("algorithm=") + std::string(algorithmName(config.algorithm)) +
         " chunk=" + std::to_string(config.chunkBytes) +
         " channels=" + std::to_string(config.nchannels) + (config.channelsFixed ? "(fixed)" : "");
}

}  // namespace

std::string encodeTuneConstants(const TuneConstants& c) {
  std::ostringstream out;
  out.precision(17);  // round-trips a double exactly
  out << c.alphaUs << " " << c.bwGBps << " " << (c.source.empty() ? "unknown" : c.source);
  return out.str();
}

bool decodeTuneConstants(const std::string& text, TuneConstants* out) {
  std::istringstream in(text);
  TuneConstants c;
  if (!(in >> c.alphaUs >> c.bwGBps >> c.source)) return false;
  if (!(c.alphaUs > 0 && c.alphaUs < 1e6 && c.bwGBps > 0 && c.bwGBps < 1e4)) return false;
  *out = clampConstants(c);
  return true;
}

std::string tuneCachePath(const TuneKnobs& knobs, const std::string& transport) {
  std::string dir = knobs.cacheDir;
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
  // The build, the host, its CPUs and the transport: a rebuild or other hardware (or a
  // home directory shared by several hosts) gets its own file and probes again.
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string key = buildId() + "|" + host + "|" + cpuModel() + "|" +
                    std::to_string(::sysconf(_SC_NPROCESSORS_ONLN)) + "|" + transport;
  char name[64];
  std::snprintf(name, sizeof name, "tune-%016zx-%s.txt", std::hash<std::string>{}(key),
                transport.c_str());
  return dir + "/" + name;
}

bool storedTuneConstants(const TuneKnobs& knobs, const std::string& transport, TuneConstants* out) {
  if (fromConfig(knobs, out)) return true;
  const std::string path = tuneCachePath(knobs, transport);
  if (path.empty()) return false;
  std::ifstream in(path);
  std::string line;
  if (std::getline(in, line) && decodeTuneConstants(line, out)) {
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
  const std::string limitsKey = jobKey + "/tune/limits";
  const std::string limits = limitsText(engine.config());
  const int partner = intraPeer(engine.config());
  if (rank == 0) {
    const TuneKnobs& knobs = engine.config().tune;
    const std::string path = tuneCachePath(knobs, engine.transportTo(partner));
    bool known = storedTuneConstants(knobs, engine.transportTo(partner), &constants);
    if (known && constants.source != "config") constants.source = "cache";
    COLLIE_RETURN_IF_ERROR(store.set(planKey, toBytes(known ? "known" : "probe")));
    if (!known) {
      Result<TuneConstants> probed = probe(engine, partner, deadline);
      if (!probed.isOk()) {
        return probed.status().withContext("tuning probe with rank " + std::to_string(partner));
      }
      constants = *probed;
      if (!path.empty()) writeTuneCache(path, encodeTuneConstants(constants));
      COLLIE_LOG(INFO, TUNE) << "tuning probe: alpha " << constants.alphaUs << " us, "
                             << constants.bwGBps << " GB/s with rank " << partner << " over "
                             << engine.transportTo(partner);
    }
    // Rank 0 uses what the others decode, to the bit.
    const std::string text = encodeTuneConstants(constants);
    decodeTuneConstants(text, &constants);
    COLLIE_RETURN_IF_ERROR(store.set(limitsKey, toBytes(limits)));
    COLLIE_RETURN_IF_ERROR(store.set(valueKey, toBytes(text)));
    COLLIE_RETURN_IF_ERROR(agreeOnNetConstants(engine, store, jobKey, deadline, &constants));
    return constants;
  }
  if (rank == partner) {
    Result<Bytes> plan = store.get(planKey, deadline);
    if (!plan.isOk()) {
      return plan.status().withContext("rank " + std::to_string(rank) +
                                       " waiting for rank 0's tuning plan");
    }
    if (std::string(plan->begin(), plan->end()) == "probe") {
      Result<TuneConstants> probed = probe(engine, 0, deadline);
      if (!probed.isOk()) return probed.status().withContext("tuning probe with rank 0");
    }
  }
  Result<Bytes> value = store.get(valueKey, deadline);
  if (!value.isOk()) return value.status().withContext("waiting for rank 0's tuning constants");
  if (!decodeTuneConstants(std::string(value->begin(), value->end()), &constants)) {
    return remoteError("rank 0 published malformed tuning constants", 0);
  }
  // Equal constants decide alike only under equal limits; a rank that would plan
  // differently must not start (its peers would wait for messages that never come).
  Result<Bytes> theirs = store.get(limitsKey, deadline);
  if (!theirs.isOk()) return theirs.status().withContext("waiting for rank 0's tuning limits");
  const std::string rootLimits(theirs->begin(), theirs->end());
  if (rootLimits != limits) {
    return mismatchError("rank " + std::to_string(rank) + " would plan collectives with " + limits +
                             " but rank 0 with " + rootLimits +
                             ": give every rank the same COLLIE_ALGO, COLLIE_CHUNKSIZE and "
                             "COLLIE_NCHANNELS (or Options)",
                         0);
  }
  COLLIE_RETURN_IF_ERROR(agreeOnNetConstants(engine, store, jobKey, deadline, &constants));
  return constants;
}

Result<int> agreeOnPlanChannels(Engine& engine, Store& store, const std::string& jobKey,
                                Deadline deadline) {
  const EngineConfig& config = engine.config();
  if (config.nranks < 2 || config.channelsFixed) return config.nchannels;
  const std::string key = jobKey + "/tune/channels";
  if (config.rank == 0) {
    const int channels = engine.usefulChannels();
    COLLIE_RETURN_IF_ERROR(store.set(key, toBytes(std::to_string(channels))));
    return channels;
  }
  Result<Bytes> value = store.get(key, deadline);
  if (!value.isOk()) return value.status().withContext("waiting for rank 0's channel count");
  const std::string text(value->begin(), value->end());
  char* end = nullptr;
  const long channels = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || channels < 1 || channels > config.nchannels) {
    return remoteError("rank 0 published channel count '" + text + "', expected 1.." +
                           std::to_string(config.nchannels),
                       0);
  }
  if (channels != engine.usefulChannels()) {
    COLLIE_LOG(INFO, TUNE) << "rank " << config.rank << " plans with rank 0's " << channels
                           << " channel(s) (its own transports would use "
                           << engine.usefulChannels() << ")";
  }
  return static_cast<int>(channels);
}

}  // namespace collie
