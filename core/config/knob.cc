// The checks and parsers every knob shares (core/config/knob.h).
#include "core/config/knob.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace collie {

namespace {

constexpr int64_t kMs = kKnobMs;
constexpr int64_t kSecond = kKnobSecond;
constexpr int64_t kDay = kKnobDay;
constexpr int64_t kKiB = kKnobKiB;
constexpr int64_t kGiB = kKnobGiB;
constexpr int64_t kTiB = kKnobTiB;

}  // namespace

std::string echoedValue(std::string_view value) {
  if (value.size() <= kEchoedValueChars) return "'" + std::string(value) + "'";
  return "'" + std::string(value.substr(0, kEchoedValueChars)) + "...' (" +
         std::to_string(value.size()) + " characters)";
}

Result<int64_t> parseSize(std::string_view text) {
  std::string s(text);
  if (s.empty()) return invalidArgument("empty size");
  if (!std::isdigit(static_cast<unsigned char>(s[0]))) {
    return invalidArgument("not a size: " + echoedValue(s));
  }
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str() || errno != 0 || value < 0) {
    return invalidArgument(errno == ERANGE ? "size too large: " + echoedValue(s)
                                           : "not a size: " + echoedValue(s));
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
    return invalidArgument("unknown size suffix in " + echoedValue(s));
  }
  if (value > INT64_MAX / scale) return invalidArgument("size too large: " + echoedValue(s));
  return static_cast<int64_t>(value) * scale;
}

Result<std::chrono::microseconds> parseDuration(std::string_view text) {
  std::string s(text);
  if (s.empty()) return invalidArgument("empty duration");
  if (!std::isdigit(static_cast<unsigned char>(s[0])) && s[0] != '.') {
    return invalidArgument("not a duration: " + echoedValue(s));
  }
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || errno != 0 || !(value >= 0) || !std::isfinite(value)) {
    return invalidArgument("not a duration: " + echoedValue(s));
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
    return invalidArgument("unknown duration unit in " + echoedValue(s) +
                           " (use us, ms, s, m, h or d)");
  }
  // 100 years: far below where microseconds, or a deadline in nanoseconds, overflow.
  constexpr double kMaxMs = 100.0 * 365 * 86400000.0;
  if (ms > kMaxMs) return invalidArgument("duration too long: " + echoedValue(s));
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
        if (!inList(knob.choices, item)) return "unknown subsystem " + echoedValue(item);
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
      const char* refusing = " (refusing to run unauthenticated)";
      if (value.size() != 32) return std::to_string(value.size()) + " characters" + refusing;
      for (char c : value) {
        if (!std::isxdigit(static_cast<unsigned char>(c))) {
          return std::string("not all hex digits") + refusing;
        }
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
  const bool secret = isSecretKnob(knob);
  return invalidArgument(std::string(knob.name) +
                         (secret ? " (value hidden)" : "=" + echoedValue(value)) +
                         " is not accepted: " + why + "; accepted: " + knobRange(knob));
}

bool isSecretKnob(const Knob& knob) {
  return knob.kind == KnobKind::kSecret || knob.kind == KnobKind::kHiddenText;
}

}  // namespace collie
