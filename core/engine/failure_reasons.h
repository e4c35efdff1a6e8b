// FailureReasons: where the ranks of a communicator leave the reason they gave up, so
// that a rank that only sees "rank 3 closed its connection" can report the root cause
// ("... because rank 3 lost rank 5: it died").
//
// When a rank's collectives fail for good, its engine publishes the Status under
// "<jobKey>/failed/<rank>" in the bootstrap store before it closes its connections;
// a rank whose connection to peer P broke or went silent looks up P's entry. The store
// may be slow or gone (its host died), so each store request runs on a short-lived
// helper thread and is waited for only up to a bound: the progress thread and abort()
// never wait long for it. Entries are untrusted bytes and are validated on read.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "collie/status.h"
#include "collie/store.h"

namespace collie {

class FailureReasons {
 public:
  FailureReasons(std::shared_ptr<Store> store, std::string jobKey, int rank);

  // Leaves `status` for the peers; waits at most `wait` for the store to take it.
  void publish(const Status& status, std::chrono::milliseconds wait) const;
  // What `peer` published, if it did so within `wait`.
  std::optional<Status> lookup(int peer, std::chrono::milliseconds wait) const;

  // `own` (an error about `peer`) extended with what `peer` published, if anything:
  // the result keeps the root cause's code and names the rank at the root, so that
  // every rank of a failed job points at the same culprit.
  Status explain(const Status& own, std::chrono::milliseconds wait) const;

 private:
  std::string keyOf(int rank) const;

  std::shared_ptr<Store> store_;
  std::string jobKey_;
  int rank_;
};

}  // namespace collie
