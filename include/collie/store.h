// Store: the bootstrap key-value store through which ranks exchange addresses.
//
// Keys are strings, values are byte strings. get() waits until the key exists or
// the deadline passes. add() atomically adds to a 64-bit counter stored under a key
// (creating it at 0) and returns the new value. Implementations: an in-memory store
// for ranks that are threads of one process, and a TCP store (one server, usually in
// the launcher or rank 0, every rank a client) whose every connection must present
// the job secret.
//
// Thread safety: every method may be called from several threads at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collie/status.h"
#include "collie/unique_id.h"

namespace collie {

using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

class Store {
 public:
  virtual ~Store() = default;
  virtual Status set(const std::string& key, const Bytes& value) = 0;
  // Waits until `key` is set, then returns its value; Timeout after `deadline`.
  virtual Result<Bytes> get(const std::string& key, Deadline deadline) = 0;
  virtual Result<int64_t> add(const std::string& key, int64_t delta) = 0;
};

// A store shared by ranks that live in one process (tests).
std::shared_ptr<Store> makeInMemoryStore();

// The store server. It listens on `bindHost:port` (port 0 picks a free port), serves
// clients on a thread of its own until destroyed, and drops (and logs) every
// connection that does not present `secret` or that sends a malformed request.
class StoreServer {
 public:
  virtual ~StoreServer() = default;
  virtual uint16_t port() const = 0;
  static Result<std::unique_ptr<StoreServer>> start(const std::string& bindHost, uint16_t port,
                                                    const JobSecret& secret);
};

// A client of a StoreServer; connecting retries until `deadline` (the server may
// start after its clients).
Result<std::shared_ptr<Store>> connectTcpStore(const std::string& host, uint16_t port,
                                               const JobSecret& secret, Deadline deadline);

}  // namespace collie
