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

#include "core/log/log.h"
#include "core/memory/process_id.h"
#include "transports/shm/shm_board_layout.h"
#include "transports/shm/shm_names.h"
#include "transports/shm/shm_segment.h"

namespace collie::shm {
namespace {

std::atomic<uint64_t> gSharedCpuWaits{0};

// Spins before a wait first reads the clock: a peer on another core usually answers
// within them, and then the collective reads no clock at all.
constexpr uint32_t kSpinsBeforeClock = 32;

// Per rank, the process cross-memory attach reaches: this one for this rank and for
// ranks that are threads of it.
std::vector<int32_t> peerPids(int nranks, const ShmShared& shared) {
  std::vector<int32_t> pids(nranks, currentPid());
  for (const auto& peer : shared.peers) pids[peer->rank] = peer->pid;
  return pids;
}
}  // namespace

uint64_t boardSharedCpuWaitCount() { return gSharedCpuWaits.load(std::memory_order_relaxed); }

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
      views_(ctx.nranks),
      wait_(wait),
      pidNamespace_(currentPidNamespace()),
      peerMemory_(peerPids(ctx.nranks, *shared_),
                  static_cast<size_t>(std::max<int64_t>(0, knobs.hugePageMinBytes))) {}

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
    new (note(base, parity)) BoardNote();
    note(base, parity)->sequence.store(0, std::memory_order_release);
    new (line(base, parity)) BoardLine();
    line(base, parity)->sequence.store(0, std::memory_order_release);
  }
  for (BoardFlag* flag : {doneFlag(base), probedFlag(base)}) {
    new (flag) BoardFlag();
    flag->sequence.store(0, std::memory_order_release);
  }
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
  for (int r = 0; r < ctx.nranks; ++r) {
    void* peerBase = board->boards_[r].base;
    BoardView& view = board->views_[r];
    for (int parity = 0; parity < 2; ++parity) {
      view.line[parity] = line(peerBase, parity);
      view.note[parity] = note(peerBase, parity);
      view.slot[parity] = slotData(peerBase, slotBytes, parity);
    }
    view.done = doneFlag(peerBase);
    view.probed = probedFlag(peerBase);
  }
  // Every rank read every header: every rank plans with the same offer.
  board->offer_ = mine;
  board->offer_.cmaCrossoverBytes = static_cast<size_t>(crossover);
  board->offer_.directCrossoverBytes =
      static_cast<size_t>(std::min<uint64_t>(directCrossover, SIZE_MAX));
  board->offer_.boardTwoShotBytes = static_cast<size_t>(std::min<uint64_t>(twoShotMin, SIZE_MAX));
  board->offer_.cmaMaxBytes = static_cast<size_t>(crossMemoryMax);
  if (crossMemoryMax == 0) board->offer_.algorithms &= ~teamBit(Algorithm::kCma);
  return board;
}

Status Board::publish(std::atomic<uint64_t>& word, uint64_t sequence, bool wake) {
  notePlacement();
  COLLIE_RETURN_IF_ERROR(verdict::publish(word, sequence, ctx_.rank));
  if (wake) {
    ringPeers();
    return Status();
  }
  // Only the peers that wait for this rank's note: Dekker with their publication, fence,
  // check of ours before they sleep.
  const int parity = static_cast<int>(sequence & 1);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (const auto& peer : shared_->peers) {
    const BoardNote* theirs = views_[peer->rank].note[parity];
    if (theirs->sequence.load(std::memory_order_acquire) == sequence && theirs->waits == 1) {
      ringDoorbell(peer->segment->header());
    }
  }
  return Status();
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

template <typename Ready, typename Claimed>
Status Board::waitForAll(Ready ready, Claimed claimed, const char* what, const BoardWait& wait) {
  const std::chrono::microseconds timeout = wait.timeout;
  const std::atomic<bool>& cancelled = *wait.cancelled;
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

Status Board::awaitPublished(uint64_t sequence, const BoardWait& wait) {
  const int parity = static_cast<int>(sequence & 1);
  auto words = [&](int peer, std::atomic<uint64_t>** list) {
    list[0] = &views_[peer].line[parity]->sequence;
    list[1] = &views_[peer].note[parity]->sequence;
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
  Status status = waitForAll(published, claimed, "join the board collective", wait);
  if (status.isOk()) return status;
  // This rank gives up: it completes the round only if every part was published.
  COLLIE_RETURN_IF_ERROR(claimPeers(sequence, std::move(status), words));
  return waitForAll(published, claimed, "join the board collective", wait);
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

Status Board::meet(BoardMeeting which, uint64_t sequence, uint32_t value, const char* what,
                   const BoardWait& wait) {
  auto flag = [which](const BoardView& view) {
    return &(which == BoardMeeting::kDone ? view.done : view.probed)->sequence;
  };
  (which == BoardMeeting::kDone ? views_[ctx_.rank].done : views_[ctx_.rank].probed)->value = value;
  COLLIE_RETURN_IF_ERROR(publish(*flag(views_[ctx_.rank]), sequence, /*wake=*/true));
  auto words = [&](int peer, std::atomic<uint64_t>** list) {
    list[0] = flag(views_[peer]);
    return 1;
  };
  auto arrived = [&](int peer) {
    return verdict::published(flag(views_[peer])->load(std::memory_order_acquire), sequence);
  };
  auto claimed = [&](int peer) {
    const uint64_t seen = flag(views_[peer])->load(std::memory_order_acquire);
    return verdict::isMarker(seen) ? seen : 0;
  };
  Status status = waitForAll(arrived, claimed, what, wait);
  if (status.isOk()) return status;
  // Every rank arrived after all (the claims found every flag published), or none may
  // complete.
  return claimPeers(sequence, std::move(status), words);
}

}  // namespace collie::shm
