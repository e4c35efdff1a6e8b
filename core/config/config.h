// The one table of configuration knobs.
//
// Every COLLIE_* variable collie reads is declared once in config.cc with its default,
// meaning, kind and accepted range; `collie info` prints the table. A knob's value is its
// environment variable if set and non-empty, else the NCCL_* alias (for knobs that have
// one), else the default. Values are read from the environment on every call (cheap;
// callers cache what they use on hot paths).
//
// Validation: validateConfig() checks every knob's current value against its kind and
// range and returns one error naming the knob, the value and what is accepted.
// Communicator creation calls it and refuses to start on an error (never fail open).
// An NCCL_* alias whose value collie does not accept (NCCL_DEBUG=VERSION, NCCL_ALGO=^nvls)
// was meant for NCCL: it is not an error; configString() gives the default instead and
// validateConfig() logs a warning. The typed readers never return a value outside the
// knob's range: a bad value read without validation gives the default.
//
// Thread safety: all functions may be called from any thread. Nothing here logs except
// validateConfig() (the log filter itself reads COLLIE_DEBUG through configString()).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collie/status.h"

namespace collie {

enum class KnobKind {
  kText,           // free text (interface specs, host ids, directories)
  kChoice,         // one of `choices` (case-insensitive), or empty when the default is empty
  kSubsystems,     // comma-separated list of `choices`, optionally led by ^
  kInteger,        // integer with optional K/M/G suffix in [min, max]
  kAutoOrInteger,  // "auto" or an integer in [min, max]
  kDecimal,        // decimal number in [min, max]
  kDuration,       // duration (30, 500ms, 2s, 1m) with min/max in microseconds
  kOutputPath,     // a file collie writes: its directory must exist and be writable
  kSecret,         // 32 hex digits; never printed
  kHiddenText,     // free text that holds a secret (the unique id); never printed
};

struct Knob {
  const char* name;          // "COLLIE_TIMEOUT"
  const char* defaultValue;  // as text, "" for none
  const char* meaning;       // one line for `collie info`
  const char* ncclAlias;     // "NCCL_SOCKET_IFNAME" or nullptr
  KnobKind kind = KnobKind::kText;
  int64_t min = 0;  // kInteger, kAutoOrInteger, kDecimal, kDuration (us)
  int64_t max = 0;
  const char* choices = nullptr;  // kChoice, kSubsystems: "NONE,WARN,INFO,TRACE"
  const char* keyword = nullptr;  // kOutputPath: a value that is not a path ("stderr")
  // Every rank of a communicator must have the same value; ranks compare them when
  // they join (core/comm/join_agreement.h) and refuse to start on a difference.
  bool mustMatch = false;
};

const std::vector<Knob>& configKnobs();
const Knob* findKnob(std::string_view name);

// The knob's current value (environment, alias or default). Unknown names are a bug
// and return "".
std::string configString(std::string_view name);
// Where the current value came from: "env", the alias name, or "default".
std::string configSource(std::string_view name);

// OK when `value` is acceptable for `knob`; else InvalidArgument
// "COLLIE_X='value' is not accepted: <why>; accepted: <range>". kSecret values are
// never repeated in the message.
Status checkKnobValue(const Knob& knob, std::string_view value);
// What the knob accepts, in words ("1ms..30d", "one of NONE, WARN, INFO, TRACE").
std::string knobRange(const Knob& knob);
// The first knob set in the environment to an unaccepted value, as checkKnobValue's
// error; OK when every value is accepted. Warns (once per process) about unaccepted
// NCCL_* alias values, which fall back to the default.
Status validateConfig();
// The value `collie info` shows: secrets are hidden.
std::string displayValue(const Knob& knob);

// Parses integers with optional K/M/G (binary) suffix: "4M" = 4194304.
Result<int64_t> parseSize(std::string_view text);
// Parses durations: "30" (seconds), "500ms", "2s", "1m"; at most 100 years.
Result<std::chrono::microseconds> parseDuration(std::string_view text);

// Typed readers. A value that does not parse or lies outside the knob's range gives
// the knob's default (validateConfig() reports it).
int64_t configInt(std::string_view name);
std::chrono::microseconds configDuration(std::string_view name);

}  // namespace collie
