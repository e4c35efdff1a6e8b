#include "core/team/board_collectives.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/kernel/reduce_backend.h"
#include "core/plan/fingerprint.h"
#include "core/team/direct_share.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace collie {
namespace {

// Asks for the cache line at `p` in exclusive state, so that a later store to it does
// not wait for other cores' copies to be invalidated. PREFETCHW where cpuid says the CPU
// has it (leaf 0x80000001, ECX bit 8), else nothing.
void prefetchForWrite(const void* p) {
#if defined(__x86_64__)
  static const bool supported = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(0x80000001, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 8)) != 0;
  }();
  if (supported) asm volatile("prefetchw (%0)" ::"r"(p));
#else
  (void)p;
#endif
}

std::atomic<uint64_t> gTwoShots{0};
std::atomic<uint64_t> gDirectFirst{0};

// The largest collective the board or direct (registered buffers) runs on the caller's
// thread. An inline run blocks the caller until every rank has joined and the copies are
// done; above this the progress thread runs it, so that the caller goes on computing (a
// DDP bucket's all-reduce overlaps the rest of the backward pass). 256 KiB was the
// board's whole size before it grew to 2 MiB.
constexpr size_t kInlineBoardMaxBytes = 256 * 1024;

}  // namespace

uint64_t boardTwoShotCount() { return gTwoShots.load(std::memory_order_relaxed); }
uint64_t boardDirectFirstCount() { return gDirectFirst.load(std::memory_order_relaxed); }

BoardCollectives::BoardCollectives(TeamBoard& board)
    : board_(board),
      peers_(board.peerMemory()),
      rank_(board.rank()),
      nranks_(board.nranks()),
      offer_(board.offer()),
      views_(board.views()),
      pidNamespace_(board.pidNamespace()),
      scratch_(static_cast<uint8_t*>(std::aligned_alloc(64, kDirectTileBytes))),
      directInputs_(nranks_),
      directOutputs_(nranks_),
      directSources_(nranks_),
      crossMemoryRanks_(nranks_) {}

BoardCollectives::~BoardCollectives() = default;

bool BoardCollectives::runsInline(const CollectiveArgs& args, TeamAlgorithms algorithms,
                                  const void* input, const void* output) const {
  const size_t bytes = args.count * dataTypeSize(args.dtype);
  // Larger ones are queued whatever their path, so that they overlap the caller's work (a
  // DDP bucket beside the rest of backward); a caller that waits at once runs its queued
  // collective itself (docs/decisions/who-runs-a-collective.md).
  if (bytes > kInlineBoardMaxBytes) return false;
  if (!isLarge(args, bytes)) return true;
  if (args.kind != CollectiveKind::kAllReduce || !teamHas(algorithms, Algorithm::kDirect)) {
    return false;  // a check, then declined; or cma, which waits for every rank
  }
  return buffersRegistered(input, output, bytes);
}

Result<TeamOutcome> BoardCollectives::run(const CollectiveArgs& args, TeamAlgorithms algorithms,
                                          bool fallback, const FoldOrder& fold, uint64_t tag,
                                          const void* input, void* output,
                                          std::chrono::microseconds timeout,
                                          const std::atomic<bool>& cancelled) {
  const size_t bytes = args.count * dataTypeSize(args.dtype);
  const BoardWait wait{timeout, &cancelled};
  const bool board = teamHas(algorithms, Algorithm::kBoard) && !isLarge(args, bytes);
  const bool offersDirect =
      args.kind == CollectiveKind::kAllReduce && teamHas(algorithms, Algorithm::kDirect);
  // Where the board can run it, single copy goes first only while cma may run (the tuner
  // tried it first because it is cheaper there), or direct when every rank's buffers were
  // registered last time: else direct would pay a meeting before the board for nothing.
  const bool cmaFirst = teamSupports(Algorithm::kCma, args.kind) &&
                        teamHas(algorithms, Algorithm::kCma) &&
                        crossMemoryStateFor(args.kind) != CrossMemoryState::kDenied;
  const bool directFirst = offersDirect && directLikely_;
  if (board && directFirst && !cmaFirst) gDirectFirst.fetch_add(1, std::memory_order_relaxed);
  if (!board || cmaFirst || directFirst) {
    // The board after it counts as its fallback.
    const Call call{args, algorithms, fallback || board, board, fold, tag, input, output, wait};
    Result<TeamOutcome> outcome = runSingleCopy(call);
    if (!board || !outcome.isOk() || !outcome->declined()) return outcome;
    // Every rank read the same notes, so every rank goes on to the board alike, with
    // the next sequence number.
  }
  return runBoard(args, bytes, tag, input, output, wait, offersDirect);
}

bool BoardCollectives::buffersRegistered(const void* input, const void* output,
                                         size_t bytes) const {
  SharedWindow window;
  return findSharedWindow(input, bytes, &window) &&
         (output == input || findSharedWindow(output, bytes, &window));
}

Status BoardCollectives::waitForPeers(uint64_t sequence, uint64_t tag, size_t bytes, bool inLine,
                                      const BoardWait& wait) {
  const int parity = static_cast<int>(sequence & 1);
  // A peer publishes each sequence number in one place: its line, or its note (a
  // collective of another size). Watching both turns that disagreement into a Mismatch
  // instead of a timeout; this rank's own lane is checked first.
  auto inLineOf = [&](int peer) {
    return views_[peer].line[parity]->sequence.load(std::memory_order_acquire) == sequence;
  };
  auto inNoteOf = [&](int peer) {
    return views_[peer].note[parity]->sequence.load(std::memory_order_acquire) == sequence;
  };
  // The fast path: every peer is there. Else the board's wait, which settles with claims.
  bool everyone = true;
  for (int peer = 0; peer < nranks_ && everyone; ++peer) {
    everyone = peer == rank_ ||
               (inLine ? inLineOf(peer) || inNoteOf(peer) : inNoteOf(peer) || inLineOf(peer));
  }
  if (!everyone) COLLIE_RETURN_IF_ERROR(board_.awaitPublished(sequence, wait));
  for (int peer = 0; peer < nranks_; ++peer) {
    if (peer == rank_) continue;
    const BoardNote* note = views_[peer].note[parity];
    const bool peerInLine = inLineOf(peer);
    const uint64_t peerTag = peerInLine ? views_[peer].line[parity]->tag : note->tag;
    if (peerTag != tag) {
      return mismatchError("rank " + std::to_string(rank_) + " runs " + describeFingerprint(tag) +
                               " but rank " + std::to_string(peer) + " runs " +
                               describeFingerprint(peerTag) + " (" +
                               describeMismatch(tag, peerTag, peer) + ")",
                           peer);
    }
    if (peerInLine != inLine) {
      return mismatchError("rank " + std::to_string(peer) + " published " +
                               (peerInLine ? "at most " : "more than ") +
                               std::to_string(kBoardLineBytes) + " bytes for " +
                               describeFingerprint(tag) + ", rank " + std::to_string(rank_) +
                               " the opposite (count differs)",
                           peer);
    }
    // A line holds kBoardLineBytes whatever was published; only read what this rank
    // expects.
    if (inLine) continue;
    if (note->bytes > offer_.boardBytes || (bytes != SIZE_MAX && note->bytes != bytes)) {
      return mismatchError("rank " + std::to_string(peer) + " published " +
                               std::to_string(note->bytes) + " bytes, expected " +
                               std::to_string(bytes),
                           peer);
    }
  }
  return Status();
}

// Inlined into run(), its one caller: the board's path is the small-message fast path.
[[gnu::always_inline]] inline Result<TeamOutcome> BoardCollectives::runBoard(
    const CollectiveArgs& args, size_t bytes, uint64_t tag, const void* input, void* output,
    const BoardWait& wait, bool offersDirect) {
  const int n = nranks_;
  const int rank = rank_;
  const uint64_t sequence = ++sequence_;
  const int parity = static_cast<int>(sequence & 1);

  // Publish: in one line when every rank's part fits (every rank decides alike), else
  // in the data slot with its note.
  const size_t mine = boardPartBytes(args, bytes, n, rank);
  const bool inLine = boardPartBytes(args, bytes, n, args.root) <= kBoardLineBytes;
  const bool twoShot = args.kind == CollectiveKind::kAllReduce && !inLine && n > 1 &&
                       bytes >= offer_.boardTwoShotBytes;
  const BoardView& own = views_[rank];
  if (inLine) {
    BoardLine* line = own.line[parity];
    if (mine > 0) std::memcpy(line->data, input, mine);
    line->tag = tag;
    COLLIE_RETURN_IF_ERROR(board_.publish(line->sequence, sequence, /*wake=*/true));
  } else {
    uint8_t* slot = own.slot[parity];
    if (twoShot && !twoShotReadsOwnSlot(input, output, rank)) {
      // Each peer reads only its own share of this slot: this rank's share stays out.
      const size_t es = dataTypeSize(args.dtype);
      const ShareRange ownShare = shareRange(args.count, es, n, rank);
      std::memcpy(slot, input, ownShare.begin * es);
      std::memcpy(slot + ownShare.end * es, static_cast<const uint8_t*>(input) + ownShare.end * es,
                  bytes - ownShare.end * es);
    } else if (mine > 0) {
      std::memcpy(slot, input, mine);
    }
    BoardNote* note = own.note[parity];
    note->tag = tag;
    note->bytes = mine;
    note->registered = offersDirect && buffersRegistered(input, output, bytes) ? 1 : 0;
    COLLIE_RETURN_IF_ERROR(board_.publish(note->sequence, sequence, /*wake=*/true));
  }

  // Everyone else's broadcast or scatter slot is empty; every other collective publishes
  // alike.
  const bool rootOnly =
      args.kind == CollectiveKind::kBroadcast || args.kind == CollectiveKind::kScatter;
  const size_t expected = rootOnly ? SIZE_MAX : mine;
  COLLIE_RETURN_IF_ERROR(waitForPeers(sequence, tag, expected, inLine, wait));
  if (offersDirect && !inLine) {
    bool everyRank = true;
    for (int r = 0; r < n; ++r) everyRank = everyRank && views_[r].note[parity]->registered == 1;
    directLikely_ = everyRank;
  }
  auto slotOf = [&](int r) -> const uint8_t* {
    return inLine ? views_[r].line[parity]->data : views_[r].slot[parity];
  };

  const ReduceBackend& kernels = hostReduceBackend();
  const int divisor = args.op == ReduceOp::kAvg ? n : 0;
  auto reduceAll = [&](uint8_t* dst, size_t offset) {
    if (n == 1) {
      if (divisor > 1) {
        kernels.divide(dst, slotOf(0) + offset, args.count, args.dtype, divisor);
      } else if (dst != slotOf(0) + offset) {
        std::memmove(dst, slotOf(0) + offset, bytes);
      }
      return;
    }
    kernels.reduce(dst, slotOf(0) + offset, slotOf(1) + offset, args.count, args.dtype, args.op,
                   n == 2 ? divisor : 0);
    for (int r = 2; r < n; ++r) {
      kernels.reduce(dst, dst, slotOf(r) + offset, args.count, args.dtype, args.op,
                     r == n - 1 ? divisor : 0);
    }
  };
  uint8_t* out = static_cast<uint8_t*>(output);
  switch (args.kind) {
    case CollectiveKind::kAllReduce:
      if (twoShot) {
        COLLIE_RETURN_IF_ERROR(twoShotAllReduce(args, input, out, sequence, wait));
      } else if (bytes) {
        reduceAll(out, 0);
      }
      break;
    case CollectiveKind::kReduce:
      if (bytes && rank == args.root) reduceAll(out, 0);
      break;
    case CollectiveKind::kReduceScatter:
      if (bytes) reduceAll(out, rank * bytes);
      break;
    case CollectiveKind::kAllGather:
      for (int r = 0; r < n && bytes; ++r) {
        if (out + r * bytes != slotOf(r)) std::memcpy(out + r * bytes, slotOf(r), bytes);
      }
      break;
    case CollectiveKind::kBroadcast:
      if (bytes) std::memcpy(out, slotOf(args.root), bytes);
      break;
    case CollectiveKind::kAllToAll:  // block `rank` of every rank's input
      for (int r = 0; r < n && bytes; ++r)
        std::memcpy(out + r * bytes, slotOf(r) + rank * bytes, bytes);
      break;
    case CollectiveKind::kGather:
      for (int r = 0; r < n && bytes && rank == args.root; ++r) {
        std::memcpy(out + r * bytes, slotOf(r), bytes);
      }
      break;
    case CollectiveKind::kScatter:
      if (bytes) std::memcpy(out, slotOf(args.root) + rank * bytes, bytes);
      break;
    default:
      break;
  }
  // Own the line the next small collective publishes in while the caller works: in the
  // VM's slow mode (a cache line takes ~180 ns between the cores) the publication then
  // costs one crossing instead of two. 8 B, 2 ranks, interleaved, slow mode: 0.20-0.27
  // against 0.31-0.36 us; fast mode 0.11-0.13 either way (docs/decisions/small-message-path.md).
  if (inLine) prefetchForWrite(own.line[parity ^ 1]);
  return TeamOutcome{Algorithm::kBoard};
}

Status BoardCollectives::twoShotAllReduce(const CollectiveArgs& args, const void* input,
                                          uint8_t* out, uint64_t sequence, const BoardWait& wait) {
  const int n = nranks_;
  const int rank = rank_;
  const int parity = static_cast<int>(sequence & 1);
  const size_t es = dataTypeSize(args.dtype);
  const ReduceBackend& kernels = hostReduceBackend();
  const int divisor = args.op == ReduceOp::kAvg ? n : 0;
  gTwoShots.fetch_add(1, std::memory_order_relaxed);
  // This rank's share, in rank order as the one-shot board reduces every element.
  const ShareRange own = shareRange(args.count, es, n, rank);
  const size_t offset = own.begin * es;
  const size_t count = own.end - own.begin;
  const bool ownFromSlot = twoShotReadsOwnSlot(input, out, rank);
  auto source = [&](int r) -> const uint8_t* {
    return (r == rank && !ownFromSlot ? static_cast<const uint8_t*>(input)
                                      : views_[r].slot[parity]) +
           offset;
  };
  uint8_t* dst = out + offset;
  if (count > 0) {
    kernels.reduce(dst, source(0), source(1), count, args.dtype, args.op, n == 2 ? divisor : 0);
    for (int r = 2; r < n; ++r) {
      kernels.reduce(dst, dst, source(r), count, args.dtype, args.op, r == n - 1 ? divisor : 0);
    }
    // Its result where the peers copy it from: this rank's own share of its slot, which
    // no peer reads before this meeting.
    std::memcpy(views_[rank].slot[parity] + offset, dst, count * es);
  }
  COLLIE_RETURN_IF_ERROR(board_.meet(BoardMeeting::kDone, sequence, 0,
                                     "reduce its share of the board all-reduce", wait));
  for (int r = 0; r < n; ++r) {
    if (r == rank) continue;
    const ShareRange theirs = shareRange(args.count, es, n, r);
    if (theirs.end > theirs.begin) {
      std::memcpy(out + theirs.begin * es, views_[r].slot[parity] + theirs.begin * es,
                  (theirs.end - theirs.begin) * es);
    }
  }
  return Status();
}

}  // namespace collie
