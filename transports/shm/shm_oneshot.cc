#include "transports/shm/shm_oneshot.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/config/config.h"
#include "core/engine/fingerprint.h"
#include "core/kernel/reduce_backend.h"
#include "core/log/log.h"
#include "core/memory/shared_region.h"
#include "transports/shm/shm_names.h"
#include "transports/shm/shm_segment.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define COLLIE_CPU_RELAX() _mm_pause()
#else
#define COLLIE_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
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

constexpr uint64_t kBoardMagic = 0x3144524f4254534full;  // "OSTBORD1"

struct BoardHeader {
  uint64_t magic;
  int32_t rank;
  int32_t nranks;
  uint64_t slotBytes;
  // All-reduces on plain buffers of (crossMemoryFrom, crossMemoryTo] bytes take
  // cross-memory attach although they fit the slots (from UINT64_MAX: never). Every rank
  // uses the largest `from` and the smallest `to` published, so all route alike.
  uint64_t crossMemoryFrom;
  uint64_t crossMemoryTo;
  uint8_t nonce[16];
};

struct SlotControl {
  alignas(kCacheLine) std::atomic<uint64_t> sequence;
  uint64_t tag;
  uint64_t bytes;
  // Large all-reduce only: whether both buffers are registered, and where they are.
  uint32_t registered;
  uint64_t pidNamespace;
  SharedWindow send;
  SharedWindow recv;
  // Large all-reduce: whether this rank would go through cross-memory attach, and
  // where its buffers are (shm_cma.h; the pid is the one its segment gave at connect).
  uint32_t crossMemory;
  uint64_t inputAddress;
  uint64_t outputAddress;
};

// Published once a rank finished writing the outputs of a direct collective.
struct DoneFlag {
  alignas(kCacheLine) std::atomic<uint64_t> sequence;
};

// A collective whose every slot holds at most kLineBytes travels in one cache line per
// rank: sequence, fingerprint and data together, so a peer's publication costs one
// line transfer and its header no other.
constexpr size_t kLineBytes = 48;
struct LineSlot {
  alignas(kCacheLine) std::atomic<uint64_t> sequence;
  uint64_t tag;
  uint8_t data[kLineBytes];
};
static_assert(sizeof(LineSlot) == kCacheLine);

constexpr size_t kControlOffset = kPage;
constexpr auto kPureSpin = std::chrono::microseconds(5);
// Spins before a wait first reads the clock: a peer on another core usually answers
// within them, and then the collective reads no clock at all.
constexpr uint32_t kSpinsBeforeClock = 32;
constexpr size_t kDataOffset = 2 * kPage;

size_t boardBytes(size_t slotBytes) { return kDataOffset + 2 * slotBytes; }

SlotControl* control(void* base, int parity) {
  return reinterpret_cast<SlotControl*>(static_cast<uint8_t*>(base) + kControlOffset) + parity;
}

DoneFlag* doneFlag(void* base) {
  return reinterpret_cast<DoneFlag*>(reinterpret_cast<uint8_t*>(control(base, 2)) + kCacheLine);
}
// Cross-memory all-reduce: the first one's probe result.
struct CrossMemoryFlags {
  alignas(kCacheLine) std::atomic<uint64_t> probed;
  uint32_t allowed;
};

CrossMemoryFlags* crossMemoryFlags(void* base) {
  return reinterpret_cast<CrossMemoryFlags*>(reinterpret_cast<uint8_t*>(doneFlag(base)) +
                                             sizeof(DoneFlag));
}
std::atomic<uint64_t>* doneSequence(void* base) { return &doneFlag(base)->sequence; }
std::atomic<uint64_t>* probedSequence(void* base) { return &crossMemoryFlags(base)->probed; }

static_assert(3 * sizeof(SlotControl) + 2 * kCacheLine + sizeof(DoneFlag) +
                  sizeof(CrossMemoryFlags) <=
              kPage / 2);

LineSlot* lineSlot(void* base, int parity) {
  return reinterpret_cast<LineSlot*>(static_cast<uint8_t*>(base) + kControlOffset + kPage / 2) +
         parity;
}

// Bytes rank `rank` publishes for `args` (`bytes` = count * dtype size) on `nranks` ranks.
size_t publishedBytes(const CollectiveArgs& args, size_t bytes, int nranks, int rank) {
  switch (args.kind) {
    case CollectiveKind::kReduceScatter:
      return bytes * nranks;
    case CollectiveKind::kBroadcast:
      return rank == args.root ? bytes : 0;
    case CollectiveKind::kBarrier:
      return 0;
    default:
      return bytes;
  }
}

// Too large for the slots on some rank: run() goes direct (a registered all-reduce) or
// only checks that every rank runs the same collective, then declines.
bool isLarge(const CollectiveArgs& args, size_t bytes, int nranks, size_t slotBytes) {
  return publishedBytes(args, bytes, nranks, args.root) > slotBytes ||
         publishedBytes(args, bytes, nranks, (args.root + 1) % nranks) > slotBytes;
}

}  // namespace

OneShotBoard::OneShotBoard(const TransportContext& ctx, std::shared_ptr<ShmShared> shared,
                           size_t slotBytes, std::chrono::microseconds spin)
    : ctx_(ctx),
      shared_(std::move(shared)),
      slotBytes_(slotBytes),
      boards_(ctx.nranks),
      spin_(spin),
      pidNamespace_(currentPidNamespace()),
      scratch_(static_cast<uint8_t*>(std::aligned_alloc(64, kDirectTileBytes))),
      crossMemoryMax_(
          static_cast<size_t>(std::max<int64_t>(0, ctx.config.integer("COLLIE_SHM_CMA_MAX")))) {}

OneShotBoard::~OneShotBoard() {
  for (Mapping& board : boards_) {
    if (board.base != nullptr) munmap(board.base, board.bytes);
  }
  if (!name_.empty()) shm_unlink(name_.c_str());
}

Result<std::unique_ptr<OneShotBoard>> OneShotBoard::connect(const TransportContext& ctx,
                                                            std::shared_ptr<ShmShared> shared,
                                                            std::chrono::microseconds spin,
                                                            bool ranksOutnumberCores) {
  const int64_t configured = ctx.config.integer("COLLIE_SHM_ONESHOT_MAX");
  const size_t slotBytes = static_cast<size_t>(std::clamp<int64_t>(configured, 0, 16 << 20));
  std::unique_ptr<OneShotBoard> board(new OneShotBoard(ctx, std::move(shared), slotBytes, spin));
  const size_t bytes = boardBytes(slotBytes);

  Result<std::string> name = newShmName(jobScopeTag(ctx.secret, ctx.config), kBoardKind);
  if (!name.isOk()) return name.status();
  // From here on the destructor unlinks the name on every failure path, at once.
  board->name_ = std::move(*name);
  int fd = shm_open(board->name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    board->name_.clear();
    return systemError("shm: creating the one-shot board", errno);
  }
  int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  void* base =
      err == 0 ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (base == MAP_FAILED) {
    return systemError("shm: sizing or mapping the one-shot board (" + std::to_string(bytes) +
                           " bytes; is /dev/shm full?)",
                       err != 0 ? err : errno);
  }
  board->boards_[ctx.rank] = Mapping{base, bytes};
  auto* header = static_cast<BoardHeader*>(base);
  header->magic = kBoardMagic;
  header->rank = ctx.rank;
  header->nranks = ctx.nranks;
  header->slotBytes = slotBytes;
  // Measured on 2 ranks with a core each (docs/performance.md): cross-memory attach beats
  // the board from 128 KiB on; with more ranks than cores the board wins at every size.
  header->crossMemoryFrom =
      ranksOutnumberCores || board->crossMemoryMax_ == 0
          ? UINT64_MAX
          : static_cast<uint64_t>(std::max<int64_t>(0, ctx.config.integer("COLLIE_SHM_CMA_MIN")));
  header->crossMemoryTo = std::min(board->crossMemoryMax_, slotBytes);
  board->crossMemoryFrom_ = header->crossMemoryFrom;
  board->crossMemoryTo_ = header->crossMemoryTo;
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

  const std::string prefix = ctx.jobKey + "/shmboard/";
  const std::string entry = board->name_ + " " + toHex(header->nonce, sizeof(header->nonce));
  COLLIE_RETURN_IF_ERROR(
      ctx.store->set(prefix + std::to_string(ctx.rank), Bytes(entry.begin(), entry.end())));
  const Deadline deadline = Clock::now() + ctx.timeout;
  for (int peer = 0; peer < ctx.nranks; ++peer) {
    if (peer == ctx.rank) continue;
    Result<Bytes> value = ctx.store->get(prefix + std::to_string(peer), deadline);
    if (!value.isOk()) {
      return timeoutError("shm: rank " + std::to_string(peer) +
                              " did not publish its one-shot board before the deadline",
                          peer);
    }
    std::string text(value->begin(), value->end());
    size_t space = text.find(' ');
    if (space == std::string::npos || !isShmName(text.substr(0, space), kBoardKind)) {
      return remoteError("shm: rank " + std::to_string(peer) + " published a malformed board",
                         peer);
    }
    int peerFd = shm_open(text.substr(0, space).c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (peerFd < 0)
      return systemError("shm: opening rank " + std::to_string(peer) + "'s board", errno);
    void* peerBase = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, peerFd, 0);
    struct stat info {};
    bool sized = fstat(peerFd, &info) == 0 && static_cast<size_t>(info.st_size) >= bytes;
    close(peerFd);
    if (peerBase == MAP_FAILED) {
      return systemError("shm: mapping rank " + std::to_string(peer) + "'s board", errno);
    }
    board->boards_[peer] = Mapping{peerBase, bytes};
    const auto* peerHeader = static_cast<const BoardHeader*>(peerBase);
    board->crossMemoryFrom_ = std::max(board->crossMemoryFrom_, peerHeader->crossMemoryFrom);
    board->crossMemoryTo_ = std::min(board->crossMemoryTo_, peerHeader->crossMemoryTo);
    if (!sized || peerHeader->magic != kBoardMagic || peerHeader->rank != peer ||
        peerHeader->nranks != ctx.nranks || peerHeader->slotBytes != slotBytes ||
        toHex(peerHeader->nonce, sizeof(peerHeader->nonce)) != text.substr(space + 1)) {
      return remoteError("shm: rank " + std::to_string(peer) +
                             "'s one-shot board does not match this job (rank, size or nonce; "
                             "is COLLIE_SHM_ONESHOT_MAX equal on every rank?)",
                         peer);
    }
  }
  // Unlink the names once every rank mapped every board.
  COLLIE_RETURN_IF_ERROR(ctx.store->set(prefix + "mapped/" + std::to_string(ctx.rank), Bytes{1}));
  for (int peer = 0; peer < ctx.nranks; ++peer) {
    Result<Bytes> done = ctx.store->get(prefix + "mapped/" + std::to_string(peer), deadline);
    if (!done.isOk()) {
      return timeoutError("shm: rank " + std::to_string(peer) +
                              " did not map the one-shot boards before the deadline",
                          peer);
    }
  }
  shm_unlink(board->name_.c_str());
  board->name_.clear();
  return board;
}

bool OneShotBoard::accepts(const CollectiveArgs& args) const {
  switch (args.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduce:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kBarrier:
      break;
    default:
      return false;
  }
  // Large ones too: the board's fingerprint check then catches ranks that disagree
  // (one rank's all-reduce here, another's broadcast on the FIFOs would only time out).
  return true;
}

bool OneShotBoard::runsInline(const CollectiveArgs& args, const void* input,
                              const void* output) const {
  const size_t bytes = args.count * dataTypeSize(args.dtype);
  if (!isLarge(args, bytes, ctx_.nranks, slotBytes_)) return true;
  if (args.kind != CollectiveKind::kAllReduce) return false;  // a check, then declined
  SharedWindow window;
  return findSharedWindow(input, bytes, &window) && findSharedWindow(output, bytes, &window);
}

bool OneShotBoard::goesLarge(const CollectiveArgs& args, size_t bytes) const {
  if (isLarge(args, bytes, ctx_.nranks, slotBytes_)) return true;
  return args.kind == CollectiveKind::kAllReduce && bytes > crossMemoryFrom_ &&
         bytes <= crossMemoryTo_ && crossMemoryState_ != CrossMemoryState::kDenied;
}

bool OneShotBoard::wantsCrossMemory(const CollectiveArgs& args, bool inPlace) const {
  // In place it won at every size measured (16-256 MiB, 2 ranks: 1.4-1.8x the ring's
  // busbw); out of place from 128 MiB on the ring's copies through its cache-resident
  // FIFO cost less than pinning twice as many pages (docs/performance.md).
  return args.kind == CollectiveKind::kAllReduce && crossMemoryMax_ > 0 &&
         crossMemoryState_ != CrossMemoryState::kDenied &&
         (inPlace || args.count * dataTypeSize(args.dtype) <= crossMemoryMax_);
}

const uint8_t* OneShotBoard::slotData(int rank, int parity) const {
  return static_cast<const uint8_t*>(boards_[rank].base) + kDataOffset + parity * slotBytes_;
}

template <typename Ready>
Status OneShotBoard::waitForAll(Ready ready, const char* what, std::chrono::microseconds timeout,
                                const std::atomic<bool>& cancelled) {
  SegmentHeader* doorbell = shared_->mine->header();
  for (int peer = 0; peer < ctx_.nranks; ++peer) {
    if (peer == ctx_.rank) continue;
    for (uint32_t spins = 0; spins < kSpinsBeforeClock && !ready(peer); ++spins) {
      COLLIE_CPU_RELAX();
    }
    if (ready(peer)) continue;
    // Pure spinning first (a peer on another core answers within a microsecond or
    // two), then spinning with sched_yield (lets a peer that shares this core run),
    // then sleeping on the doorbell futex. spin_ is 0 when ranks outnumber cores.
    const auto start = Clock::now();
    const Deadline deadline = start + timeout;
    const auto pureUntil = start + std::min(spin_, kPureSpin);
    const auto spinUntil = start + spin_;
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
      if (cancelled.load(std::memory_order_relaxed)) {
        return abortedError("one-shot collective aborted on rank " + std::to_string(ctx_.rank));
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

Status OneShotBoard::waitForPeers(uint64_t sequence, uint64_t tag, size_t bytes, bool inLine,
                                  std::chrono::microseconds timeout,
                                  const std::atomic<bool>& cancelled) {
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
  COLLIE_RETURN_IF_ERROR(waitForAll(published, "join the one-shot collective", timeout, cancelled));
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

void OneShotBoard::ringPeers() {
  // One fence for every peer (ringDoorbell fences again only when someone sleeps).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (const auto& peer : shared_->peers) {
    SegmentHeader* header = peer->segment->header();
    if (header->sleepers.load(std::memory_order_relaxed) != 0) ringDoorbell(header);
  }
}

Status OneShotBoard::meet(std::atomic<uint64_t>* (*flag)(void*), uint64_t sequence,
                          const char* what, std::chrono::microseconds timeout,
                          const std::atomic<bool>& cancelled) {
  flag(boards_[ctx_.rank].base)->store(sequence, std::memory_order_release);
  ringPeers();
  auto arrived = [&](int peer) {
    return flag(boards_[peer].base)->load(std::memory_order_acquire) >= sequence;
  };
  return waitForAll(arrived, what, timeout, cancelled);
}

Result<OffloadOutcome> OneShotBoard::runLarge(const CollectiveArgs& args, uint64_t tag,
                                              const void* input, void* output,
                                              std::chrono::microseconds timeout,
                                              const std::atomic<bool>& cancelled) {
  const int n = ctx_.nranks;
  const int rank = ctx_.rank;
  const uint64_t sequence = ++sequence_;
  const int parity = static_cast<int>(sequence & 1);
  const size_t bytes = args.count * dataTypeSize(args.dtype);

  // Publish where this rank's buffers are, if they are registered.
  SlotControl* mine = control(boards_[rank].base, parity);
  SharedWindow send, recv;
  const bool direct = args.kind == CollectiveKind::kAllReduce;
  const bool registered =
      direct && findSharedWindow(input, bytes, &send) && findSharedWindow(output, bytes, &recv);
  mine->tag = tag;
  mine->bytes = 0;
  mine->registered = registered ? 1 : 0;
  mine->pidNamespace = pidNamespace_;
  mine->send = send;
  mine->recv = recv;
  mine->crossMemory = wantsCrossMemory(args, input == output) ? 1 : 0;
  mine->inputAddress = reinterpret_cast<uint64_t>(input);
  mine->outputAddress = reinterpret_cast<uint64_t>(output);
  mine->sequence.store(sequence, std::memory_order_release);
  // Unregistered and not cross-memory here: every rank declines (the others once they
  // read this header), so there is nothing to wait for, and not waiting keeps a barrier off every
  // large collective; the schedule's messages carry the tag, so ranks that disagree
  // still fail. Only where this rank's schedule cannot complete before every rank has
  // started it (each output needs every input): then slot s % 2, which this rank
  // overwrites at s + 2 once s + 1 completed, is no longer read by anyone. A broadcast
  // root or a reduce leaf could complete alone and lap a slow peer: they wait.
  const bool needsEveryRank = args.kind == CollectiveKind::kAllReduce ||
                              args.kind == CollectiveKind::kReduceScatter ||
                              args.kind == CollectiveKind::kAllGather;
  if (!registered && mine->crossMemory == 0 && needsEveryRank) {
    // Only a peer that could go direct or cross-memory waits for this header: wake just
    // those, not every sleeping
    // progress thread (on a busy host each needless wake costs a context switch).
    // Dekker with the peer's publish, fence, check of ours before it sleeps.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (const auto& peer : shared_->peers) {
      const SlotControl* theirs = control(boards_[peer->rank].base, parity);
      if (theirs->sequence.load(std::memory_order_acquire) == sequence &&
          (theirs->registered == 1 || theirs->crossMemory == 1)) {
        ringDoorbell(peer->segment->header());
      }
    }
    return OffloadOutcome::kDeclined;
  }
  ringPeers();
  COLLIE_RETURN_IF_ERROR(waitForPeers(sequence, tag, 0, false, timeout, cancelled));

  // Every rank reads the same headers, so every rank takes the same branch here.
  if (!direct) return OffloadOutcome::kDeclined;
  std::vector<SlotControl> slots(n);
  for (int r = 0; r < n; ++r) {
    const SlotControl* c = control(boards_[r].base, parity);
    slots[r].registered = c->registered;
    slots[r].pidNamespace = c->pidNamespace;
    slots[r].send = c->send;
    slots[r].recv = c->recv;
    slots[r].crossMemory = c->crossMemory;
  }
  bool allRegistered = true, allCrossMemory = true;
  for (int r = 0; r < n; ++r) {
    if (slots[r].pidNamespace != slots[0].pidNamespace) return OffloadOutcome::kDeclined;
    allRegistered = allRegistered && slots[r].registered == 1;
    allCrossMemory = allCrossMemory && slots[r].crossMemory == 1;
  }
  if (!allRegistered) {
    if (!allCrossMemory) return OffloadOutcome::kDeclined;
    return runCrossMemory(args, sequence, input, output, timeout, cancelled);
  }
  std::vector<const uint8_t*> inputs(n);
  std::vector<uint8_t*> outputs(n);
  for (int r = 0; r < n; ++r) {
    if (r == rank) {
      inputs[r] = static_cast<const uint8_t*>(input);
      outputs[r] = static_cast<uint8_t*>(output);
      continue;
    }
    Result<uint8_t*> in = windows_.resolve(r, slots[r].send, bytes);
    if (!in.isOk()) return in.status();
    Result<uint8_t*> out = windows_.resolve(r, slots[r].recv, bytes);
    if (!out.isOk()) return out.status();
    inputs[r] = *in;
    outputs[r] = *out;
  }
  directAllReduceShare(inputs, outputs, args.count, args.dtype, args.op, rank, scratch_.get());

  // Nobody may return (and reuse its buffers) before every share is written.
  COLLIE_RETURN_IF_ERROR(meet(&doneSequence, sequence, "finish its share of the direct all-reduce",
                              timeout, cancelled));
  return OffloadOutcome::kDone;
}

Result<OffloadOutcome> OneShotBoard::runCrossMemory(const CollectiveArgs& args, uint64_t sequence,
                                                    const void* input, void* output,
                                                    std::chrono::microseconds timeout,
                                                    const std::atomic<bool>& cancelled) {
  const int n = ctx_.nranks;
  const int rank = ctx_.rank;
  const int parity = static_cast<int>(sequence & 1);
  std::vector<CrossMemoryRank> ranks(n);
  for (int r = 0; r < n; ++r) {
    const SlotControl* c = control(boards_[r].base, parity);
    ranks[r] = CrossMemoryRank{static_cast<int32_t>(getpid()), c->inputAddress, c->outputAddress};
  }
  for (const auto& peer : shared_->peers) ranks[peer->rank].pid = peer->pid;
  CrossMemoryFlags* flags = crossMemoryFlags(boards_[rank].base);
  if (crossMemoryState_ == CrossMemoryState::kUntested) {
    // Before anyone writes an output: can every rank read every peer?
    std::string why;
    Result<CrossMemoryAllReduce::Probe> probe =
        CrossMemoryAllReduce::probe(ranks, rank, args.count * dataTypeSize(args.dtype), &why);
    if (!probe.isOk()) return probe.status();
    flags->allowed = *probe == CrossMemoryAllReduce::Probe::kAllowed ? 1 : 0;
    COLLIE_RETURN_IF_ERROR(
        meet(&probedSequence, sequence, "probe cross-memory attach", timeout, cancelled));
    crossMemoryState_ = CrossMemoryState::kAllowed;
    for (int r = 0; r < n; ++r) {
      if (crossMemoryFlags(boards_[r].base)->allowed != 1) {
        crossMemoryState_ = CrossMemoryState::kDenied;
        COLLIE_LOG(WARN, SHM) << "rank " << rank << ": rank " << r
                              << " cannot use cross-memory attach"
                              << (r == rank ? " (" + why + ")" : std::string())
                              << "; unregistered all-reduces above COLLIE_SHM_ONESHOT_MAX use "
                                 "the FIFO ring (two copies)";
        return OffloadOutcome::kDeclined;
      }
    }
  }
  COLLIE_RETURN_IF_ERROR(
      crossMemory_.reduceShare(ranks, rank, input, output, args.count, args.dtype, args.op));
  // Nobody may return (and reuse its buffers) before every rank wrote its share.
  COLLIE_RETURN_IF_ERROR(
      meet(&doneSequence, sequence, "finish the cross-memory all-reduce", timeout, cancelled));
  return OffloadOutcome::kDone;
}

Result<OffloadOutcome> OneShotBoard::run(const CollectiveArgs& args, uint64_t tag,
                                         const void* input, void* output,
                                         std::chrono::microseconds timeout,
                                         const std::atomic<bool>& cancelled) {
  const size_t bytes = args.count * dataTypeSize(args.dtype);
  if (goesLarge(args, bytes)) {
    return runLarge(args, tag, input, output, timeout, cancelled);
  }
  const int n = ctx_.nranks;
  const int rank = ctx_.rank;
  const uint64_t sequence = ++sequence_;
  const int parity = static_cast<int>(sequence & 1);

  // Publish: in one line when every rank's part fits (every rank decides alike), else
  // in the data slot with its header in the control block.
  const size_t mine = publishedBytes(args, bytes, n, rank);
  const bool inLine = publishedBytes(args, bytes, n, args.root) <= kLineBytes;
  if (inLine) {
    LineSlot* line = lineSlot(boards_[rank].base, parity);
    if (mine > 0) std::memcpy(line->data, input, mine);
    line->tag = tag;
    line->sequence.store(sequence, std::memory_order_release);
  } else {
    if (mine > 0) std::memcpy(const_cast<uint8_t*>(slotData(rank, parity)), input, mine);
    SlotControl* control = shm::control(boards_[rank].base, parity);
    control->tag = tag;
    control->bytes = mine;
    control->sequence.store(sequence, std::memory_order_release);
  }
  ringPeers();

  // Everyone else's broadcast slot is empty; every other collective publishes alike.
  const size_t expected = args.kind == CollectiveKind::kBroadcast ? SIZE_MAX : mine;
  COLLIE_RETURN_IF_ERROR(waitForPeers(sequence, tag, expected, inLine, timeout, cancelled));
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
      if (bytes) reduceAll(out, 0);
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
    default:
      break;
  }
  // Own the line the next small collective publishes in while the caller works: in the
  // VM's slow mode (a cache line takes ~180 ns between the cores) the publication then
  // costs one crossing instead of two. 8 B, 2 ranks, interleaved, slow mode: 0.20-0.27
  // against 0.31-0.36 us; fast mode 0.11-0.13 either way (docs/performance.md).
  if (inLine) prefetchForWrite(lineSlot(boards_[rank].base, parity ^ 1));
  return OffloadOutcome::kDone;
}

}  // namespace collie::shm
