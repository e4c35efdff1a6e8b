// Logging, filtered by COLLIE_DEBUG (level) and COLLIE_DEBUG_SUBSYS (subsystems).
//
//   COLLIE_LOG(WARN, NET) << "peer " << peer << " closed its connection";
//
// A line is written to stderr in one write() as
//   "collie <host>:<pid>:<tid> [rank] LEVEL SUBSYS message". Disabled levels cost one
// branch (the stream expression is not evaluated). The filter is read from the
// environment once, on first use; setLogRank() tags later lines with the rank.
//
// Thread safety: logging may be used from any thread.
#pragma once

#include <sstream>

namespace collie {

enum class LogLevel { kNONE = 0, kWARN = 1, kINFO = 2, kTRACE = 3 };
enum class LogSubsys : unsigned {
  kINIT = 1u << 0,
  kCOLL = 1u << 1,
  kNET = 1u << 2,
  kSHM = 1u << 3,
  kBOOTSTRAP = 1u << 4,
  kTUNE = 1u << 5,
  kENGINE = 1u << 6,
  kTOOLS = 1u << 7,
};

bool logEnabled(LogLevel level, LogSubsys subsys);
void setLogRank(int rank);
// Re-reads COLLIE_DEBUG / COLLIE_DEBUG_SUBSYS (tests, tools that set them late).
void reloadLogConfig();

class LogLine {
 public:
  LogLine(LogLevel level, LogSubsys subsys);
  ~LogLine();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  LogSubsys subsys_;
  std::ostringstream stream_;
};

}  // namespace collie

#define COLLIE_LOG(level, subsys)                                                            \
  if (!::collie::logEnabled(::collie::LogLevel::k##level, ::collie::LogSubsys::k##subsys)) { \
  } else                                                                                     \
    ::collie::LogLine(::collie::LogLevel::k##level, ::collie::LogSubsys::k##subsys).stream()
