// Fuzz target: the store server's request parser and the client's reply check, fed
// bytes as a client (or a server) on the network could send them.
#include <cstdint>
#include <cstring>
#include <string>

#include "core/bootstrap/store_protocol.h"

using namespace collie::store_protocol;  // NOLINT(build/namespaces)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Parse a stream of requests the way the server's input loop does.
  size_t pos = 0;
  while (pos < size) {
    Request request;
    std::string why;
    Parse parsed = parseRequest(data + pos, size - pos, &request, &why);
    if (parsed != Parse::kOk) break;
    if (request.consumed < kRequestHeaderBytes + 1 || request.consumed > size - pos)
      __builtin_trap();
    if (request.key.size() == 0 || request.key.size() > kMaxKeyBytes) __builtin_trap();
    volatile char sink = request.key.front() ^ request.key.back();
    if (request.op == kSet && request.arg > 0) sink = sink ^ request.value[request.arg - 1];
    (void)sink;
    pos += request.consumed;
  }
  if (size >= kResponseHeaderBytes) {
    for (Op op : {kSet, kGet, kAdd}) {
      uint64_t length = 0;
      std::string why;
      if (parseResponseHeader(data, op, &length, &why) == Parse::kOk && length > kMaxValueBytes) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
