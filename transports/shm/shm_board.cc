#include "transports/shm/shm_board.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/kernel/reduce_backend.h"
#include "core/log/log.h"
#include "core/memory/shared_region.h"
#include "core/plan/fingerprint.h"
#include "transports/shm/shm_board_layout.h"
#include "transports/shm/shm_names.h"
#include "transports/shm/shm_segment.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace collie::shm {
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
std::atomic<uint64_t> gSharedCpuWaits{0};
std::atomic<uint64_t> gDirectFirst{0};

// Spins before a wait first reads the clock: a peer on another core usually answers
// within them, and then the collective reads no clock at all.
constexpr uint32_t kSpinsBeforeClock = 32;
// The largest collective the board or direct (registered buffers) runs on the caller's
// thread. An inline run blocks the caller until every rank has joined and the copies are
// done; above this the progress thread runs it, so that the caller goes on computing (a
// DDP bucket's all-reduce overlaps the rest of the backward pass). 256 KiB was the
// board's whole size before it grew to 2 MiB.
constexpr size_t kInlineBoardMaxBytes = 256 * 1024;

}  // namespace

uint64_t boardTwoShotCount() { return gTwoShots.load(std::memory_order_relaxed); }
uint64_t boardSharedCpuWaitCount() { return gSharedCpuWaits.load(std::memory_order_relaxed); }
uint64_t boardDirectFirstCount() { return gDirectFirst.load(std::memory_order_relaxed); }

uint64_t boardTwoShotMin(const ShmKnobs& knobs, bool ranksOutnumberCores) {
  const int64_t configured = knobs.twoShotMinBytes;
  if (configured <= 0) return UINT64_MAX;
  // Measured (docs/decisions/two-shot-board.md): with a core per rank two shots win
  // from 4 KiB on 2 ranks; 4 ranks on 2 cores pay a context switch for the meeting and
  // win only from 64 KiB.
  return ranksOutnumberCores ? std::max<uint64_t>(configured, kOversubscribedTwoShotMin)
                             : static_cast<uint64_t>(configured);
}

TeamOffer boardTeamOffer(const ShmKnobs& knobs, int nranks, bool ranksOutnumberCores) {
  TeamOffer offer;
  const int64_t slot = knobs.oneShotMaxBytes;
  if (nranks < 2 || slot <= 0) return offer;
  offer.boardBytes = static_cast<size_t>(std::clamp<int64_t>(slot, 0, 16 << 20));
  offer.cmaMaxBytes = static_cast<size_t>(std::max<int64_t>(0, knobs.cmaMaxBytes));
  // Measured on 2 ranks with a core each (docs/decisions/two-shot-board.md): the board
  // in two shots beats cross-memory attach at every size it carries (2 MiB), as it
  // does with more ranks than cores.
  offer.cmaCrossoverBytes =
      ranksOutnumberCores ? SIZE_MAX : static_cast<size_t>(std::max<int64_t>(0, knobs.cmaMinBytes));
  // Registered buffers need no copy through the slots: direct beat the board from 2-4 KiB
  // on 2 ranks, and from 16-32 KiB on 4 ranks sharing 2 cores, where every meeting may
  // wait for a descheduled rank (docs/decisions/direct-before-board.md).
  const auto directMin = static_cast<size_t>(std::max<int64_t>(0, knobs.directMinBytes));
  offer.directCrossoverBytes =
      ranksOutnumberCores ? std::max(directMin, kOversubscribedDirectMin) : directMin;
  offer.boardTwoShotBytes = static_cast<size_t>(
      std::min<uint64_t>(boardTwoShotMin(knobs, ranksOutnumberCores), SIZE_MAX));
  offer.algorithms = teamBit(Algorithm::kBoard) | teamBit(Algorithm::kDirect);
  if (offer.cmaMaxBytes > 0) offer.algorithms |= teamBit(Algorithm::kCma);
  return offer;
}

Board::Board(const TransportContext& ctx, const ShmKnobs& knobs, std::shared_ptr<ShmShared> shared,
             size_t slotBytes, const WaitPolicy& wait)
    : ctx_(ctx),
      shared_(std::move(shared)),
      slotBytes_(slotBytes),
      boards_(ctx.nranks),
      wait_(wait),
      pidNamespace_(currentPidNamespace()),
      scratch_(static_cast<uint8_t*>(std::aligned_alloc(64, kDirectTileBytes))),
      hugePages_(static_cast<size_t>(std::max<int64_t>(0, knobs.hugePageMinBytes)),
                 kHugePageBudgetBytes),
      headerCopies_(ctx.nranks),
      directInputs_(ctx.nranks),
      directOutputs_(ctx.nranks),
      crossMemoryRanks_(ctx.nranks) {}

Board::~Board() {
  for (Mapping& board : boards_) {
    if (board.base != nullptr) munmap(board.base, board.bytes);
  }
  if (!name_.empty()) shm_unlink(name_.c_str());
}

Result<std::unique_ptr<Board>> Board::connect(const TransportContext& ctx, const ShmKnobs& knobs,
                                              std::shared_ptr<ShmShared> shared,
                                              const WaitPolicy& wait) {
  const TeamOffer mine = boardTeamOffer(knobs, ctx.nranks, wait.oversubscribed);
  const size_t slotBytes = mine.boardBytes;
  std::unique_ptr<Board> board(new Board(ctx, knobs, std::move(shared), slotBytes, wait));
  const size_t bytes = boardBytes(slotBytes);

  Result<std::string> name = newShmName(jobScopeTag(ctx.secret, ctx.launcher), kBoardKind);
  if (!name.isOk()) return name.status();
  // From here on the destructor unlinks the name on every failure path, at once.
  board->name_ = std::move(*name);
  int fd = shm_open(board->name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    board->name_.clear();
    return systemError("shm: creating the board", errno);
  }
  int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  void* base =
      err == 0 ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (base == MAP_FAILED) {
    return systemError(
        "shm: sizing or mapping the board (" + std::to_string(bytes) + " bytes; is /dev/shm full?)",
        err != 0 ? err : errno);
  }
  board->boards_[ctx.rank] = Mapping{base, bytes};
  auto* header = static_cast<BoardHeader*>(base);
  header->magic = kBoardMagic;
  header->rank = ctx.rank;
  header->nranks = ctx.nranks;
  header->slotBytes = slotBytes;
  header->crossMemoryCrossover = mine.cmaCrossoverBytes;
  header->crossMemoryMax = teamHas(mine.algorithms, Algorithm::kCma) ? mine.cmaMaxBytes : 0;
  header->directCrossover = mine.directCrossoverBytes;
  header->twoShotMin = boardTwoShotMin(knobs, wait.oversubscribed);  // as in `mine`
  uint64_t crossover = header->crossMemoryCrossover;
  uint64_t twoShotMin = header->twoShotMin;
  uint64_t crossMemoryMax = header->crossMemoryMax;
  uint64_t directCrossover = header->directCrossover;
  COLLIE_RETURN_IF_ERROR(randomBytes(header->nonce, sizeof(header->nonce)));
  for (int parity = 0; parity < 2; ++parity) {
    new (control(base, parity)) SlotControl();
    control(base, parity)->sequence.store(0, std::memory_order_release);
    new (lineSlot(base, parity)) LineSlot();
    lineSlot(base, parity)->sequence.store(0, std::memory_order_release);
  }
  new (doneFlag(base)) DoneFlag();
  doneFlag(base)->sequence.store(0, std::memory_order_release);
  new (crossMemoryFlags(base)) CrossMemoryFlags();
  new (placement(base)) Placement();
  placement(base)->cpu.store(-1, std::memory_order_relaxed);

  const std::string prefix = ctx.jobKey + "/shmboard/";
  const std::string entry = board->name_ + " " + toHex(header->nonce, sizeof(header->nonce));
  COLLIE_RETURN_IF_ERROR(
      ctx.store->set(prefix + std::to_string(ctx.rank), Bytes(entry.begin(), entry.end())));
  const Deadline deadline = Clock::now() + ctx.timeout;
  for (int peer = 0; peer < ctx.nranks; ++peer) {
    if (peer == ctx.rank) continue;
    Result<Bytes> value = ctx.store->get(prefix + std::to_string(peer), deadline);
    if (!value.isOk()) {
      return timeoutError(
          "shm: rank " + std::to_string(peer) + " did not publish its board before the deadline",
          peer);
    }
    std::string text(value->begin(), value->end());
    size_t space = text.find(' ');
    if (space == std::string::npos || !isShmName(text.substr(0, space), kBoardKind)) {
      return remoteError("shm: rank " + std::to_string(peer) + " published a malformed board",
                         peer);
    }
    // Read-write: a rank giving up on a collective claims its peers' sequence words.
    int peerFd = shm_open(text.substr(0, space).c_str(), O_RDWR | O_CLOEXEC, 0);
    if (peerFd < 0)
      return systemError("shm: opening rank " + std::to_string(peer) + "'s board", errno);
    void* peerBase = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, peerFd, 0);
    struct stat info {};
    bool sized = fstat(peerFd, &info) == 0 && static_cast<size_t>(info.st_size) >= bytes;
    close(peerFd);
    if (peerBase == MAP_FAILED) {
      return systemError("shm: mapping rank " + std::to_string(peer) + "'s board", errno);
    }
    board->boards_[peer] = Mapping{peerBase, bytes};
    const auto* peerHeader = static_cast<const BoardHeader*>(peerBase);
    crossover = std::max(crossover, peerHeader->crossMemoryCrossover);
    crossMemoryMax = std::min(crossMemoryMax, peerHeader->crossMemoryMax);
    directCrossover = std::max(directCrossover, peerHeader->directCrossover);
    twoShotMin = std::max(twoShotMin, peerHeader->twoShotMin);
    if (!sized || peerHeader->magic != kBoardMagic || peerHeader->rank != peer ||
        peerHeader->nranks != ctx.nranks || peerHeader->slotBytes != slotBytes ||
        toHex(peerHeader->nonce, sizeof(peerHeader->nonce)) != text.substr(space + 1)) {
      return remoteError("shm: rank " + std::to_string(peer) +
                             "'s board does not match this job (rank, size or nonce; "
                             "is COLLIE_SHM_ONESHOT_MAX equal on every rank?)",
                         peer);
    }
  }
  // Unlink the names once every rank mapped every board.
  COLLIE_RETURN_IF_ERROR(ctx.store->set(prefix + "mapped/" + std::to_string(ctx.rank), Bytes{1}));
  for (int peer = 0; peer < ctx.nranks; ++peer) {
    Result<Bytes> done = ctx.store->get(prefix + "mapped/" + std::to_string(peer), deadline);
    if (!done.isOk()) {
      return timeoutError(
          "shm: rank " + std::to_string(peer) + " did not map the boards before the deadline",
          peer);
    }
  }
  shm_unlink(board->name_.c_str());
  board->name_.clear();
  // Every rank read every header: every rank plans with the same offer.
  board->offer_ = mine;
  board->offer_.cmaCrossoverBytes = static_cast<size_t>(crossover);
  board->offer_.directCrossoverBytes =
      static_cast<size_t>(std::min<uint64_t>(directCrossover, SIZE_MAX));
  board->twoShotMin_ = twoShotMin;
  board->offer_.boardTwoShotBytes = static_cast<size_t>(std::min<uint64_t>(twoShotMin, SIZE_MAX));
  board->offer_.cmaMaxBytes = static_cast<size_t>(crossMemoryMax);
  if (crossMemoryMax == 0) board->offer_.algorithms &= ~teamBit(Algorithm::kCma);
  return board;
}

bool Board::runsInline(const CollectiveArgs& args, TeamAlgorithms algorithms, const void* input,
                       const void* output) const {
  const size_t bytes = args.count * dataTypeSize(args.dtype);
  // Larger ones are queued whatever their path, so that they overlap the caller's work (a
  // DDP bucket beside the rest of backward); a caller that waits at once runs its queued
  // collective itself (docs/decisions/who-runs-a-collective.md).
  if (bytes > kInlineBoardMaxBytes) return false;
  if (!isLarge(args, bytes, ctx_.nranks, slotBytes_)) return true;
  if (args.kind != CollectiveKind::kAllReduce || !teamHas(algorithms, Algorithm::kDirect)) {
    return false;  // a check, then declined; or cma, which waits for every rank
  }
  return buffersRegistered(input, output, bytes);
}

Result<TeamOutcome> Board::run(const CollectiveArgs& args, TeamAlgorithms algorithms, bool fallback,
                               uint64_t tag, const void* input, void* output,
                               std::chrono::microseconds timeout,
                               const std::atomic<bool>& cancelled) {
  notePlacement();
  const size_t bytes = args.count * dataTypeSize(args.dtype);
  const bool board =
      teamHas(algorithms, Algorithm::kBoard) && !isLarge(args, bytes, ctx_.nranks, slotBytes_);
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
    const Call call{args,  algorithms, fallback || board, board,    tag,
                    input, output,     timeout,           cancelled};
    Result<TeamOutcome> outcome = runSingleCopy(call);
    if (!board || !outcome.isOk() || !outcome->declined()) return outcome;
    // Every rank read the same headers, so every rank goes on to the board alike, with
    // the next sequence number.
  }
  return runBoard(args, bytes, tag, input, output, timeout, cancelled, offersDirect);
}

bool Board::buffersRegistered(const void* input, const void* output, size_t bytes) const {
  SharedWindow window;
  return findSharedWindow(input, bytes, &window) &&
         (output == input || findSharedWindow(output, bytes, &window));
}

void Board::notePlacement() {
  const int cpu = sched_getcpu();
  if (cpu == cpu_) return;
  cpu_ = cpu;
  placement(boards_[ctx_.rank].base)->cpu.store(cpu, std::memory_order_relaxed);
}

bool Board::peerSharesCpu(int peer) const {
  return cpu_ >= 0 && placement(boards_[peer].base)->cpu.load(std::memory_order_relaxed) == cpu_;
}

const uint8_t* Board::slotData(int rank, int parity) const {
  return static_cast<const uint8_t*>(boards_[rank].base) + kDataOffset + parity * slotBytes_;
}

template <typename Ready, typename Claimed>
Status Board::waitForAll(Ready ready, Claimed claimed, const char* what,
                         std::chrono::microseconds timeout, const std::atomic<bool>& cancelled) {
  SegmentHeader* doorbell = shared_->mine->header();
  for (int peer = 0; peer < ctx_.nranks; ++peer) {
    if (peer == ctx_.rank) continue;
    for (uint32_t spins = 0; spins < kSpinsBeforeClock && !ready(peer); ++spins) {
      COLLIE_CPU_RELAX();
    }
    if (ready(peer)) continue;
    // Pure spinning first (a peer on another core answers within a microsecond or
    // two), then spinning with sched_yield (lets a peer that shares this core run),
    // then sleeping on the doorbell futex. No pure spin when ranks outnumber cores, nor
    // when the peer last ran on this rank's CPU: it cannot run while this rank spins.
    const auto start = Clock::now();
    const Deadline deadline = start + timeout;
    const bool sharesCpu = peerSharesCpu(peer);
    if (sharesCpu) gSharedCpuWaits.fetch_add(1, std::memory_order_relaxed);
    const auto pureUntil = sharesCpu ? start : start + std::min(wait_.busyPoll, wait_.pureSpin);
    const auto spinUntil = start + wait_.busyPoll;
    uint32_t turns = 0;
    while (!ready(peer)) {
      if (++turns % 16 != 0) {
        COLLIE_CPU_RELAX();
        continue;
      }
      const auto now = Clock::now();
      if (now < pureUntil) continue;
      if (now < spinUntil) {
        // Measured at load ~17 on 2 cores: yielding here gives a 15 us median for 8 B,
        // pure spinning 58 us (the peer we wait for needs our core).
        sched_yield();
        continue;
      }
      shared_->checkLiveness(false);
      for (const auto& state : shared_->peers) {
        // A peer that did its part and then left (finished the collective, closed the
        // communicator or exited) is not a failure: look again once it is seen gone,
        // since it may have been ready since the loop's test (its closing store comes
        // after the one that made it ready).
        if (state->rank == peer && (state->dead || state->segment->header()->closed.load()) &&
            !ready(peer)) {
          return remoteError("rank " + std::to_string(peer) +
                                 " is gone (its process exited or closed the communicator)",
                             peer);
        }
      }
      if (const uint64_t marker = claimed(peer); marker != 0 && !ready(peer)) {
        return verdict::claimedError(marker, peer, ctx_.rank);
      }
      if (cancelled.load(std::memory_order_relaxed)) {
        return abortedError("team collective aborted on rank " + std::to_string(ctx_.rank));
      }
      if (now > deadline) {
        return timeoutError(
            "rank " + std::to_string(peer) + " did not " + what + " before the deadline", peer);
      }
      // Sleep on our doorbell; publishers ring it only when someone sleeps.
      doorbell->sleepers.fetch_add(1, std::memory_order_seq_cst);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      const uint32_t seen = doorbell->doorbell.load(std::memory_order_seq_cst);
      if (!ready(peer)) waitDoorbell(doorbell, seen, 10'000);
      doorbell->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    }
  }
  return Status();
}

template <typename Words>
Status Board::claimPeers(uint64_t sequence, Status failure, Words words) {
  const uint64_t mark = verdict::marker(sequence, ctx_.rank, failure.code());
  bool everyone = true;
  for (int peer = 0; peer < ctx_.nranks; ++peer) {
    if (peer == ctx_.rank) continue;
    std::atomic<uint64_t>* list[2];
    const int n = words(peer, list);
    everyone = verdict::claim(list, n, sequence, mark) && everyone;
  }
  // Wake every sleeper: a peer waiting for one this rank claimed fails at once.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (const auto& peer : shared_->peers) ringDoorbell(peer->segment->header());
  return everyone ? Status() : failure;
}

Status Board::waitForPublished(uint64_t sequence, std::chrono::microseconds timeout,
                               const std::atomic<bool>& cancelled) {
  const int parity = static_cast<int>(sequence & 1);
  auto words = [&](int peer, std::atomic<uint64_t>** list) {
    list[0] = &lineSlot(boards_[peer].base, parity)->sequence;
    list[1] = &control(boards_[peer].base, parity)->sequence;
    return 2;
  };
  auto published = [&](int peer) {
    std::atomic<uint64_t>* list[2];
    words(peer, list);
    return list[0]->load(std::memory_order_acquire) == sequence ||
           list[1]->load(std::memory_order_acquire) == sequence;
  };
  auto claimed = [&](int peer) {
    std::atomic<uint64_t>* list[2];
    return verdict::markerAmong(list, words(peer, list));
  };
  Status status = waitForAll(published, claimed, "join the board collective", timeout, cancelled);
  if (status.isOk()) return status;
  // This rank gives up: it completes the collective only if every part was published.
  COLLIE_RETURN_IF_ERROR(claimPeers(sequence, std::move(status), words));
  return waitForAll(published, claimed, "join the board collective", timeout, cancelled);
}

Status Board::waitForPeers(uint64_t sequence, uint64_t tag, size_t bytes, bool inLine,
                           std::chrono::microseconds timeout, const std::atomic<bool>& cancelled) {
  const int parity = static_cast<int>(sequence & 1);
  // A peer publishes each sequence number in one place: its line, or its control block
  // (a collective of another size). Watching both turns that disagreement into a
  // Mismatch instead of a timeout; this rank's own layout is checked first.
  auto inLineOf = [&](int peer) {
    return lineSlot(boards_[peer].base, parity)->sequence.load(std::memory_order_acquire) ==
           sequence;
  };
  auto inControlOf = [&](int peer) {
    return control(boards_[peer].base, parity)->sequence.load(std::memory_order_acquire) ==
           sequence;
  };
  auto published = [&](int peer) {
    return inLine ? inLineOf(peer) || inControlOf(peer) : inControlOf(peer) || inLineOf(peer);
  };
  // The fast path: every peer is there. Else the wait that settles with claims.
  bool everyone = true;
  for (int peer = 0; peer < ctx_.nranks && everyone; ++peer) {
    everyone = peer == ctx_.rank || published(peer);
  }
  if (!everyone) COLLIE_RETURN_IF_ERROR(waitForPublished(sequence, timeout, cancelled));
  for (int peer = 0; peer < ctx_.nranks; ++peer) {
    if (peer == ctx_.rank) continue;
    const SlotControl* slot = control(boards_[peer].base, parity);
    const bool peerInLine = inLineOf(peer);
    const uint64_t peerTag = peerInLine ? lineSlot(boards_[peer].base, parity)->tag : slot->tag;
    if (peerTag != tag) {
      return mismatchError("rank " + std::to_string(ctx_.rank) + " runs " +
                               describeFingerprint(tag) + " but rank " + std::to_string(peer) +
                               " runs " + describeFingerprint(peerTag) + " (" +
                               describeMismatch(tag, peerTag, peer) + ")",
                           peer);
    }
    if (peerInLine != inLine) {
      return mismatchError("rank " + std::to_string(peer) + " published " +
                               (peerInLine ? "at most " : "more than ") +
                               std::to_string(kLineBytes) + " bytes for " +
                               describeFingerprint(tag) + ", rank " + std::to_string(ctx_.rank) +
                               " the opposite (count differs)",
                           peer);
    }
    // A line holds kLineBytes whatever was published; only read what this rank expects.
    if (inLine) continue;
    if (slot->bytes > slotBytes_ || (bytes != SIZE_MAX && slot->bytes != bytes)) {
      return mismatchError("rank " + std::to_string(peer) + " published " +
                               std::to_string(slot->bytes) + " bytes, expected " +
                               std::to_string(bytes),
                           peer);
    }
  }
  return Status();
}

void Board::ringPeers() {
  // No fence of its own: the publication just before it was a sequentially consistent
  // compare-and-swap (verdict::publish), which orders it before these seq_cst loads as the
  // fence did (a plain mov on x86; ringDoorbell fences again only when someone sleeps).
  for (const auto& peer : shared_->peers) {
    SegmentHeader* header = peer->segment->header();
    if (header->sleepers.load(std::memory_order_seq_cst) != 0) ringDoorbell(header);
  }
}

Status Board::meet(std::atomic<uint64_t>* (*flag)(void*), uint64_t sequence, const char* what,
                   std::chrono::microseconds timeout, const std::atomic<bool>& cancelled) {
  COLLIE_RETURN_IF_ERROR(publish(*flag(boards_[ctx_.rank].base), sequence));
  ringPeers();
  auto words = [&](int peer, std::atomic<uint64_t>** list) {
    list[0] = flag(boards_[peer].base);
    return 1;
  };
  auto arrived = [&](int peer) {
    return verdict::published(flag(boards_[peer].base)->load(std::memory_order_acquire), sequence);
  };
  auto claimed = [&](int peer) {
    const uint64_t seen = flag(boards_[peer].base)->load(std::memory_order_acquire);
    return verdict::isMarker(seen) ? seen : 0;
  };
  Status status = waitForAll(arrived, claimed, what, timeout, cancelled);
  if (status.isOk()) return status;
  // Every rank arrived after all (the claims found every flag published), or none may
  // complete.
  return claimPeers(sequence, std::move(status), words);
}

// Inlined into run(), its one caller: the board's path is the small-message fast path.
[[gnu::always_inline]] inline Result<TeamOutcome> Board::runBoard(
    const CollectiveArgs& args, size_t bytes, uint64_t tag, const void* input, void* output,
    std::chrono::microseconds timeout, const std::atomic<bool>& cancelled, bool offersDirect) {
  const int n = ctx_.nranks;
  const int rank = ctx_.rank;
  const uint64_t sequence = ++sequence_;
  const int parity = static_cast<int>(sequence & 1);

  // Publish: in one line when every rank's part fits (every rank decides alike), else
  // in the data slot with its header in the control block.
  const size_t mine = publishedBytes(args, bytes, n, rank);
  const bool inLine = publishedBytes(args, bytes, n, args.root) <= kLineBytes;
  const bool twoShot =
      args.kind == CollectiveKind::kAllReduce && !inLine && n > 1 && bytes >= twoShotMin_;
  if (inLine) {
    LineSlot* line = lineSlot(boards_[rank].base, parity);
    if (mine > 0) std::memcpy(line->data, input, mine);
    line->tag = tag;
    COLLIE_RETURN_IF_ERROR(publish(line->sequence, sequence));
  } else {
    uint8_t* slot = const_cast<uint8_t*>(slotData(rank, parity));
    if (twoShot && !twoShotReadsOwnSlot(input, output, rank)) {
      // Each peer reads only its own share of this slot: this rank's share stays out.
      const size_t es = dataTypeSize(args.dtype);
      const ShareRange own = shareRange(args.count, es, n, rank);
      std::memcpy(slot, input, own.begin * es);
      std::memcpy(slot + own.end * es, static_cast<const uint8_t*>(input) + own.end * es,
                  bytes - own.end * es);
    } else if (mine > 0) {
      std::memcpy(slot, input, mine);
    }
    SlotControl* control = shm::control(boards_[rank].base, parity);
    control->tag = tag;
    control->bytes = mine;
    control->registered = offersDirect && buffersRegistered(input, output, bytes) ? 1 : 0;
    COLLIE_RETURN_IF_ERROR(publish(control->sequence, sequence));
  }
  ringPeers();

  // Everyone else's broadcast or scatter slot is empty; every other collective publishes
  // alike.
  const bool rootOnly =
      args.kind == CollectiveKind::kBroadcast || args.kind == CollectiveKind::kScatter;
  const size_t expected = rootOnly ? SIZE_MAX : mine;
  COLLIE_RETURN_IF_ERROR(waitForPeers(sequence, tag, expected, inLine, timeout, cancelled));
  if (offersDirect && !inLine) {
    bool everyRank = true;
    for (int r = 0; r < n; ++r)
      everyRank = everyRank && control(boards_[r].base, parity)->registered == 1;
    directLikely_ = everyRank;
  }
  auto slotOf = [&](int r) -> const uint8_t* {
    return inLine ? lineSlot(boards_[r].base, parity)->data : slotData(r, parity);
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
        COLLIE_RETURN_IF_ERROR(
            twoShotAllReduce(args, input, out, sequence, parity, timeout, cancelled));
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
  if (inLine) prefetchForWrite(lineSlot(boards_[rank].base, parity ^ 1));
  return TeamOutcome{Algorithm::kBoard};
}

Status Board::twoShotAllReduce(const CollectiveArgs& args, const void* input, uint8_t* out,
                               uint64_t sequence, int parity, std::chrono::microseconds timeout,
                               const std::atomic<bool>& cancelled) {
  const int n = ctx_.nranks;
  const int rank = ctx_.rank;
  const size_t es = dataTypeSize(args.dtype);
  const ReduceBackend& kernels = hostReduceBackend();
  const int divisor = args.op == ReduceOp::kAvg ? n : 0;
  gTwoShots.fetch_add(1, std::memory_order_relaxed);
  // This rank's share, in rank order as the one-shot board reduces every element.
  const ShareRange own = shareRange(args.count, es, n, rank);
  const size_t offset = own.begin * es;
  const size_t count = own.end - own.begin;
  const bool ownFromSlot = twoShotReadsOwnSlot(input, out, rank);
  auto source = [&](int r) {
    return (r == rank && !ownFromSlot ? static_cast<const uint8_t*>(input) : slotData(r, parity)) +
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
    std::memcpy(const_cast<uint8_t*>(slotData(rank, parity)) + offset, dst, count * es);
  }
  COLLIE_RETURN_IF_ERROR(meet(&doneSequence, sequence, "reduce its share of the board all-reduce",
                              timeout, cancelled));
  for (int r = 0; r < n; ++r) {
    if (r == rank) continue;
    const ShareRange theirs = shareRange(args.count, es, n, r);
    if (theirs.end > theirs.begin) {
      std::memcpy(out + theirs.begin * es, slotData(r, parity) + theirs.begin * es,
                  (theirs.end - theirs.begin) * es);
    }
  }
  return Status();
}

}  // namespace collie::shm
