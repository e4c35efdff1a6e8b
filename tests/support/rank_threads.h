// Test support: run N ranks as threads of this process, each with its own
// Communicator over real transports, sharing an in-memory store.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collie/communicator.h"

namespace collie::testing {

inline UniqueId testUniqueId() {
  // Per thread: tests create communicators from several rank threads at once.
  thread_local std::mt19937_64 rng(std::random_device{}());
  UniqueId id;
  id.host = "127.0.0.1";
  id.port = 0;
  for (auto& byte : id.secret) byte = static_cast<uint8_t>(rng());
  return id;
}

// Communicators created together: comms[r] is null where errors[r] says why.
struct CreatedRanks {
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<Status> errors;
};

// Creates `nranks` communicators concurrently (creation is collective), rank r with
// optionsOf(r), all through one in-memory store.
inline CreatedRanks createCommunicators(int nranks, const std::function<Options(int)>& optionsOf) {
  std::shared_ptr<Store> store = makeInMemoryStore();
  UniqueId id = testUniqueId();
  CreatedRanks created{std::vector<std::unique_ptr<Communicator>>(nranks),
                       std::vector<Status>(nranks)};
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      Options options = optionsOf(r);
      options.store = store;
      auto comm = Communicator::create(id, r, nranks, options);
      if (comm.isOk()) {
        created.comms[r] = std::move(*comm);
      } else {
        created.errors[r] = comm.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  return created;
}

// Creates `nranks` communicators with the same options. Fails the test and returns an
// empty vector if any rank could not be created. `perRank`, when set, adjusts each
// rank's copy of the options (e.g. a host id per rank).
inline std::vector<std::unique_ptr<Communicator>> makeCommunicators(
    int nranks, Options options, const std::function<void(int, Options*)>& perRank = {}) {
  CreatedRanks created = createCommunicators(nranks, [&](int r) {
    Options mine = options;
    if (perRank) perRank(r, &mine);
    return mine;
  });
  for (int r = 0; r < nranks; ++r) {
    if (!created.errors[r].isOk()) {
      ADD_FAILURE() << "rank " << r << ": " << created.errors[r].toString();
      return {};
    }
  }
  return std::move(created.comms);
}

// Failure messages collected from rank threads (the first 20), reported by the test
// thread once they have joined.
struct Failures {
  std::mutex mutex;
  std::vector<std::string> messages;
  void add(std::string message) {
    std::lock_guard<std::mutex> lock(mutex);
    if (messages.size() < 20) messages.push_back(std::move(message));
  }
};

// Runs body(rank) on one thread per rank and joins them.
inline void onEveryRank(int nranks, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

}  // namespace collie::testing
