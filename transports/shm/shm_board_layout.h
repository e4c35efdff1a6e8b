// Internal to the shm board (shm_board.cc, shm_board_single_copy.cc): the layout of one
// rank's board segment and small helpers on it.
//
// A board is [header page][control page: SlotControl x 2 parities, DoneFlag,
// CrossMemoryFlags, Placement | LineSlot x 2 parities][data slot x 2 parities]. Its owner writes
// it; every peer maps it read-only.
//
// Thread safety: layout only; see shm_board.h for who writes what when.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/memory/shared_region.h"
#include "core/plan/schedule.h"
#include "transports/shm/shm_layout.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define COLLIE_CPU_RELAX() _mm_pause()
#else
#define COLLIE_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace collie::shm {

inline constexpr uint64_t kBoardMagic = 0x3544524f4254534full;  // "OSTBORD5"

struct BoardHeader {
  uint64_t magic;
  int32_t rank;
  int32_t nranks;
  uint64_t slotBytes;
  // What this rank's configuration says about cross-memory attach: board and cma cost
  // the same at crossMemoryCrossover bytes (UINT64_MAX: the board wins at every size it
  // carries), and an out-of-place cma all-reduce is at most crossMemoryMax bytes (0: no
  // cma). The team offer takes the largest crossover and the smallest maximum any rank
  // published, so every rank plans alike.
  uint64_t crossMemoryCrossover;
  uint64_t crossMemoryMax;
  // Where board and direct cost the same (COLLIE_SHM_DIRECT_MIN); the team takes the
  // largest any rank published.
  uint64_t directCrossover;
  // The smallest all-reduce this rank's configuration runs in two shots (UINT64_MAX:
  // never); the team takes the largest any rank published.
  uint64_t twoShotMin;
  uint8_t nonce[16];
};

struct SlotControl {
  alignas(kCacheLine) std::atomic<uint64_t> sequence;
  uint64_t tag;
  uint64_t bytes;
  // Whether both buffers are registered (single copy; and a board all-reduce whose step
  // offers direct), and where they are (single copy only).
  uint32_t registered;
  uint64_t pidNamespace;
  SharedWindow send;
  SharedWindow recv;
  // Single copy only: whether this rank would go through cross-memory attach, and
  // where its buffers are (shm_cma.h; the pid is the one its segment gave at connect).
  uint32_t crossMemory;
  uint64_t inputAddress;
  uint64_t outputAddress;
};

// Published once a rank finished writing the outputs of a single-copy collective.
struct DoneFlag {
  alignas(kCacheLine) std::atomic<uint64_t> sequence;
};

// A collective whose every slot holds at most kLineBytes travels in one cache line per
// rank: sequence, fingerprint and data together, so a peer's publication costs one
// line transfer and its header no other.
inline constexpr size_t kLineBytes = 48;
struct LineSlot {
  alignas(kCacheLine) std::atomic<uint64_t> sequence;
  uint64_t tag;
  uint8_t data[kLineBytes];
};
static_assert(sizeof(LineSlot) == kCacheLine);

// Cross-memory attach: the first cma all-reduce's probe result.
struct CrossMemoryFlags {
  alignas(kCacheLine) std::atomic<uint64_t> probed;
  uint32_t allowed;
};

// The CPU the board's owner ran its latest collective on (sched_getcpu; -1 unknown),
// stored only when it changes: a waiter whose peer is on its own CPU yields at once, since
// the peer cannot run while it spins.
struct Placement {
  alignas(kCacheLine) std::atomic<int32_t> cpu;
};

inline constexpr size_t kControlOffset = kPage;
inline constexpr size_t kDataOffset = 2 * kPage;

inline size_t boardBytes(size_t slotBytes) { return kDataOffset + 2 * slotBytes; }

inline SlotControl* control(void* base, int parity) {
  return reinterpret_cast<SlotControl*>(static_cast<uint8_t*>(base) + kControlOffset) + parity;
}
inline DoneFlag* doneFlag(void* base) {
  return reinterpret_cast<DoneFlag*>(reinterpret_cast<uint8_t*>(control(base, 2)) + kCacheLine);
}
inline CrossMemoryFlags* crossMemoryFlags(void* base) {
  return reinterpret_cast<CrossMemoryFlags*>(reinterpret_cast<uint8_t*>(doneFlag(base)) +
                                             sizeof(DoneFlag));
}
inline Placement* placement(void* base) {
  return reinterpret_cast<Placement*>(reinterpret_cast<uint8_t*>(crossMemoryFlags(base)) +
                                      sizeof(CrossMemoryFlags));
}
inline std::atomic<uint64_t>* doneSequence(void* base) { return &doneFlag(base)->sequence; }
inline std::atomic<uint64_t>* probedSequence(void* base) { return &crossMemoryFlags(base)->probed; }
inline LineSlot* lineSlot(void* base, int parity) {
  return reinterpret_cast<LineSlot*>(static_cast<uint8_t*>(base) + kControlOffset + kPage / 2) +
         parity;
}

static_assert(3 * sizeof(SlotControl) + 2 * kCacheLine + sizeof(DoneFlag) +
                  sizeof(CrossMemoryFlags) + sizeof(Placement) <=
              kPage / 2);

// Bytes rank `rank` publishes for `args` (`bytes` = count * dtype size) on `nranks` ranks.
inline size_t publishedBytes(const CollectiveArgs& args, size_t bytes, int nranks, int rank) {
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

// Too large for the slots on some rank: only single copy (an all-reduce, an equal
// exchange) or the fingerprint check can run it.
inline bool isLarge(const CollectiveArgs& args, size_t bytes, int nranks, size_t slotBytes) {
  return publishedBytes(args, bytes, nranks, args.root) > slotBytes ||
         publishedBytes(args, bytes, nranks, (args.root + 1) % nranks) > slotBytes;
}

}  // namespace collie::shm
