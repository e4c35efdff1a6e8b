#include "core/log/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

#include "core/config/config.h"
#include "core/log/log_knobs.h"

namespace collie {
namespace {

struct LogFilter {
  std::atomic<int> level{static_cast<int>(LogLevel::kWARN)};
  std::atomic<unsigned> subsystems{~0u};
  std::atomic<int> rank{-1};
};

LogFilter& filter() {
  static LogFilter instance;
  return instance;
}

struct SubsysName {
  const char* name;
  LogSubsys value;
};
constexpr SubsysName kSubsysNames[] = {
    {"INIT", LogSubsys::kINIT},
    {"COLL", LogSubsys::kCOLL},
    {"NET", LogSubsys::kNET},
    {"SHM", LogSubsys::kSHM},
    {"BOOTSTRAP", LogSubsys::kBOOTSTRAP},
    {"TUNE", LogSubsys::kTUNE},
    {"ENGINE", LogSubsys::kENGINE},
    {"TOOLS", LogSubsys::kTOOLS},
};

const char* subsysName(LogSubsys subsys) {
  for (const SubsysName& entry : kSubsysNames) {
    if (entry.value == subsys) return entry.name;
  }
  return "?";
}

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kWARN:
      return "WARN";
    case LogLevel::kINFO:
      return "INFO";
    case LogLevel::kTRACE:
      return "TRACE";
    default:
      return "NONE";
  }
}

void loadFilter() {
  // Process-wide knobs, read from the environment: the filter exists before any
  // communicator (and config.cc logs through it, so nothing here may log).
  // A name LogKnobs::parse reads but no table declares is a bug config_test catches;
  // here it leaves the default filter (this function may not log).
  Result<LogKnobs> given = LogKnobs::parse(Config::fromEnvironment());
  const LogKnobs knobs = given.isOk() ? *given : LogKnobs{"WARN", "ALL"};
  const std::string& level = knobs.level;
  LogLevel parsed = LogLevel::kWARN;
  if (level == "NONE" || level == "none") parsed = LogLevel::kNONE;
  if (level == "INFO" || level == "info") parsed = LogLevel::kINFO;
  if (level == "TRACE" || level == "trace") parsed = LogLevel::kTRACE;
  filter().level = static_cast<int>(parsed);

  std::string subsys = knobs.subsystems;
  bool exclude = !subsys.empty() && subsys[0] == '^';
  if (exclude) subsys.erase(0, 1);
  unsigned mask = 0;
  size_t start = 0;
  while (start <= subsys.size()) {
    size_t comma = subsys.find(',', start);
    std::string token =
        subsys.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (token == "ALL") mask = ~0u;
    for (const SubsysName& entry : kSubsysNames) {
      if (token == entry.name) mask |= static_cast<unsigned>(entry.value);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  filter().subsystems = exclude ? ~mask : mask;
}

std::once_flag gLoadOnce;

}  // namespace

bool logEnabled(LogLevel level, LogSubsys subsys) {
  std::call_once(gLoadOnce, loadFilter);
  return static_cast<int>(level) <= filter().level.load(std::memory_order_relaxed) &&
         (filter().subsystems.load(std::memory_order_relaxed) & static_cast<unsigned>(subsys));
}

void setLogRank(int rank) { filter().rank = rank; }

void reloadLogConfig() {
  std::call_once(gLoadOnce, [] {});
  loadFilter();
}

LogLine::LogLine(LogLevel level, LogSubsys subsys) : level_(level), subsys_(subsys) {}

LogLine::~LogLine() {
  static const std::string host = [] {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    return std::string(name);
  }();
  std::string line = "collie " + host + ":" + std::to_string(getpid()) + ":" +
                     std::to_string(static_cast<long>(syscall(SYS_gettid)));
  int rank = filter().rank.load();
  if (rank >= 0) line += " [" + std::to_string(rank) + "]";
  line += std::string(" ") + levelName(level_) + " " + subsysName(subsys_) + " " + stream_.str();
  line += "\n";
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace collie
