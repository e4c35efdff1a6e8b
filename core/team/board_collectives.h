// The team collectives on a team board (core/transport/team_board.h): the board
// algorithm and the single-copy all-reduces direct and cma, as one TeamCollectives
// (core/team/team_collectives.h) that the executor runs team steps through.
//
// Board: for collective number s each rank copies its part into its slot s % 2 (or its
// line, when every rank's part fits one: sequence, fingerprint and data in one cache
// line), stores the collective's fingerprint and publishes s; then it waits until every
// rank published s and computes its output straight from the slots, combining ranks in
// rank order so that every rank gets the same bits. No queue, no allocation, no clock
// read and no syscall on the fast path (the board's waits spin first). An all-reduce from
// TeamOffer::boardTwoShotBytes on runs in two shots: each rank reduces its share from the
// slots into its output and its own slot's share, a meeting, then it copies the peers'
// shares. Reusing slot s % 2 at s + 2 is safe without more flags: a rank opens round s + 1
// only after it finished reading the slots of s.
//
// Direct before the board: an all-reduce that fits the board and whose team step offers
// direct (the tuner's model, from COLLIE_SHM_DIRECT_MIN) publishes on the board whether
// its buffers are registered; when every rank's were, the next such all-reduce tries
// direct first (the single copy below, the board as its fallback). Every rank learns it
// from the same notes, so every rank goes first to the same path.
//
// Single copy (an all-reduce whose team step tries direct or cma): each rank publishes
// in its note whether its buffers are registered and where (collie/shared_memory.h),
// and whether it would go through cross-memory attach (cma tried, not denied, in place
// or at most the agreed TeamOffer::cmaMaxBytes) and its buffer addresses. Every rank
// reads the same notes, so every rank decides alike: direct when every rank's buffers are
// registered (core/team/direct_share.h), else cma when every rank would
// (core/team/cross_memory.h), else declined (then the board, when the step tries it and
// the collective fits, else the fallback schedule). Both reduce share r of the elements
// on rank r into every output, then meet. The first cma collective probes cross-memory
// attach on every rank; if any rank is denied, every rank says so in the log and cma
// declines from then on. The equal exchanges (all-to-all, gather, scatter) run on the
// board (each rank copies its blocks out of the slots) or through cma the same way (each
// rank pulls the blocks it receives from the senders' inputs, then the meeting).
//
// A team step with no algorithm (the fingerprint check) publishes the note too: the
// ranks whose collective cannot complete before every rank started it (all-reduce,
// reduce-scatter, all-gather, all-to-all) decline at once; the others (broadcast, reduce,
// gather, scatter, whose root or leaves could finish alone and lap a slow peer's slot)
// wait for every rank's note, so ranks running different collectives fail with
// Mismatch. A peer whose fingerprint differs fails the collective with kMismatch naming
// it before any output is written. Every failure is one outcome on every rank (the
// board's verdict).
//
// Thread safety: used by one thread at a time (the engine serialises collectives).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/team/cross_memory.h"
#include "core/team/team_collectives.h"
#include "core/transport/team_board.h"

namespace collie {

// Bytes rank `rank` publishes for `args` (`bytes` = count * dtype size) on `nranks` ranks.
inline size_t boardPartBytes(const CollectiveArgs& args, size_t bytes, int nranks, int rank) {
  switch (args.kind) {
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll:
      return bytes * nranks;
    case CollectiveKind::kBroadcast:
      return rank == args.root ? bytes : 0;
    case CollectiveKind::kScatter:
      return rank == args.root ? bytes * nranks : 0;
    case CollectiveKind::kBarrier:
      return 0;
    default:
      return bytes;
  }
}

// How many board all-reduces this process ran in two shots, and how many all-reduces
// that the board could carry tried direct first because every rank's buffers were
// registered at the last such call (tests: shows the path ran).
uint64_t boardTwoShotCount();
uint64_t boardDirectFirstCount();

class BoardCollectives final : public TeamCollectives {
 public:
  explicit BoardCollectives(TeamBoard& board);
  ~BoardCollectives() override;

  TeamOffer offer() const override { return offer_; }
  // Collectives up to 256 KiB per rank (larger ones would block the caller for their
  // copies): those that fit the board, and single copy when this rank's buffers are
  // registered (an unregistered large all-reduce may be declined: no point blocking the
  // caller).
  bool runsInline(const CollectiveArgs& args, TeamAlgorithms algorithms, const void* input,
                  const void* output) const override;
  Result<TeamOutcome> run(const CollectiveArgs& args, TeamAlgorithms algorithms, bool fallback,
                          const FoldOrder& fold, uint64_t tag, const void* input, void* output,
                          std::chrono::microseconds timeout,
                          const std::atomic<bool>& cancelled) override;

 private:
  // What one collective runs with, passed down the paths.
  struct Call {
    const CollectiveArgs& args;
    TeamAlgorithms algorithms;
    bool fallback;
    bool boardNext;  // declined, it goes on to the board (with the next sequence number)
    const FoldOrder& fold;
    uint64_t tag;
    const void* input;
    void* output;
    BoardWait wait;
  };

  // Whether the collective is too large for the slots on some rank: only single copy
  // (an all-reduce, an equal exchange) or the fingerprint check can run it.
  bool isLarge(const CollectiveArgs& args, size_t bytes) const {
    return boardPartBytes(args, bytes, nranks_, args.root) > offer_.boardBytes ||
           boardPartBytes(args, bytes, nranks_, (args.root + 1) % nranks_) > offer_.boardBytes;
  }
  // The board itself (the collective fits the slots; `bytes`: its count's bytes).
  // `offersDirect`: an all-reduce whose step offers direct (it publishes whether its
  // buffers are registered, and learns directLikely_).
  Result<TeamOutcome> runBoard(const CollectiveArgs& args, size_t bytes, uint64_t tag,
                               const void* input, void* output, const BoardWait& wait,
                               bool offersDirect);
  // Whether both buffers are allocShared memory (collie/shared_memory.h), as direct needs.
  bool buffersRegistered(const void* input, const void* output, size_t bytes) const;
  // In place from the third rank on, the two-shot all-reduce's first reductions
  // overwrite this rank's input before it is added: it reads its share from its own
  // slot, which then holds it too.
  static bool twoShotReadsOwnSlot(const void* input, const void* output, int rank) {
    return input == output && rank >= 2;
  }
  Status twoShotAllReduce(const CollectiveArgs& args, const void* input, uint8_t* out,
                          uint64_t sequence, const BoardWait& wait);
  // Waits until every rank published `sequence` and checks what they published: the same
  // tag, the same lane (`inLine`), and in the slot lane `bytes` each (SIZE_MAX: any).
  Status waitForPeers(uint64_t sequence, uint64_t tag, size_t bytes, bool inLine,
                      const BoardWait& wait);
  // Single copy (direct, cma) or the fingerprint check; declined when neither runs
  // (single_copy.cc).
  Result<TeamOutcome> runSingleCopy(const Call& call);
  // The cma collective, once every rank chose it.
  Result<TeamOutcome> runCrossMemory(const Call& call, uint64_t sequence);
  // Whether this rank would take cma for `call` (published; cma runs when every rank
  // would). `hugePages`: its plain buffers are in huge pages (adviseHugePages).
  bool wantsCrossMemory(const Call& call, bool hugePages) const;
  bool crossMemoryPossible(const Call& call) const;
  // Asks for huge pages behind an all-reduce's plain buffers; true when both are in them.
  bool adviseHugePages(const Call& call, size_t bytes);
  // Declined on every rank alike: the outcome, or without a fallback an error saying
  // `why` (a forced team algorithm that cannot run this collective).
  Result<TeamOutcome> declined(const Call& call, const std::string& why) const;

  TeamBoard& board_;
  PeerMemory& peers_;  // board_.peerMemory()
  const int rank_;
  const int nranks_;
  const TeamOffer offer_;
  const BoardView* views_;
  const uint64_t pidNamespace_;
  uint64_t sequence_ = 0;  // the last round this rank opened on the board
  // Every rank's buffers were registered at the last all-reduce whose team step offered
  // direct (read from the notes every rank read, so equal on every rank): the next one
  // that fits the board tries direct first. Direct before the board costs a meeting when
  // it declines, which a program of plain buffers then never pays.
  bool directLikely_ = false;
  struct FreeScratch {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, FreeScratch> scratch_;  // kDirectTileBytes, 64-byte aligned
  // Cross-memory attach: untested until the first cma all-reduce, then the same on
  // every rank (decided from what every rank published). The exchanges only read, and
  // only from the ranks they receive from: they probe once for themselves.
  enum class CrossMemoryState { kUntested, kAllowed, kDenied };
  CrossMemoryState crossMemoryState_ = CrossMemoryState::kUntested;
  CrossMemoryState pullState_ = CrossMemoryState::kUntested;
  CrossMemoryState& crossMemoryStateFor(CollectiveKind kind) {
    return kind == CollectiveKind::kAllReduce ? crossMemoryState_ : pullState_;
  }
  const CrossMemoryState& crossMemoryStateFor(CollectiveKind kind) const {
    return kind == CollectiveKind::kAllReduce ? crossMemoryState_ : pullState_;
  }
  CrossMemoryAllReduce crossMemory_;
  // Reused by every single-copy collective (no allocation per call): every rank's input
  // and output (direct), every rank's addresses (cma); nranks entries each.
  std::vector<const uint8_t*> directInputs_;
  std::vector<uint8_t*> directOutputs_;
  std::vector<const uint8_t*> directSources_;  // a tile's sources (directAllReduceShare)
  std::vector<CrossMemoryRank> crossMemoryRanks_;
  // A cma all-to-all in place: the blocks this rank sends, copied here before it
  // publishes where its peers read them (its own block stays in place); grows, never
  // shrinks.
  std::unique_ptr<uint8_t[]> inPlaceBlocks_;
  size_t inPlaceBlocksBytes_ = 0;
  // Where this rank's peers read the blocks of an all-to-all in place of blockBytes > 0
  // each: a copy of them in inPlaceBlocks_ (null when it cannot be allocated).
  const void* exchangeSource(const Call& call, size_t blockBytes);
};

}  // namespace collie
