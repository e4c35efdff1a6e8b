// The one table of configuration knobs.
//
// Every COLLIE_* variable collie reads is declared once in config.cc with its
// default and meaning; `collie info` prints the table. A knob's value is its
// environment variable if set and non-empty, else the NCCL_* alias (for knobs that
// have one), else the default. Values are read from the environment on every call
// (cheap; callers cache what they use on hot paths).
//
// Thread safety: all functions may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collie/status.h"

namespace collie {

struct Knob {
  const char* name;          // "COLLIE_TIMEOUT"
  const char* defaultValue;  // as text, "" for none
  const char* meaning;       // one line for `collie info`
  const char* ncclAlias;     // "NCCL_SOCKET_IFNAME" or nullptr
};

const std::vector<Knob>& configKnobs();

// The knob's current value (environment, alias or default). Unknown names are a bug
// and return "".
std::string configString(std::string_view name);
// Where the current value came from: "env", the alias name, or "default".
std::string configSource(std::string_view name);

// Parses integers with optional K/M/G (binary) suffix: "4M" = 4194304.
Result<int64_t> parseSize(std::string_view text);
// Parses durations: "30" (seconds), "500ms", "2s", "1m".
Result<std::chrono::microseconds> parseDuration(std::string_view text);

// Typed readers. On a malformed value they log a warning naming the knob and return
// the parsed default.
int64_t configInt(std::string_view name);
std::chrono::microseconds configDuration(std::string_view name);

}  // namespace collie
