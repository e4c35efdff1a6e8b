#include "core/config/config.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

#include "core/log/log.h"

namespace collie {

namespace {

constexpr int64_t kMs = 1000;  // microseconds
constexpr int64_t kSecond = 1000 * kMs;
constexpr int64_t kDay = 86400 * kSecond;
constexpr int64_t kKiB = int64_t{1} << 10;
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kTiB = int64_t{1} << 40;

Knob text(const char* name, const char* def, const char* meaning, const char* alias = nullptr) {
  return Knob{name, def, meaning, alias};
}
Knob choice(const char* name, const char* def, const char* choices, const char* meaning,
            const char* alias = nullptr) {
  return Knob{name, def, meaning, alias, KnobKind::kChoice, 0, 0, choices};
}
Knob integer(const char* name, const char* def, int64_t min, int64_t max, const char* meaning,
             const char* alias = nullptr) {
  return Knob{name, def, meaning, alias, KnobKind::kInteger, min, max};
}
Knob duration(const char* name, const char* def, int64_t minUs, int64_t maxUs,
              const char* meaning) {
  return Knob{name, def, meaning, nullptr, KnobKind::kDuration, minUs, maxUs};
}
Knob decimal(const char* name, int64_t min, int64_t max, const char* meaning) {
  return Knob{name, "", meaning, nullptr, KnobKind::kDecimal, min, max};
}
Knob everyRankAlike(Knob knob) {
  knob.mustMatch = true;
  return knob;
}
Knob outputPath(const char* name, const char* keyword, const char* meaning) {
  return Knob{name, "", meaning, nullptr, KnobKind::kOutputPath, 0, 0, nullptr, keyword};
}

}  // namespace

const std::vector<Knob>& configKnobs() {
  static const std::vector<Knob> kKnobs = {
      choice("COLLIE_DEBUG", "WARN", "NONE,WARN,INFO,TRACE", "log level: NONE, WARN, INFO or TRACE",
             "NCCL_DEBUG"),
      Knob{"COLLIE_DEBUG_SUBSYS", "ALL",
           "comma-separated subsystems to log (INIT, COLL, NET, SHM, BOOTSTRAP, TUNE, ENGINE, "
           "ALL); a leading ^ excludes",
           "NCCL_DEBUG_SUBSYS", KnobKind::kSubsystems, 0, 0,
           "INIT,COLL,NET,SHM,BOOTSTRAP,TUNE,ENGINE,ALL"},
      duration("COLLIE_TIMEOUT", "300s", kMs, 365 * kDay,
               "deadline of every blocking wait (connect, store, send, recv, collective); "
               "a wait that sees no progress for this long fails naming the silent peer"),
      choice("COLLIE_TRANSPORT", "", "shm,ibverbs,ucx,tcp,cuda_ipc",
             "force one transport for every pair of ranks (shm, ibverbs, ucx, tcp); empty picks "
             "per pair: shm within a host, then ibverbs, ucx, tcp"),
      choice("COLLIE_ALGO", "auto", "auto,ring,tree,chain,oneshot",
             "collective algorithm: auto, ring, tree, chain, oneshot", "NCCL_ALGO"),
      integer("COLLIE_NCHANNELS", "2", 1, 16,
              "parallel channels (connections and pipelines) per peer; unset, a transport may "
              "cap the planned count (ucx without an RDMA wire: 1)",
              "NCCL_MIN_NCHANNELS"),
      integer("COLLIE_CHUNKSIZE", "512K", 64, kGiB,
              "bytes per pipelined chunk of a collective (unset: the tuner picks)"),
      decimal("COLLIE_TUNE_ALPHA_US", 0, 1000000,
              "tuner: microseconds per message (with COLLIE_TUNE_BW_GBPS: no probe)"),
      decimal("COLLIE_TUNE_BW_GBPS", 0, 1000000,
              "tuner: GB/s per link (with COLLIE_TUNE_ALPHA_US: no probe)"),
      text("COLLIE_TUNE_CACHE", "",
           "directory of the tuner's probe cache (default $XDG_CACHE_HOME/collie or "
           "~/.cache/collie; off: always probe)"),
      integer("COLLIE_BUFFSIZE", "4M", 4 * kKiB, kGiB,
              "bytes of each shared-memory FIFO (per peer, channel, direction)", "NCCL_BUFFSIZE"),
      everyRankAlike(
          integer("COLLIE_SHM_ONESHOT_MAX", "256K", 0, 16 * kKiB * kKiB,
                  "largest per-rank input of a one-shot collective through the shared board when "
                  "all ranks share a host (0 disables; must be equal on every rank)")),
      integer("COLLIE_SHM_CMA_MAX", "64M", 0, kTiB,
              "largest out-of-place all-reduce on plain buffers (bytes per rank, above "
              "COLLIE_SHM_CMA_MIN) that goes single-copy through process_vm_readv/writev "
              "instead of the FIFO ring; in-place ones go single-copy at every size (0 "
              "disables both)"),
      integer("COLLIE_SHM_CMA_MIN", "64K", 0, kTiB,
              "all-reduces on plain buffers above this many bytes per rank go single-copy "
              "through cross-memory attach even when they fit the one-shot board (not when a "
              "host's ranks outnumber its cores; every rank uses the largest value any rank "
              "set)"),
      duration("COLLIE_SHM_SPIN", "50us", 0, kSecond,
               "how long shm waits spin before blocking on a futex"),
      text("COLLIE_SOCKET_IFNAME", "",
           "network interfaces for tcp: prefix match, '=' exact, '^' exclude (as NCCL's)",
           "NCCL_SOCKET_IFNAME"),
      everyRankAlike(integer("COLLIE_NSOCKS_PERPEER", "2", 1, 16,
                             "tcp sockets per peer and channel, striped by message",
                             "NCCL_NSOCKS_PERTHREAD")),
      integer("COLLIE_SOCKET_BUFSIZE", "4M", 0, kGiB,
              "SO_SNDBUF/SO_RCVBUF of tcp data sockets (0: the system's)"),
      text("COLLIE_TCP_CONGESTION", "cubic",
           "TCP congestion control of tcp's and UCX's sockets ('system' keeps the default)"),
      text("COLLIE_IB_HCA", "",
           "InfiniBand/RoCE ports for ibverbs: mlx5_0:1,mlx5_1 (prefix), '=' exact, '^' exclude",
           "NCCL_IB_HCA"),
      Knob{"COLLIE_IB_GID_INDEX", "auto",
           "GID table index for RoCE; auto picks the highest IPv4-mapped GID (RoCE v2)",
           "NCCL_IB_GID_INDEX", KnobKind::kAutoOrInteger, 0, 255},
      integer("COLLIE_IB_MR_CACHE", "256", 1, 1 << 20,
              "idle memory registrations the ibverbs transport keeps"),
      everyRankAlike(
          choice("COLLIE_DEVICE_EMULATION", "0", "0,1",
                 "1: without a GPU, run the device path on the host emulation of the CUDA kernels "
                 "(memory from the emulated runtime counts as device memory; for tests)")),
      duration("COLLIE_BUSY_POLL", "50us", 0, kSecond,
               "how long the engine spins for progress before blocking"),
      everyRankAlike(choice(
          "COLLIE_ROOT_AGREEMENT", "1", "0,1",
          "1: broadcast (after its data) and reduce (before it) run a barrier whose messages "
          "carry the root, so ranks that name different roots all fail with Mismatch; 0: skip "
          "it (a broadcast root then returns without waiting for the receivers, and differing "
          "roots can go unnoticed)")),
      choice("COLLIE_RECV_REDUCE", "1", "0,1",
             "1: reduce incoming data straight out of a transport's receive buffers where the "
             "transport can (ucx); 0: receive into staging, then reduce"),
      text("COLLIE_HOST_ID", "",
           "override this rank's host identity (ranks with equal ids use shm between them)"),
      Knob{"COLLIE_UNIQUE_ID", "", "the job's unique id (set by collie run; holds the secret)",
           nullptr, KnobKind::kHiddenText},
      Knob{"COLLIE_JOB_SECRET", "",
           "32 hex digits: the job secret for ranks started by other launchers", nullptr,
           KnobKind::kSecret},
      integer("COLLIE_RANK", "", 0, 1 << 24, "this process's rank (set by collie run)"),
      integer("COLLIE_WORLD_SIZE", "", 1, 1 << 24, "number of ranks (set by collie run)"),
      integer("COLLIE_LOCAL_RANK", "", 0, 1 << 24,
              "rank among the ranks of this host (set by collie run)"),
      text("COLLIE_MASTER_ADDR", "",
           "host:port of the rendezvous store for ranks started by mpirun on several hosts"),
      duration("COLLIE_STORE_HANDSHAKE_TIMEOUT", "5s", 100 * kMs, 120 * kSecond,
               "the store drops a connection that has not sent a valid job secret within this "
               "long"),
      integer("COLLIE_STORE_MAX_PENDING", "256", 1, 65536,
              "unauthenticated connections the store holds at once; a new one evicts the oldest"),
      integer("COLLIE_STORE_MAX_PENDING_PER_HOST", "32", 1, 65536,
              "unauthenticated connections the store holds per source address; a new one "
              "evicts that address's oldest"),
      text("COLLIE_STORE_BIND", "",
           "address the store of a torchrun/mpirun job listens on (default: MASTER_ADDR's or "
           "COLLIE_MASTER_ADDR's when local, else COLLIE_SOCKET_IFNAME's interface, else all; "
           "'*' for all)"),
      outputPath("COLLIE_TRACE", nullptr,
                 "write a Chrome-trace JSON timeline of collectives to this file"),
      integer("COLLIE_TRACE_DEPTH", "64", 0, 1 << 20,
              "collectives kept per rank by the flight recorder (0 disables it)"),
      outputPath("COLLIE_TRACE_DUMP", "stderr",
                 "write the flight recorder as JSON on failure and at communicator destruction: "
                 "'stderr' or a file path where %r becomes the rank"),
  };
  return kKnobs;
}

const Knob* findKnob(std::string_view name) {
  for (const Knob& knob : configKnobs()) {
    if (name == knob.name) return &knob;
  }
  return nullptr;
}

namespace {

const char* nonEmptyEnv(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

}  // namespace

namespace {

// The knob's value and where it came from: its variable, else an alias value collie
// accepts (one it does not was meant for NCCL), else the default.
std::pair<std::string, std::string> resolve(const Knob& knob) {
  if (const char* value = nonEmptyEnv(knob.name)) return {value, "env"};
  if (knob.ncclAlias != nullptr) {
    const char* value = nonEmptyEnv(knob.ncclAlias);
    if (value != nullptr && checkKnobValue(knob, value).isOk()) return {value, knob.ncclAlias};
  }
  return {knob.defaultValue, "default"};
}

}  // namespace

std::string configString(std::string_view name) {
  const Knob* knob = findKnob(name);
  return knob == nullptr ? "" : resolve(*knob).first;
}

std::string configSource(std::string_view name) {
  const Knob* knob = findKnob(name);
  return knob == nullptr ? "unknown" : resolve(*knob).second;
}

Result<int64_t> parseSize(std::string_view text) {
  std::string s(text);
  if (s.empty()) return invalidArgument("empty size");
  if (!std::isdigit(static_cast<unsigned char>(s[0]))) {
    return invalidArgument("not a size: '" + s + "'");
  }
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str() || errno != 0 || value < 0) {
    return invalidArgument(errno == ERANGE ? "size too large: '" + s + "'"
                                           : "not a size: '" + s + "'");
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
  if (!std::isdigit(static_cast<unsigned char>(s[0])) && s[0] != '.') {
    return invalidArgument("not a duration: '" + s + "'");
  }
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || errno != 0 || !(value >= 0) || !std::isfinite(value)) {
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
  } else if (unit == "h") {
    ms = value * 3600000.0;
  } else if (unit == "d") {
    ms = value * 86400000.0;
  } else {
    return invalidArgument("unknown duration unit in '" + s + "' (use us, ms, s, m, h or d)");
  }
  // 100 years: far below where microseconds, or a deadline in nanoseconds, overflow.
  constexpr double kMaxMs = 100.0 * 365 * 86400000.0;
  if (ms > kMaxMs) return invalidArgument("duration too long: '" + s + "'");
  return std::chrono::microseconds(static_cast<int64_t>(ms * 1000.0 + 0.5));
}

namespace {

std::string upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

bool inList(std::string_view list, std::string_view word) {
  const std::string wanted = upper(word);
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string_view item = list.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (upper(item) == wanted) return true;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return false;
}

std::string listWords(std::string_view list) {
  std::string out;
  for (char c : list) out += c == ',' ? std::string(", ") : std::string(1, c);
  return out;
}

std::string durationText(int64_t us) {
  if (us == 0) return "0";
  if (us % kDay == 0) return std::to_string(us / kDay) + "d";
  if (us % kSecond == 0) return std::to_string(us / kSecond) + "s";
  if (us % kMs == 0) return std::to_string(us / kMs) + "ms";
  return std::to_string(us) + "us";
}

std::string sizeText(int64_t value) {
  if (value >= kKiB) {
    if (value % kTiB == 0) return std::to_string(value / kTiB) + "T";
    if (value % kGiB == 0) return std::to_string(value / kGiB) + "G";
    if (value % (kKiB * kKiB) == 0) return std::to_string(value / (kKiB * kKiB)) + "M";
    if (value % kKiB == 0) return std::to_string(value / kKiB) + "K";
  }
  return std::to_string(value);
}

// Why `value` is not accepted, or "" when it is.
std::string rejection(const Knob& knob, std::string_view value) {
  switch (knob.kind) {
    case KnobKind::kText:
    case KnobKind::kHiddenText:
      return "";
    case KnobKind::kChoice:
      return inList(knob.choices, value) ? "" : "not one of the choices";
    case KnobKind::kSubsystems: {
      std::string_view list = value;
      if (!list.empty() && list.front() == '^') list.remove_prefix(1);
      size_t start = 0;
      while (start <= list.size()) {
        size_t comma = list.find(',', start);
        std::string_view item = list.substr(
            start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
        if (!inList(knob.choices, item)) return "unknown subsystem '" + std::string(item) + "'";
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
      return "";
    }
    case KnobKind::kAutoOrInteger:
      if (upper(value) == "AUTO") return "";
      [[fallthrough]];
    case KnobKind::kInteger: {
      Result<int64_t> parsed = parseSize(value);
      if (!parsed.isOk()) return parsed.status().message();
      if (*parsed < knob.min || *parsed > knob.max) return "out of range";
      return "";
    }
    case KnobKind::kDecimal: {
      std::string s(value);
      char* end = nullptr;
      errno = 0;
      double parsed = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0' || errno != 0 || !std::isfinite(parsed)) return "not a number";
      if (parsed <= static_cast<double>(knob.min) || parsed > static_cast<double>(knob.max)) {
        return "out of range";
      }
      return "";
    }
    case KnobKind::kDuration: {
      Result<std::chrono::microseconds> parsed = parseDuration(value);
      if (!parsed.isOk()) return parsed.status().message();
      if (parsed->count() < knob.min || parsed->count() > knob.max) return "out of range";
      return "";
    }
    case KnobKind::kOutputPath: {
      if (knob.keyword != nullptr && value == knob.keyword) return "";
      std::string path(value);
      size_t slash = path.rfind('/');
      std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
      if (slash + 1 == path.size()) return "names a directory, not a file";
      if (::access(dir.c_str(), W_OK | X_OK) != 0) {
        return "cannot write in " + dir + " (" + std::strerror(errno) + ")";
      }
      return "";
    }
    case KnobKind::kSecret: {
      if (value.size() != 32) return std::to_string(value.size()) + " characters";
      for (char c : value) {
        if (!std::isxdigit(static_cast<unsigned char>(c))) return "not all hex digits";
      }
      return "";
    }
  }
  return "";
}

}  // namespace

std::string knobRange(const Knob& knob) {
  switch (knob.kind) {
    case KnobKind::kText:
    case KnobKind::kHiddenText:
      return "any text";
    case KnobKind::kChoice:
      return std::string("one of ") + listWords(knob.choices) +
             (knob.defaultValue[0] == '\0' ? " (or empty)" : "");
    case KnobKind::kSubsystems:
      return std::string("comma-separated subsystems from ") + listWords(knob.choices) +
             ", optionally led by ^";
    case KnobKind::kInteger:
      return sizeText(knob.min) + ".." + sizeText(knob.max) + " (K, M, G suffixes allowed)";
    case KnobKind::kAutoOrInteger:
      return "auto or " + std::to_string(knob.min) + ".." + std::to_string(knob.max);
    case KnobKind::kDecimal:
      return "a number above " + std::to_string(knob.min) + ", at most " + std::to_string(knob.max);
    case KnobKind::kDuration:
      return durationText(knob.min) + ".." + durationText(knob.max) +
             " (a number of seconds, or with a unit: us, ms, s, m, h, d)";
    case KnobKind::kOutputPath:
      return std::string("a file path in a writable directory") +
             (knob.keyword != nullptr ? std::string(" or '") + knob.keyword + "'" : "");
    case KnobKind::kSecret:
      return "32 hex digits";
  }
  return "";
}

Status checkKnobValue(const Knob& knob, std::string_view value) {
  if (value.empty()) return Status();  // unset: the default applies
  std::string why = rejection(knob, value);
  if (why.empty()) return Status();
  const bool secret = knob.kind == KnobKind::kSecret || knob.kind == KnobKind::kHiddenText;
  return invalidArgument(std::string(knob.name) +
                         (secret ? " (value hidden)" : "='" + std::string(value) + "'") +
                         " is not accepted: " + why + "; accepted: " + knobRange(knob));
}

Status validateConfig() {
  for (const Knob& knob : configKnobs()) {
    if (const char* value = nonEmptyEnv(knob.name)) {
      COLLIE_RETURN_IF_ERROR(checkKnobValue(knob, value));
    }
  }
  static std::once_flag warnedAliases;
  std::call_once(warnedAliases, [] {
    for (const Knob& knob : configKnobs()) {
      if (knob.ncclAlias == nullptr || nonEmptyEnv(knob.name) != nullptr) continue;
      const char* value = nonEmptyEnv(knob.ncclAlias);
      if (value == nullptr) continue;
      Status st = checkKnobValue(knob, value);
      if (!st.isOk()) {
        COLLIE_LOG(WARN, INIT) << knob.ncclAlias << "='" << value << "' has no collie equivalent ("
                               << knob.name << " accepts " << knobRange(knob) << "); using "
                               << knob.name << "'s default '" << knob.defaultValue << "'";
      }
    }
  });
  return Status();
}

std::string displayValue(const Knob& knob) {
  std::string value = configString(knob.name);
  if ((knob.kind == KnobKind::kSecret || knob.kind == KnobKind::kHiddenText) && !value.empty()) {
    return "(set, hidden)";
  }
  return value;
}

namespace {

template <typename T, typename Parse>
T readOrDefault(std::string_view name, Parse parse) {
  const Knob* knob = findKnob(name);
  if (knob == nullptr) return T{};
  std::string value = configString(name);
  if (checkKnobValue(*knob, value).isOk()) {
    auto parsed = parse(value);
    if (parsed.isOk()) return *parsed;
  }
  auto fallback = parse(knob->defaultValue);
  return fallback.isOk() ? *fallback : T{};
}

}  // namespace

int64_t configInt(std::string_view name) {
  return readOrDefault<int64_t>(name, [](const std::string& v) { return parseSize(v); });
}

std::chrono::microseconds configDuration(std::string_view name) {
  return readOrDefault<std::chrono::microseconds>(
      name, [](const std::string& v) { return parseDuration(v); });
}

}  // namespace collie
