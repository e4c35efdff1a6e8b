#include "core/config/config.h"

#include <cctype>
#include <cstdlib>

#include "core/log/log.h"

namespace collie {

const std::vector<Knob>& configKnobs() {
  static const std::vector<Knob> kKnobs = {
      {"COLLIE_DEBUG", "WARN", "log level: NONE, WARN, INFO or TRACE", "NCCL_DEBUG"},
      {"COLLIE_DEBUG_SUBSYS", "ALL",
       "comma-separated subsystems to log (INIT, COLL, NET, SHM, BOOTSTRAP, TUNE, ENGINE, "
       "ALL); a leading ^ excludes",
       "NCCL_DEBUG_SUBSYS"},
      {"COLLIE_TIMEOUT", "300s",
       "deadline of every blocking wait (connect, store, send, recv, collective); "
       "a wait that sees no progress for this long fails naming the silent peer",
       nullptr},
      {"COLLIE_TRANSPORT", "",
       "force one transport for every pair of ranks (shm, ibverbs, ucx, tcp); empty picks per "
       "pair: shm within a host, then ibverbs, ucx, tcp",
       nullptr},
      {"COLLIE_ALGO", "auto", "collective algorithm: auto, ring, tree, chain, oneshot",
       "NCCL_ALGO"},
      {"COLLIE_NCHANNELS", "2",
       "parallel channels (connections and pipelines) per peer; unset, a transport may "
       "cap the planned count (ucx without an RDMA wire: 1)",
       "NCCL_MIN_NCHANNELS"},
      {"COLLIE_CHUNKSIZE", "512K",
       "bytes per pipelined chunk of a collective (unset: the tuner picks)", nullptr},
      {"COLLIE_TUNE_ALPHA_US", "",
       "tuner: microseconds per message (with COLLIE_TUNE_BW_GBPS: no probe)", nullptr},
      {"COLLIE_TUNE_BW_GBPS", "", "tuner: GB/s per link (with COLLIE_TUNE_ALPHA_US: no probe)",
       nullptr},
      {"COLLIE_TUNE_CACHE", "",
       "directory of the tuner's probe cache (default $XDG_CACHE_HOME/collie or "
       "~/.cache/collie; off: always probe)",
       nullptr},
      {"COLLIE_BUFFSIZE", "4M", "bytes of each shared-memory FIFO (per peer, channel, direction)",
       "NCCL_BUFFSIZE"},
      {"COLLIE_SHM_ONESHOT_MAX", "256K",
       "largest per-rank input of a one-shot collective through the shared board when all "
       "ranks share a host (0 disables; must be equal on every rank)",
       nullptr},
      {"COLLIE_SHM_CMA_MAX", "64M",
       "largest out-of-place all-reduce on plain buffers (bytes per rank, above "
       "COLLIE_SHM_CMA_MIN) that goes single-copy through process_vm_readv/writev instead of "
       "the FIFO ring; in-place ones go single-copy at every size (0 disables both)",
       nullptr},
      {"COLLIE_SHM_CMA_MIN", "64K",
       "all-reduces on plain buffers above this many bytes per rank go single-copy through "
       "cross-memory attach even when they fit the one-shot board (not when a host's ranks "
       "outnumber its cores; every rank uses the largest value any rank set)",
       nullptr},
      {"COLLIE_SHM_SPIN", "50us", "how long shm waits spin before blocking on a futex", nullptr},
      {"COLLIE_SOCKET_IFNAME", "",
       "network interfaces for tcp: prefix match, '=' exact, '^' exclude (as NCCL's)",
       "NCCL_SOCKET_IFNAME"},
      {"COLLIE_NSOCKS_PERPEER", "2", "tcp sockets per peer and channel, striped by message",
       "NCCL_NSOCKS_PERTHREAD"},
      {"COLLIE_SOCKET_BUFSIZE", "4M", "SO_SNDBUF/SO_RCVBUF of tcp data sockets", nullptr},
      {"COLLIE_TCP_CONGESTION", "cubic",
       "TCP congestion control of tcp's and UCX's sockets ('system' keeps the default)", nullptr},
      {"COLLIE_IB_HCA", "",
       "InfiniBand/RoCE ports for ibverbs: mlx5_0:1,mlx5_1 (prefix), '=' exact, '^' exclude",
       "NCCL_IB_HCA"},
      {"COLLIE_IB_GID_INDEX", "auto",
       "GID table index for RoCE; auto picks the highest IPv4-mapped GID (RoCE v2)",
       "NCCL_IB_GID_INDEX"},
      {"COLLIE_IB_MR_CACHE", "256", "idle memory registrations the ibverbs transport keeps",
       nullptr},
      {"COLLIE_DEVICE_EMULATION", "0",
       "1: without a GPU, run the device path on the host emulation of the CUDA kernels "
       "(memory from the emulated runtime counts as device memory; for tests)",
       nullptr},
      {"COLLIE_BUSY_POLL", "50us", "how long the engine spins for progress before blocking",
       nullptr},
      {"COLLIE_RECV_REDUCE", "1",
       "1: reduce incoming data straight out of a transport's receive buffers where the "
       "transport can (ucx); 0: receive into staging, then reduce",
       nullptr},
      {"COLLIE_HOST_ID", "",
       "override this rank's host identity (ranks with equal ids use shm between them)", nullptr},
      {"COLLIE_UNIQUE_ID", "", "the job's unique id (set by collie run)", nullptr},
      {"COLLIE_JOB_SECRET", "",
       "32 hex digits: the job secret for ranks started by other launchers", nullptr},
      {"COLLIE_RANK", "", "this process's rank (set by collie run)", nullptr},
      {"COLLIE_WORLD_SIZE", "", "number of ranks (set by collie run)", nullptr},
      {"COLLIE_LOCAL_RANK", "", "rank among the ranks of this host (set by collie run)", nullptr},
      {"COLLIE_MASTER_ADDR", "",
       "host:port of the rendezvous store for ranks started by mpirun on several hosts", nullptr},
      {"COLLIE_TRACE", "", "write a Chrome-trace JSON timeline of collectives to this file",
       nullptr},
      {"COLLIE_TRACE_DEPTH", "64",
       "collectives kept per rank by the flight recorder (0 disables it)", nullptr},
      {"COLLIE_TRACE_DUMP", "",
       "write the flight recorder as JSON on failure and at communicator destruction: "
       "'stderr' or a file path where %r becomes the rank",
       nullptr},
  };
  return kKnobs;
}

namespace {

const Knob* findKnob(std::string_view name) {
  for (const Knob& knob : configKnobs()) {
    if (name == knob.name) return &knob;
  }
  return nullptr;
}

const char* nonEmptyEnv(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

}  // namespace

std::string configString(std::string_view name) {
  const Knob* knob = findKnob(name);
  if (knob == nullptr) return "";
  if (const char* value = nonEmptyEnv(knob->name)) return value;
  if (knob->ncclAlias != nullptr) {
    if (const char* value = nonEmptyEnv(knob->ncclAlias)) return value;
  }
  return knob->defaultValue;
}

std::string configSource(std::string_view name) {
  const Knob* knob = findKnob(name);
  if (knob == nullptr) return "unknown";
  if (nonEmptyEnv(knob->name) != nullptr) return "env";
  if (knob->ncclAlias != nullptr && nonEmptyEnv(knob->ncclAlias) != nullptr) return knob->ncclAlias;
  return "default";
}

Result<int64_t> parseSize(std::string_view text) {
  std::string s(text);
  if (s.empty()) return invalidArgument("empty size");
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str() || errno != 0 || value < 0) {
    return invalidArgument("not a size: '" + s + "'");
  }
  std::string suffix(end);
  int64_t scale = 1;
  if (suffix.empty() || suffix == "B") {
    scale = 1;
  } else if (suffix == "K" || suffix == "k" || suffix == "KB" || suffix == "KiB") {
    scale = int64_t{1} << 10;
  } else if (suffix == "M" || suffix == "m" || suffix == "MB" || suffix == "MiB") {
    scale = int64_t{1} << 20;
  } else if (suffix == "G" || suffix == "g" || suffix == "GB" || suffix == "GiB") {
    scale = int64_t{1} << 30;
  } else {
    return invalidArgument("unknown size suffix in '" + s + "'");
  }
  if (value > INT64_MAX / scale) return invalidArgument("size too large: '" + s + "'");
  return static_cast<int64_t>(value) * scale;
}

Result<std::chrono::microseconds> parseDuration(std::string_view text) {
  std::string s(text);
  if (s.empty()) return invalidArgument("empty duration");
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || errno != 0 || value < 0) {
    return invalidArgument("not a duration: '" + s + "'");
  }
  std::string unit(end);
  double ms = 0;
  if (unit.empty() || unit == "s") {
    ms = value * 1000.0;
  } else if (unit == "ms") {
    ms = value;
  } else if (unit == "us") {
    ms = value / 1000.0;
  } else if (unit == "m" || unit == "min") {
    ms = value * 60000.0;
  } else {
    return invalidArgument("unknown duration unit in '" + s + "' (use us, ms, s or m)");
  }
  return std::chrono::microseconds(static_cast<int64_t>(ms * 1000.0 + 0.5));
}

int64_t configInt(std::string_view name) {
  Result<int64_t> value = parseSize(configString(name));
  if (value.isOk()) return *value;
  const Knob* knob = findKnob(name);
  COLLIE_LOG(WARN, INIT) << "ignoring " << name << "='" << configString(name)
                         << "': " << value.status().message();
  Result<int64_t> fallback = parseSize(knob ? knob->defaultValue : "0");
  return fallback.isOk() ? *fallback : 0;
}

std::chrono::microseconds configDuration(std::string_view name) {
  Result<std::chrono::microseconds> value = parseDuration(configString(name));
  if (value.isOk()) return *value;
  const Knob* knob = findKnob(name);
  COLLIE_LOG(WARN, INIT) << "ignoring " << name << "='" << configString(name)
                         << "': " << value.status().message();
  auto fallback = parseDuration(knob ? knob->defaultValue : "0");
  return fallback.isOk() ? *fallback : std::chrono::microseconds(0);
}

}  // namespace collie
