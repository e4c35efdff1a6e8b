// Test support: run N ranks as threads of this process, each with its own
// Communicator over real transports, sharing an in-memory store.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collie/communicator.h"

namespace collie::testing {

inline UniqueId testUniqueId() {
  static std::mt19937_64 rng(std::random_device{}());
  UniqueId id;
  id.host = "127.0.0.1";
  id.port = 0;
  for (auto& byte : id.secret) byte = static_cast<uint8_t>(rng());
  return id;
}

// Creates `nranks` communicators concurrently (creation is collective). Fails the
// test and returns an empty vector if any rank could not be created. `perRank`, when
// set, adjusts each rank's copy of the options (e.g. a host id per rank).
inline std::vector<std::unique_ptr<Communicator>> makeCommunicators(
    int nranks, Options options, const std::function<void(int, Options*)>& perRank = {}) {
  options.store = makeInMemoryStore();
  UniqueId id = testUniqueId();
  std::vector<std::unique_ptr<Communicator>> comms(nranks);
  std::vector<Status> errors(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      Options mine = options;
      if (perRank) perRank(r, &mine);
      auto created = Communicator::create(id, r, nranks, mine);
      if (created.isOk()) {
        comms[r] = std::move(*created);
      } else {
        errors[r] = created.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; ++r) {
    if (!errors[r].isOk()) {
      ADD_FAILURE() << "rank " << r << ": " << errors[r].toString();
      return {};
    }
  }
  return comms;
}

// Runs body(rank) on one thread per rank and joins them.
inline void onEveryRank(int nranks, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

}  // namespace collie::testing
