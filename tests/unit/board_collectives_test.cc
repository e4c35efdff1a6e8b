// core/team's BoardCollectives over a team board that is not shm's: heap memory shared
// by ranks that are threads of this process (HeapBoard below keeps the contract of
// core/transport/team_board.h except the claims, which shm's team tests cover). Every
// collective the board carries (one line, the slots, two shots), the cma paths over its
// peer memory's pull/push, and a fingerprint mismatch, on 2 and 3 ranks, against a float64
// reference, bitwise alike on every rank: the collectives need nothing from a transport
// but the primitive.
#include "core/team/board_collectives.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace collie {
namespace {

using namespace std::chrono_literals;

constexpr size_t kSlotBytes = 4096;

// The memory every rank of the team maps: plain heap here.
struct HeapTeam {
  explicit HeapTeam(int n) : nranks(n), lines(2 * n), notes(2 * n), flags(2 * n), views(n) {
    slots.resize(2 * n * kSlotBytes);
    for (int r = 0; r < n; ++r) {
      for (int parity = 0; parity < 2; ++parity) {
        views[r].line[parity] = &lines[2 * r + parity];
        views[r].note[parity] = &notes[2 * r + parity];
        views[r].slot[parity] = slots.data() + (2 * r + parity) * kSlotBytes;
      }
      views[r].done = &flags[2 * r];
      views[r].probed = &flags[2 * r + 1];
    }
  }
  int nranks;
  std::vector<BoardLine> lines;
  std::vector<BoardNote> notes;
  std::vector<BoardFlag> flags;
  std::vector<uint8_t> slots;
  std::vector<BoardView> views;
};

// Peers' memory in one process: windows and addresses are this process's.
class HeapPeerMemory final : public PeerMemory {
 public:
  Result<uint8_t*> resolveWindow(int, const SharedWindow& window, size_t) override {
    return reinterpret_cast<uint8_t*>(window.base + window.offset);
  }
  Status pull(int, uint64_t remote, void* local, size_t bytes) override {
    std::memcpy(local, reinterpret_cast<const void*>(remote), bytes);
    ++pulls;
    return Status();
  }
  Status push(int, uint64_t remote, const void* local, size_t bytes) override {
    std::memcpy(reinterpret_cast<void*>(remote), local, bytes);
    return Status();
  }
  Result<bool> probe(int, uint64_t, size_t, bool, std::string*) override { return true; }
  bool adviseHugePages(const void*, size_t) override { return false; }

  int pulls = 0;
};

class HeapBoard final : public TeamBoard {
 public:
  HeapBoard(HeapTeam* team, int rank) : team_(team), rank_(rank) {}

  TeamOffer offer() const override {
    TeamOffer offer;
    offer.algorithms =
        teamBit(Algorithm::kBoard) | teamBit(Algorithm::kDirect) | teamBit(Algorithm::kCma);
    offer.boardBytes = kSlotBytes;
    offer.boardTwoShotBytes = 1024;
    offer.cmaMaxBytes = SIZE_MAX;
    return offer;
  }
  int rank() const override { return rank_; }
  int nranks() const override { return team_->nranks; }
  const BoardView* views() const override { return team_->views.data(); }
  uint64_t pidNamespace() const override { return 1; }
  Status publish(std::atomic<uint64_t>& word, uint64_t sequence, bool) override {
    word.store(sequence, std::memory_order_seq_cst);
    return Status();
  }
  Status awaitPublished(uint64_t sequence, const BoardWait& wait) override {
    const int parity = static_cast<int>(sequence & 1);
    return waitUntil(wait, [&](const BoardView& view) {
      return view.line[parity]->sequence.load() == sequence ||
             view.note[parity]->sequence.load() == sequence;
    });
  }
  Status meet(BoardMeeting which, uint64_t sequence, uint32_t value, const char*,
              const BoardWait& wait) override {
    auto flag = [which](const BoardView& view) {
      return which == BoardMeeting::kDone ? view.done : view.probed;
    };
    flag(team_->views[rank_])->value = value;
    flag(team_->views[rank_])->sequence.store(sequence);
    return waitUntil(wait, [&](const BoardView& view) { return flag(view)->sequence >= sequence; });
  }
  PeerMemory& peerMemory() override { return memory; }

  HeapPeerMemory memory;

 private:
  template <typename Ready>
  Status waitUntil(const BoardWait& wait, Ready ready) {
    const auto deadline = std::chrono::steady_clock::now() + wait.timeout;
    for (int peer = 0; peer < team_->nranks; ++peer) {
      while (!ready(team_->views[peer])) {
        if (std::chrono::steady_clock::now() > deadline) {
          return timeoutError("rank " + std::to_string(peer) + " did not publish", peer);
        }
        std::this_thread::yield();
      }
    }
    return Status();
  }

  HeapTeam* team_;
  int rank_;
};

// Elements of each rank's input, its output, and the expected output (float64 math on
// small integers: exact in float32).
struct Case {
  CollectiveKind kind;
  size_t count;
  int root = 0;
};
size_t inputCount(const Case& c, int n) {
  switch (c.kind) {
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kScatter:
      return c.count * n;
    default:
      return c.count;
  }
}
size_t outputCount(const Case& c, int n) {
  switch (c.kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kGather:
      return c.count * n;
    default:
      return c.count;
  }
}
double valueOf(int rank, size_t i) { return static_cast<double>((rank * 7 + i) % 13 + 1); }

std::vector<double> expected(const Case& c, int n, int rank) {
  std::vector<double> out(outputCount(c, n), -1);
  auto sum = [&](size_t i) {
    double s = 0;
    for (int r = 0; r < n; ++r) s += valueOf(r, i);
    return s;
  };
  for (size_t i = 0; i < out.size(); ++i) {
    switch (c.kind) {
      case CollectiveKind::kAllReduce:
        out[i] = sum(i);
        break;
      case CollectiveKind::kReduce:
        if (rank == c.root) out[i] = sum(i);
        break;
      case CollectiveKind::kReduceScatter:
        out[i] = sum(rank * c.count + i);
        break;
      case CollectiveKind::kAllGather:
        out[i] = valueOf(static_cast<int>(i / c.count), i % c.count);
        break;
      case CollectiveKind::kBroadcast:
        out[i] = valueOf(c.root, i);
        break;
      case CollectiveKind::kAllToAll:  // block p comes from rank p's block `rank`
        out[i] = valueOf(static_cast<int>(i / c.count), rank * c.count + i % c.count);
        break;
      case CollectiveKind::kGather:
        if (rank == c.root) out[i] = valueOf(static_cast<int>(i / c.count), i % c.count);
        break;
      case CollectiveKind::kScatter:
        out[i] = valueOf(c.root, rank * c.count + i);
        break;
      default:
        break;
    }
  }
  return out;
}

struct RankResult {
  Result<TeamOutcome> outcome = TeamOutcome{};
  std::vector<float> output;
};

// Runs `c` on `n` ranks, each with `algorithms` and `tagOf(rank)`.
std::vector<RankResult> runOnHeap(const Case& c, int n, TeamAlgorithms algorithms,
                                  uint64_t (*tagOf)(int) = nullptr,
                                  std::atomic<int>* pulls = nullptr) {
  HeapTeam team(n);
  std::vector<RankResult> results(n);
  std::atomic<bool> cancelled{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      HeapBoard board(&team, r);
      BoardCollectives collectives(board);
      std::vector<float> input(inputCount(c, n));
      for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>(valueOf(r, i));
      results[r].output.assign(outputCount(c, n), -1.0f);
      CollectiveArgs args;
      args.kind = c.kind;
      args.count = c.count;
      args.root = c.root;
      const uint64_t tag = tagOf != nullptr ? tagOf(r) : 0x5eed;
      results[r].outcome = collectives.run(args, algorithms, /*fallback=*/false, FoldOrder{}, tag,
                                           input.data(), results[r].output.data(), 5s, cancelled);
      if (pulls != nullptr) *pulls += board.memory.pulls;
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

void expectExact(const Case& c, int n, const std::vector<RankResult>& results, Algorithm ran) {
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(results[r].outcome.isOk()) << results[r].outcome.status().toString();
    EXPECT_EQ(results[r].outcome->ran, ran) << "rank " << r;
    const std::vector<double> want = expected(c, n, r);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(static_cast<double>(results[r].output[i]), want[i])
          << collectiveName(c.kind) << " rank " << r << " element " << i;
    }
  }
  // Every rank that computes the same output holds the same bits.
  if (c.kind == CollectiveKind::kAllReduce || c.kind == CollectiveKind::kAllGather ||
      c.kind == CollectiveKind::kBroadcast) {
    for (int r = 1; r < n; ++r) EXPECT_EQ(results[r].output, results[0].output);
  }
}

class BoardCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(BoardCollectivesTest, EveryBoardCollectiveInALineInTheSlotsAndInTwoShots) {
  const int n = GetParam();
  const CollectiveKind kinds[] = {CollectiveKind::kAllReduce,     CollectiveKind::kReduce,
                                  CollectiveKind::kReduceScatter, CollectiveKind::kAllGather,
                                  CollectiveKind::kBroadcast,     CollectiveKind::kAllToAll,
                                  CollectiveKind::kGather,        CollectiveKind::kScatter};
  // 2 floats: one line per rank; 100: the slots; 600 (2400 B): an all-reduce in two shots.
  for (size_t count : {size_t{2}, size_t{100}, size_t{600}}) {
    for (CollectiveKind kind : kinds) {
      const Case c{kind, count, n - 1};
      if (inputCount(c, n) * sizeof(float) > kSlotBytes) continue;  // not the board's
      const uint64_t twoShots = boardTwoShotCount();
      expectExact(c, n, runOnHeap(c, n, teamBit(Algorithm::kBoard)), Algorithm::kBoard);
      if (kind == CollectiveKind::kAllReduce && count == 600) {
        EXPECT_EQ(boardTwoShotCount(), twoShots + n);
      }
    }
  }
}

TEST_P(BoardCollectivesTest, CmaRunsThroughTheBoardsPullAndPush) {
  const int n = GetParam();
  // Larger than the slots: only single copy can run them.
  for (CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kAllToAll,
                              CollectiveKind::kGather, CollectiveKind::kScatter}) {
    const Case c{kind, 3000, 0};
    std::atomic<int> pulls{0};
    expectExact(c, n, runOnHeap(c, n, teamBit(Algorithm::kCma), nullptr, &pulls), Algorithm::kCma);
    EXPECT_GT(pulls.load(), 0) << collectiveName(kind);
  }
}

TEST_P(BoardCollectivesTest, AFingerprintMismatchNamesThePeerOnEveryRank) {
  const int n = GetParam();
  const Case c{CollectiveKind::kAllReduce, 100, 0};
  auto tagOf = [](int rank) -> uint64_t { return rank == 1 ? 0xbad : 0x5eed; };
  const std::vector<RankResult> results = runOnHeap(c, n, teamBit(Algorithm::kBoard), tagOf);
  for (int r = 0; r < n; ++r) {
    ASSERT_FALSE(results[r].outcome.isOk()) << "rank " << r;
    EXPECT_EQ(results[r].outcome.status().code(), StatusCode::kMismatch);
    EXPECT_EQ(results[r].output, std::vector<float>(outputCount(c, n), -1.0f))
        << "rank " << r << " wrote output";
  }
  EXPECT_NE(results[0].outcome.status().message().find("rank 1"), std::string::npos)
      << results[0].outcome.status().toString();
}

INSTANTIATE_TEST_SUITE_P(Ranks, BoardCollectivesTest, ::testing::Values(2, 3));

}  // namespace
}  // namespace collie
