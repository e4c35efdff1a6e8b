// A configuration knob: one COLLIE_* variable with its default, meaning, kind and
// accepted range, and the checks and parsers every knob shares.
//
// Knobs are declared in tables, one per component (core/config/knob_registry.h); a
// Config (core/config/config.h) is one snapshot of every registered knob's value. The
// helpers in namespace `knobs` build table entries:
//
//   knobs::integer("COLLIE_BUFFSIZE", "4M", 4 * kKiB, kGiB, "bytes of each FIFO", "NCCL_BUFFSIZE")
//
// Thread safety: everything here is a pure function of its arguments (kOutputPath checks
// also ask the file system whether a directory is writable).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "collie/status.h"

namespace collie {

enum class KnobKind {
  kText,           // free text (interface specs, host ids, directories)
  kChoice,         // one of `choices` (case-insensitive), or empty when the default is empty
  kSubsystems,     // comma-separated list of `choices`, optionally led by ^
  kInteger,        // integer with optional K/M/G suffix in [min, max]
  kAutoOrInteger,  // "auto" or an integer in [min, max]
  kDecimal,        // decimal number in (min, max]
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
  // Read once per process, before or without any communicator (the log level, the
  // launcher's variables): only the environment sets it; an override given in code
  // (Options::config) is refused.
  bool processWide = false;
};

// OK when `value` is acceptable for `knob` (an empty value always is: the default
// applies); else InvalidArgument "COLLIE_X='value' is not accepted: <why>; accepted:
// <range>". Secret values are never repeated in the message.
Status checkKnobValue(const Knob& knob, std::string_view value);
// `value` quoted for an error message: whole when short, else its first
// kEchoedValueChars characters and its length ('12345...' (130000 characters)), so a
// refused value of any length costs one short line on every rank.
inline constexpr size_t kEchoedValueChars = 64;
std::string echoedValue(std::string_view value);
// What the knob accepts, in words ("1ms..30d", "one of NONE, WARN, INFO, TRACE").
std::string knobRange(const Knob& knob);
// Whether the knob's value must never be printed.
bool isSecretKnob(const Knob& knob);

// Parses integers with optional K/M/G (binary) suffix: "4M" = 4194304.
Result<int64_t> parseSize(std::string_view text);
// Parses durations: "30" (seconds), "500ms", "2s", "1m"; at most 100 years.
Result<std::chrono::microseconds> parseDuration(std::string_view text);

// Units for knob ranges.
inline constexpr int64_t kKnobMs = 1000;  // microseconds
inline constexpr int64_t kKnobSecond = 1000 * kKnobMs;
inline constexpr int64_t kKnobDay = 86400 * kKnobSecond;
inline constexpr int64_t kKnobKiB = int64_t{1} << 10;
inline constexpr int64_t kKnobGiB = int64_t{1} << 30;
inline constexpr int64_t kKnobTiB = int64_t{1} << 40;

// Builders of table entries.
namespace knobs {

inline Knob text(const char* name, const char* def, const char* meaning,
                 const char* alias = nullptr) {
  return Knob{name, def, meaning, alias};
}
inline Knob choice(const char* name, const char* def, const char* choices, const char* meaning,
                   const char* alias = nullptr) {
  return Knob{name, def, meaning, alias, KnobKind::kChoice, 0, 0, choices};
}
inline Knob integer(const char* name, const char* def, int64_t min, int64_t max,
                    const char* meaning, const char* alias = nullptr) {
  return Knob{name, def, meaning, alias, KnobKind::kInteger, min, max};
}
inline Knob duration(const char* name, const char* def, int64_t minUs, int64_t maxUs,
                     const char* meaning) {
  return Knob{name, def, meaning, nullptr, KnobKind::kDuration, minUs, maxUs};
}
inline Knob decimal(const char* name, int64_t min, int64_t max, const char* meaning) {
  return Knob{name, "", meaning, nullptr, KnobKind::kDecimal, min, max};
}
inline Knob outputPath(const char* name, const char* keyword, const char* meaning) {
  return Knob{name, "", meaning, nullptr, KnobKind::kOutputPath, 0, 0, nullptr, keyword};
}
inline Knob everyRankAlike(Knob knob) {
  knob.mustMatch = true;
  return knob;
}
inline Knob processWide(Knob knob) {
  knob.processWide = true;
  return knob;
}

}  // namespace knobs
}  // namespace collie
