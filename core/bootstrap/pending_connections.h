// Which unauthenticated connections the store server keeps.
//
// Anyone who reaches the store's port can open connections without knowing the job
// secret. The server keeps such a connection only until its Hello arrives (or its
// handshake deadline passes), and it holds at most `maxTotal` of them, at most
// `maxPerSource` from one source address. When a new connection would break a cap,
// the oldest unauthenticated connection makes room: the oldest of the same source
// when that source is at its cap (so one stranger only ever recycles its own
// connections), else the oldest overall. A legitimate rank sends its Hello as soon as
// the server's Challenge (sent at accept) reaches it, so it is among the newest
// pending connections for the one round trip it is pending at all, and is never the
// one evicted while strangers idle.
//
// A connection younger than `grace` is never evicted: when the one that would make
// room is that young, the new connection is refused instead (the server closes it
// before its Challenge, and a collie client retries). So a burst of ranks from one
// address (a many-core host starting at once) past the per-source cap costs the
// newest a retry, not an evicted rank mid-handshake.
//
// Connections are named by the server's ids, which must increase with arrival.
// Thread safety: none; the store server's thread owns it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "collie/store.h"

namespace collie {

class PendingConnections {
 public:
  PendingConnections(size_t maxTotal, size_t maxPerSource, std::chrono::milliseconds grace);

  struct Admission {
    bool admitted = true;         // false: close the new connection (no room now)
    std::vector<uint64_t> evict;  // ids to close to make room, oldest first (never `id`)
  };
  // Records connection `id` from `source` (an address without port) arriving at `now`,
  // unless every connection that could make room is younger than the grace period.
  Admission admit(uint64_t id, const std::string& source, Clock::time_point now);
  // Forgets `id` (authenticated or closed). No-op for an unknown id.
  void remove(uint64_t id);
  // The oldest pending connection, if any.
  std::optional<uint64_t> oldest() const;
  size_t size() const { return entries_.size(); }
  size_t countFrom(const std::string& source) const;

 private:
  struct Entry {
    std::string source;
    Clock::time_point since;
  };
  size_t maxTotal_;
  size_t maxPerSource_;
  std::chrono::milliseconds grace_;
  std::map<uint64_t, Entry> entries_;  // id -> entry, oldest first
  std::map<std::string, size_t> perSource_;
};

}  // namespace collie
