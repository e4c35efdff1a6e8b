// Hex text for binary blobs that travel as text (IPC handles in store entries and
// window registrations): two lowercase digits per byte.
// Thread safety: pure functions.
#pragma once

#include <string>

namespace collie {

inline std::string toHex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

// False (and *out unspecified) for empty text, an odd length or a character that is not
// a lowercase hex digit.
inline bool fromHex(const std::string& text, std::string* out) {
  if (text.empty() || text.size() % 2 != 0) return false;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  out->clear();
  for (size_t i = 0; i < text.size(); i += 2) {
    const int hi = digit(text[i]), lo = digit(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi << 4 | lo));
  }
  return true;
}

}  // namespace collie
