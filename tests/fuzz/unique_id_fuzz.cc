// Fuzz target: the unique id in text form (environment variables, files) and in its
// 128-byte form (ncclGetUniqueId blobs passed between processes). Whatever parses
// must round-trip.
#include <cstdint>
#include <string>

#include "collie/unique_id.h"

using collie::UniqueId;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  collie::Result<UniqueId> parsed = UniqueId::parse(text);
  if (parsed.isOk()) {
    collie::Result<UniqueId> again = UniqueId::parse(parsed->toString());
    if (!again.isOk() || again->host != parsed->host || again->port != parsed->port ||
        again->secret != parsed->secret) {
      __builtin_trap();
    }
  }
  collie::Result<UniqueId> fromBytes = UniqueId::fromBytes(data, size);
  if (fromBytes.isOk()) {
    auto bytes = fromBytes->toBytes();
    collie::Result<UniqueId> again = UniqueId::fromBytes(bytes.data(), bytes.size());
    if (!again.isOk() || again->host != fromBytes->host || again->port != fromBytes->port) {
      __builtin_trap();
    }
  }
  collie::secretFromHex(text);
  return 0;
}
