// Team collectives as first-class algorithms (docs/decisions/team-collectives.md): each
// of board, direct and cma forced through Options::algorithm on 2 and 4 shm ranks as
// threads, a few sizes, in and out of place: every rank's bytes equal the float64
// reference and each other's, and the flight recorder (or the single-copy share
// counters) shows the forced algorithm ran. Forcing one where it cannot run is a clear
// error on every rank (board over tcp, a board collective too large for it, direct on
// unregistered buffers). auto's board path allocates nothing on the caller.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "collie/shared_memory.h"
#include "core/team/cross_memory.h"
#include "core/team/direct_share.h"
#include "support/quick_matrix.h"
#include "support/rank_threads.h"
#include "support/sanitizers.h"

namespace {
// Allocations on the calling thread while `counting` is set on it.
thread_local bool counting = false;
thread_local uint64_t allocations = 0;
}  // namespace

// The sanitizers replace operator new and delete themselves (and report memory that
// one allocator made and another freed), so the count runs in the normal build only.
#if COLLIE_TEST_ASAN || COLLIE_TEST_TSAN
#define COLLIE_COUNTS_ALLOCATIONS 0
#else
#define COLLIE_COUNTS_ALLOCATIONS 1
#endif

#if COLLIE_COUNTS_ALLOCATIONS
// The replaced operator new takes its memory from malloc, so free() is the match (GCC
// cannot see that through the replacement).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t bytes) {
  if (counting) ++allocations;
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop
#endif

namespace collie {
namespace {

using testing::Failures;

// Exact in float: sums of these over 4 ranks need no rounding, so the float64
// reference converted to float is the one right answer.
float valueOf(int rank, size_t i) { return static_cast<float>((rank * 7 + i) % 13) - 6.25f; }

std::vector<std::unique_ptr<Communicator>> make(int nranks, const std::string& transport,
                                                Algorithm algorithm) {
  Options options;
  options.transport = transport;
  options.algorithm = algorithm;
  options.timeout = std::chrono::seconds(30);
  return testing::makeCommunicators(nranks, options);
}

// Runs a float sum all-reduce of `count` elements on every rank (in place or not, from
// `buffers(rank)` when given) and checks every element against the reference.
void checkAllReduce(std::vector<std::unique_ptr<Communicator>>& comms, size_t count, bool inPlace,
                    const std::function<std::pair<float*, float*>(int)>& buffers,
                    Failures* failures) {
  const int n = static_cast<int>(comms.size());
  testing::onEveryRank(n, [&](int r) {
    std::vector<float> heapIn(count), heapOut(count, -1.0f);
    auto [in, out] = buffers ? buffers(r) : std::make_pair(heapIn.data(), heapOut.data());
    if (inPlace) in = out;
    for (size_t i = 0; i < count; ++i) in[i] = valueOf(r, i);
    Result<Work> work = comms[r]->allReduce(in, out, count, DataType::kFloat32, ReduceOp::kSum);
    Status status = work.isOk() ? work->wait() : work.status();
    if (!status.isOk()) {
      failures->add("rank " + std::to_string(r) + ": " + status.toString());
      return;
    }
    for (size_t i = 0; i < count; ++i) {
      double want = 0;
      for (int q = 0; q < n; ++q) want += valueOf(q, i);
      if (out[i] != static_cast<float>(want)) {
        failures->add("rank " + std::to_string(r) + " element " + std::to_string(i) + " is " +
                      std::to_string(out[i]) + ", expected " + std::to_string(want));
        return;
      }
    }
  });
}

bool ranWith(Communicator& comm, const char* algorithm) {
  return comm.dumpFlightRecorder().find(std::string("\"algorithm\": \"") + algorithm + "\"") !=
         std::string::npos;
}

class TeamCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(TeamCollectivesTest, ForcedBoardRunsEveryCollectiveItCarries) {
  const int n = GetParam();
  auto comms = make(n, "shm", Algorithm::kBoard);
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  Failures failures;
  for (size_t count : {size_t{1}, size_t{1000}, size_t{16384}}) {
    for (bool inPlace : {false, true}) checkAllReduce(comms, count, inPlace, nullptr, &failures);
  }
  // An all-gather and a broadcast, exact copies.
  testing::onEveryRank(n, [&](int r) {
    const size_t count = 777;
    std::vector<float> in(count), gathered(count * n, -1.0f), cast(count, -1.0f);
    for (size_t i = 0; i < count; ++i) in[i] = valueOf(r, i);
    Result<Work> a = comms[r]->allGather(in.data(), gathered.data(), count, DataType::kFloat32);
    Result<Work> b = comms[r]->broadcast(in.data(), cast.data(), count, DataType::kFloat32, n - 1);
    for (Result<Work>* work : {&a, &b}) {
      Status status = work->isOk() ? (*work)->wait() : work->status();
      if (!status.isOk()) failures.add("rank " + std::to_string(r) + ": " + status.toString());
    }
    for (size_t i = 0; i < count; ++i) {
      for (int q = 0; q < n; ++q) {
        if (gathered[q * count + i] != valueOf(q, i)) {
          failures.add("rank " + std::to_string(r) + ": all-gather block " + std::to_string(q));
          return;
        }
      }
      if (cast[i] != valueOf(n - 1, i)) {
        failures.add("rank " + std::to_string(r) + ": broadcast element " + std::to_string(i));
        return;
      }
    }
  });
  for (const std::string& message : failures.messages) ADD_FAILURE() << message;
  for (auto& comm : comms) EXPECT_TRUE(ranWith(*comm, "board")) << comm->dumpFlightRecorder();
}

TEST_P(TeamCollectivesTest, ForcedDirectRunsOnRegisteredBuffersAndRefusesOthers) {
#if COLLIE_TEST_TSAN
  // As registered_test (tests/sanitize/run.sh): rank threads reach each other's
  // registered buffers at one address, ordered by flags on a board that each maps at
  // an address of its own, an edge TSan cannot see. The ASan run covers this case.
  GTEST_SKIP() << "TSan cannot see the board's happens-before edge between rank threads";
#endif
  const int n = GetParam();
  auto comms = make(n, "shm", Algorithm::kDirect);
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  const size_t maxCount = 100000;
  std::vector<float*> send(n), recv(n);
  for (int r = 0; r < n; ++r) {
    send[r] = static_cast<float*>(*allocShared(maxCount * sizeof(float)));
    recv[r] = static_cast<float*>(*allocShared(maxCount * sizeof(float)));
    ASSERT_TRUE(comms[r]->registerBuffer(send[r], maxCount * sizeof(float)).isOk());
    ASSERT_TRUE(comms[r]->registerBuffer(recv[r], maxCount * sizeof(float)).isOk());
  }
  const uint64_t before = directShareCount();
  Failures failures;
  for (size_t count : {size_t{1000}, maxCount}) {
    for (bool inPlace : {false, true}) {
      checkAllReduce(
          comms, count, inPlace, [&](int r) { return std::make_pair(send[r], recv[r]); },
          &failures);
    }
  }
  for (const std::string& message : failures.messages) ADD_FAILURE() << message;
  EXPECT_EQ(directShareCount() - before, 4u * n) << "not every call went direct";
  // Heap buffers on one rank: every rank fails, naming the reason, nobody hangs.
  std::vector<Status> statuses(n);
  testing::onEveryRank(n, [&](int r) {
    std::vector<float> heap(1000, 1.0f);
    float* buffer = r == n - 1 ? heap.data() : send[r];
    Result<Work> work =
        comms[r]->allReduce(buffer, buffer, 1000, DataType::kFloat32, ReduceOp::kSum);
    statuses[r] = work.isOk() ? work->wait() : work.status();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(statuses[r].code(), StatusCode::kUnsupported) << statuses[r].toString();
    EXPECT_NE(statuses[r].message().find("rank " + std::to_string(n - 1) +
                                         "'s buffers are not both registered"),
              std::string::npos)
        << statuses[r].toString();
  }
  comms.clear();
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(freeShared(send[r]).isOk());
    EXPECT_TRUE(freeShared(recv[r]).isOk());
  }
}

TEST_P(TeamCollectivesTest, ForcedCmaRunsOnPlainBuffers) {
  const int n = GetParam();
  auto comms = make(n, "shm", Algorithm::kCma);
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  const uint64_t before = crossMemoryShareCount();
  Failures failures;
  for (size_t count : {size_t{3}, size_t{100003}}) {
    for (bool inPlace : {false, true}) checkAllReduce(comms, count, inPlace, nullptr, &failures);
  }
  if (!failures.messages.empty() &&
      failures.messages[0].find("probed: denied") != std::string::npos) {
    GTEST_SKIP() << "cross-memory attach is denied here: " << failures.messages[0];
  }
  for (const std::string& message : failures.messages) ADD_FAILURE() << message;
  EXPECT_EQ(crossMemoryShareCount() - before, 4u * n) << "not every call went cma";
}

// auto above the board: the engine times cma against the ring it falls back to
// (core/engine/single_copy_choice.h). The first 12 calls of a size class run in two blocks
// in step on every rank, cma in the last six only, also where one rank never withholds it
// (COLLIE_TUNE_ADAPT_MAX=0 there: the others' withheld wish is enough); every call,
// whichever ran it, is exact on every rank.
TEST_P(TeamCollectivesTest, AutoTimesCmaAgainstTheRingInStepAndStaysExact) {
  const int n = GetParam();
  for (bool oneRankOff : {false, true}) {
    Options options;
    options.transport = "shm";
    options.timeout = std::chrono::seconds(30);
    // The tuner's plan (direct>cma>ring) from fixed FIFO constants, not from a probe that
    // can measure the FIFO as fast as cma's model rate.
    options.config = {{"COLLIE_TUNE_ALPHA_US", "20"}, {"COLLIE_TUNE_BW_GBPS", "10"}};
    auto comms = testing::makeCommunicators(n, options, [&](int r, Options* mine) {
      if (oneRankOff && r == 0) mine->config["COLLIE_TUNE_ADAPT_MAX"] = "0";
    });
    ASSERT_EQ(comms.size(), static_cast<size_t>(n));
    const size_t count = 1200000;  // 4.8 MB: past the board's 2 MiB, within 8 MiB
    Failures failures;
    const uint64_t before = crossMemoryShareCount();
    for (int i = 0; i < 6; ++i) checkAllReduce(comms, count, true, nullptr, &failures);
    EXPECT_EQ(crossMemoryShareCount() - before, 0u)
        << "calls 1..6 go the ring (one rank off: " << oneRankOff << ")";
    for (int i = 0; i < 6; ++i) checkAllReduce(comms, count, true, nullptr, &failures);
    if (!failures.messages.empty() && failures.messages[0].find("denied") != std::string::npos) {
      GTEST_SKIP() << "cross-memory attach is denied here: " << failures.messages[0];
    }
    EXPECT_EQ(crossMemoryShareCount() - before, 6u * n)
        << "calls 7..12 go cma (one rank off: " << oneRankOff << ")";
    // Then a run of calls in and out of place (fewer in the quick matrix: at 4.8 MB and
    // 4 ranks each call is slow under TSan, and the choice is made by then).
    const int after = testing::quickMatrix() ? 6 : 24;
    for (int i = 0; i < after; ++i) checkAllReduce(comms, count, i % 3 == 0, nullptr, &failures);
    for (const std::string& message : failures.messages) ADD_FAILURE() << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, TeamCollectivesTest, ::testing::Values(2, 4));

// fault: a team algorithm forced where it cannot run (board over tcp, a collective too
// large for the board) | every rank fails at submit with Unsupported naming the algorithm
// and why | team_collectives_test
TEST(TeamCollectivesErrors, ForcedBoardWhereItCannotRunFailsClearlyOnEveryRank) {
  for (const char* transport : {"tcp", "shm"}) {
    SCOPED_TRACE(transport);
    auto comms = make(2, transport, Algorithm::kBoard);
    ASSERT_EQ(comms.size(), 2u);
    // Over tcp there is no team; over shm 2 Mi floats do not fit the 2 MiB board.
    const size_t count = std::string(transport) == "tcp" ? 16 : 1 << 21;
    std::vector<float> buffer(count, 1.0f);
    for (auto& comm : comms) {
      Result<Work> work =
          comm->allReduce(buffer.data(), buffer.data(), count, DataType::kFloat32, ReduceOp::kSum);
      ASSERT_FALSE(work.isOk());
      EXPECT_EQ(work.status().code(), StatusCode::kUnsupported) << work.status().toString();
      const std::string message = work.status().message();
      EXPECT_NE(message.find(std::string(transport) == "tcp" ? "runs no board"
                                                             : "the board carries at most"),
                std::string::npos)
          << message;
    }
    // Point-to-point ignores it, as a tree forced for all-gather is ignored. The ranks
    // are threads of one process: each has a buffer of its own.
    std::vector<float> received(16, 0.0f);
    testing::onEveryRank(2, [&](int r) {
      Result<Work> work = r == 0 ? comms[0]->send(buffer.data(), 16, DataType::kFloat32, 1)
                                 : comms[1]->recv(received.data(), 16, DataType::kFloat32, 0);
      ASSERT_TRUE(work.isOk()) << work.status().toString();
      EXPECT_TRUE(work->wait().isOk());
    });
    EXPECT_EQ(received, std::vector<float>(16, 1.0f));
  }
}

// auto's small all-reduces go through the board on the caller's thread without
// allocating (the engine keeps the last inline schedule; the board needs no queue).
TEST(TeamCollectivesInline, BoardPathAllocatesNothing) {
  if (!COLLIE_COUNTS_ALLOCATIONS) {
    GTEST_SKIP() << "sanitizer build: its allocator owns operator new; the normal build counts";
  }
  auto comms = make(2, "shm", Algorithm::kAuto);
  ASSERT_EQ(comms.size(), 2u);
  std::vector<uint64_t> counted(2);
  Failures failures;
  testing::onEveryRank(2, [&](int r) {
    float value[2] = {1.0f, 2.0f};
    for (int i = 0; i < 300; ++i) {
      counting = i >= 100;  // after warm-up: the plan is made and kept
      Result<Work> work = comms[r]->allReduce(value, value, 2, DataType::kFloat32, ReduceOp::kMax);
      Status status = work.isOk() ? work->wait() : work.status();
      counting = false;
      if (!status.isOk()) failures.add(status.toString());
    }
    counted[r] = allocations;
  });
  for (const std::string& message : failures.messages) ADD_FAILURE() << message;
  EXPECT_EQ(counted[0], 0u);
  EXPECT_EQ(counted[1], 0u);
  EXPECT_TRUE(ranWith(*comms[0], "board"));
}

// The same for the direct path on registered buffers (3 ranks: its tiles fold three
// inputs), run inline once every rank's buffers were seen registered.
TEST(TeamCollectivesInline, DirectPathAllocatesNothing) {
  if (!COLLIE_COUNTS_ALLOCATIONS) {
    GTEST_SKIP() << "sanitizer build: its allocator owns operator new; the normal build counts";
  }
  const int n = 3;
  auto comms = make(n, "shm", Algorithm::kAuto);
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  const size_t count = 16384;  // 64 KiB: the board's size, where direct goes first
  std::vector<float*> buffers(n);
  for (int r = 0; r < n; ++r) {
    buffers[r] = static_cast<float*>(*allocShared(count * sizeof(float)));
    ASSERT_TRUE(comms[r]->registerBuffer(buffers[r], count * sizeof(float)).isOk());
  }
  std::vector<uint64_t> counted(n);
  Failures failures;
  const uint64_t before = directShareCount();
  testing::onEveryRank(n, [&](int r) {
    for (int i = 0; i < 300; ++i) {
      counting = i >= 100;
      Result<Work> work =
          comms[r]->allReduce(buffers[r], buffers[r], count, DataType::kFloat32, ReduceOp::kMax);
      Status status = work.isOk() ? work->wait() : work.status();
      counting = false;
      if (!status.isOk()) failures.add(status.toString());
    }
    counted[r] = allocations;
  });
  for (const std::string& message : failures.messages) ADD_FAILURE() << message;
  EXPECT_GE(directShareCount() - before, 200u * n) << "the calls did not go direct";
  for (int r = 0; r < n; ++r) EXPECT_EQ(counted[r], 0u) << "rank " << r;
  comms.clear();
  for (int r = 0; r < n; ++r) EXPECT_TRUE(freeShared(buffers[r]).isOk());
}

}  // namespace
}  // namespace collie
