// FlightRecorder: keeps the last N collectives oldest first with their states, ignores
// updates to overwritten entries, merges its queued and inline rings in order, and
// (seqlock slots) never shows a reader a torn entry while several threads record into
// it, also when the rings wrap during writes (depth 1 and 2). dump() writes the post-mortem where
// COLLIE_TRACE_DUMP says.
#include "core/engine/flight_recorder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

namespace collie {
namespace {

// An all-reduce, a broadcast (root n % 1000) or a send (to peer n % 1000).
CollectiveArgs argsFor(uint64_t n) {
  static constexpr CollectiveKind kKinds[] = {CollectiveKind::kBroadcast,
                                              CollectiveKind::kAllReduce, CollectiveKind::kSend};
  CollectiveArgs args;
  args.kind = kKinds[n % 3];
  args.count = n;
  args.dtype = DataType::kFloat32;
  args.op = ReduceOp::kSum;
  if (args.kind == CollectiveKind::kBroadcast) args.root = static_cast<int>(n % 1000);
  if (args.kind == CollectiveKind::kSend) args.peer = static_cast<int>(n % 1000);
  return args;
}

const char* algorithmFor(uint64_t n) { return n % 2 ? "oneshot" : "ring"; }

// Every field of an entry was written by one record of `n` = its tag.
void expectWhole(const FlightEntry& entry) {
  const uint64_t n = entry.tag;
  EXPECT_EQ(entry.bytes, n * 4) << "entry " << entry.id;
  EXPECT_EQ(entry.kind, argsFor(n).kind) << "entry " << entry.id;
  EXPECT_EQ(entry.root, argsFor(n).root) << "entry " << entry.id;
  EXPECT_EQ(entry.peer, argsFor(n).peer) << "entry " << entry.id;
  EXPECT_STREQ(entry.algorithm, algorithmFor(n)) << "entry " << entry.id;
}

TEST(FlightRecorderTest, KeepsTheLastCollectivesOldestFirst) {
  FlightRecorder recorder(4);
  std::vector<uint64_t> ids;
  for (uint64_t n = 1; n <= 6; ++n) {
    ids.push_back(recorder.queued(argsFor(n), n, algorithmFor(n)));
  }
  recorder.running(ids[4]);
  recorder.finished(ids[5], false);
  recorder.finished(ids[0], true);  // overwritten: ignored
  recorder.recordInline(argsFor(7), 7, "oneshot", CycleClock::now(), true);

  std::vector<FlightEntry> entries = recorder.snapshot();
  ASSERT_EQ(entries.size(), 4u);
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i].id, 4 + i);
    EXPECT_EQ(entries[i].tag, 4 + i);
    expectWhole(entries[i]);
    EXPECT_GT(entries[i].queuedUs, 0);
  }
  EXPECT_EQ(entries[0].state, FlightState::kQueued);
  EXPECT_EQ(entries[1].state, FlightState::kRunning);
  EXPECT_GE(entries[1].startUs, entries[1].queuedUs);
  EXPECT_EQ(entries[2].state, FlightState::kFailed);
  EXPECT_EQ(entries[2].startUs, 0);
  EXPECT_GE(entries[2].endUs, entries[2].queuedUs);
  EXPECT_EQ(entries[3].state, FlightState::kDone);
  EXPECT_EQ(entries[3].startUs, entries[3].queuedUs);

  auto doc = nlohmann::json::parse(recorder.toJson(1, 2, "boom"));
  EXPECT_EQ(doc["rank"], 1);
  EXPECT_EQ(doc["depth"], 4);
  EXPECT_EQ(doc["error"], "boom");
  ASSERT_EQ(doc["collectives"].size(), 4u);
  EXPECT_EQ(doc["collectives"][3]["state"], "done");
  // Entries 4..7 (allreduce, send to 5, broadcast from 6, allreduce): a root only where
  // the kind has one, a peer likewise.
  EXPECT_EQ(doc["collectives"][3]["kind"], "allreduce");
  EXPECT_FALSE(doc["collectives"][3].contains("root"));
  EXPECT_FALSE(doc["collectives"][3].contains("peer"));
  EXPECT_EQ(doc["collectives"][2]["kind"], "broadcast");
  EXPECT_EQ(doc["collectives"][2]["root"], 6);
  EXPECT_FALSE(doc["collectives"][2].contains("peer"));
  EXPECT_EQ(doc["collectives"][1]["kind"], "send");
  EXPECT_EQ(doc["collectives"][1]["peer"], 5);
  EXPECT_FALSE(doc["collectives"][1].contains("root"));
  EXPECT_NE(doc["collectives"][1]["fingerprint"].get<std::string>().find("send #0 to peer 5"),
            std::string::npos)
      << doc["collectives"][1]["fingerprint"];
}

// Queued and inline records live in two rings (the inline one written without a lock);
// a snapshot merges them in time order, numbers each by the records made up to it, and
// keeps the newest `depth`, whichever ring they came from.
TEST(FlightRecorderTest, MergesQueuedAndInlineRecordsInOrder) {
  FlightRecorder recorder(4);
  uint64_t n = 0;
  auto queue = [&] {
    ++n;
    return recorder.queued(argsFor(n), n, algorithmFor(n));
  };
  auto runInline = [&] {
    ++n;
    recorder.recordInline(argsFor(n), n, algorithmFor(n), CycleClock::now(), true);
  };
  const uint64_t first = queue();           // 1
  queue();                                  // 2
  for (int k = 0; k < 6; ++k) runInline();  // 3..8: the inline ring wraps
  std::vector<FlightEntry> entries = recorder.snapshot();
  ASSERT_EQ(entries.size(), 4u);
  for (size_t k = 0; k < entries.size(); ++k) {
    EXPECT_EQ(entries[k].id, 5 + k);
    EXPECT_EQ(entries[k].tag, 5 + k);
    expectWhole(entries[k]);
  }
  recorder.finished(first, true);  // still in the queued ring, out of the newest 4
  queue();                         // 9
  runInline();                     // 10
  queue();                         // 11
  entries = recorder.snapshot();
  ASSERT_EQ(entries.size(), 4u);
  for (size_t k = 0; k < entries.size(); ++k) {
    EXPECT_EQ(entries[k].id, 8 + k);
    EXPECT_EQ(entries[k].tag, 8 + k);
    expectWhole(entries[k]);
    if (k > 0) {
      EXPECT_GE(entries[k].queuedUs, entries[k - 1].queuedUs);
    }
  }
  EXPECT_EQ(entries[1].state, FlightState::kQueued);
  EXPECT_EQ(entries[2].state, FlightState::kDone);
}

TEST(FlightRecorderTest, DepthZeroRecordsNothing) {
  FlightRecorder recorder(0);
  EXPECT_EQ(recorder.queued(argsFor(1), 1, "ring"), 0u);
  recorder.recordInline(argsFor(2), 2, "oneshot", CycleClock::now(), true);
  recorder.finished(0, true);
  EXPECT_TRUE(recorder.snapshot().empty());
}

class FlightRecorderRaceTest : public ::testing::TestWithParam<size_t> {};

TEST_P(FlightRecorderRaceTest, ReadersNeverSeeATornEntry) {
  FlightRecorder recorder(GetParam());
  // Each writer records at least kPerWriter entries and goes on until the reader has
  // taken kMinSnapshots snapshots while it wrote: on a loaded machine the writers could
  // otherwise finish before the reader's first look, and the test would check nothing.
  constexpr uint64_t kPerWriter = 20000;
  constexpr size_t kMinSnapshots = 50;
  std::atomic<size_t> snapshots{0};
  std::atomic<uint64_t> written{0};
  std::atomic<int> writersDone{0};
  std::atomic<bool> done{false};
  auto keepWriting = [&](uint64_t n) {
    return n <= kPerWriter || snapshots.load() < kMinSnapshots;
  };
  // A submitter (queued, then running and finished by a progress thread) and an inline
  // runner, as the engine's callers and progress thread do.
  std::atomic<uint64_t> lastQueued{0};
  std::thread submitter([&] {
    for (uint64_t n = 1; keepWriting(n); ++n) {
      lastQueued.store(recorder.queued(argsFor(2 * n), 2 * n, algorithmFor(2 * n)));
      ++written;
    }
    ++writersDone;
  });
  std::thread progress([&] {
    while (!done.load()) {
      const uint64_t id = lastQueued.load();
      recorder.running(id);
      recorder.finished(id, true);
    }
  });
  std::thread inlineRunner([&] {
    for (uint64_t n = 1; keepWriting(n); ++n) {
      recorder.recordInline(argsFor(2 * n + 1), 2 * n + 1, algorithmFor(2 * n + 1),
                            CycleClock::now(), true);
      ++written;
    }
    ++writersDone;
  });
  while (writersDone.load() < 2 && !::testing::Test::HasFailure()) {
    uint64_t previous = 0;
    for (const FlightEntry& entry : recorder.snapshot()) {
      expectWhole(entry);
      EXPECT_GT(entry.id, previous);
      previous = entry.id;
    }
    ++snapshots;
  }
  submitter.join();
  inlineRunner.join();
  done.store(true);
  progress.join();
  EXPECT_GE(snapshots.load(), kMinSnapshots);
  std::vector<FlightEntry> entries = recorder.snapshot();
  ASSERT_EQ(entries.size(), GetParam());
  EXPECT_EQ(entries.back().id, written.load());
}

// 2 and 64 index the ring by mask, 1 and 3 by modulo.
INSTANTIATE_TEST_SUITE_P(Depths, FlightRecorderRaceTest, ::testing::Values(1, 2, 3, 64));

TEST(FlightRecorderTest, DumpPathNamesTheRank) {
  EXPECT_EQ(flightDumpPath("/tmp/trace-%r.json", 3), "/tmp/trace-3.json");
  EXPECT_EQ(flightDumpPath("%r/%r", 12), "12/12");
  EXPECT_EQ(flightDumpPath("plain%", 1), "plain%");
  EXPECT_EQ(flightDumpPath("%x%r", 0), "%x0");
}

TEST(FlightRecorderTest, DumpWritesTheRingToAFile) {
  FlightRecorder recorder(4);
  const uint64_t id = recorder.queued(argsFor(3), 3, "ring");
  recorder.finished(id, false);
  const std::string pattern = ::testing::TempDir() + "collie-flight-%r.json";
  const std::string path = recorder.dump(pattern, 5, 8, "rank 5 timed out", "test");
  EXPECT_EQ(path, flightDumpPath(pattern, 5));
  std::ifstream file(path);
  ASSERT_TRUE(file.good()) << path;
  std::stringstream text;
  text << file.rdbuf();
  auto doc = nlohmann::json::parse(text.str());
  EXPECT_EQ(doc["rank"], 5);
  EXPECT_EQ(doc["nranks"], 8);
  EXPECT_EQ(doc["error"], "rank 5 timed out");
  ASSERT_EQ(doc["collectives"].size(), 1u);
  EXPECT_EQ(doc["collectives"][0]["state"], "failed");
  std::remove(path.c_str());
}

TEST(FlightRecorderTest, DumpWritesNothingWhenItCannot) {
  FlightRecorder recorder(4);
  recorder.queued(argsFor(1), 1, "ring");
  EXPECT_EQ(recorder.dump("", 0, 2, "", "test"), "");
  EXPECT_EQ(recorder.dump("/nonexistent-dir/collie-%r.json", 0, 2, "", "test"), "");
  FlightRecorder empty(0);
  EXPECT_EQ(empty.dump(::testing::TempDir() + "collie-never.json", 0, 2, "", "test"), "");
  EXPECT_FALSE(std::ifstream(::testing::TempDir() + "collie-never.json").good());
  EXPECT_EQ(recorder.dump("stderr", 0, 2, "", "test"), "stderr");
}

}  // namespace
}  // namespace collie
