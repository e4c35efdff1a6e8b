// Internal to the shm board (shm_board.cc): the layout of one rank's board segment and
// small helpers on it.
//
// A board is [header page][control page: BoardNote x 2 parities, BoardFlag done, BoardFlag
// probed, Placement | BoardLine x 2 parities][data slot x 2 parities]
// (core/transport/team_board.h says what each holds). Its owner writes it; every peer
// maps it read-write, but writes only sequence words (claims).
//
// Thread safety: layout only; see shm_board.h for who writes what when.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/transport/team_board.h"
#include "transports/shm/shm_layout.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define COLLIE_CPU_RELAX() _mm_pause()
#else
#define COLLIE_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace collie::shm {

inline constexpr uint64_t kBoardMagic = 0x3644524f4254534full;  // "OSTBORD6"

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

// The CPU the board's owner ran its latest collective on (sched_getcpu; -1 unknown),
// stored only when it changes: a waiter whose peer is on its own CPU yields at once, since
// the peer cannot run while it spins.
struct Placement {
  alignas(kCacheLine) std::atomic<int32_t> cpu;
};

inline constexpr size_t kControlOffset = kPage;
inline constexpr size_t kDataOffset = 2 * kPage;

inline size_t boardBytes(size_t slotBytes) { return kDataOffset + 2 * slotBytes; }

inline BoardNote* note(void* base, int parity) {
  return reinterpret_cast<BoardNote*>(static_cast<uint8_t*>(base) + kControlOffset) + parity;
}
inline BoardFlag* doneFlag(void* base) { return reinterpret_cast<BoardFlag*>(note(base, 2)); }
inline BoardFlag* probedFlag(void* base) { return doneFlag(base) + 1; }
inline Placement* placement(void* base) {
  return reinterpret_cast<Placement*>(probedFlag(base) + 1);
}
inline BoardLine* line(void* base, int parity) {
  return reinterpret_cast<BoardLine*>(static_cast<uint8_t*>(base) + kControlOffset + kPage / 2) +
         parity;
}
inline uint8_t* slotData(void* base, size_t slotBytes, int parity) {
  return static_cast<uint8_t*>(base) + kDataOffset + parity * slotBytes;
}

static_assert(2 * sizeof(BoardNote) + 2 * sizeof(BoardFlag) + sizeof(Placement) <= kPage / 2);

}  // namespace collie::shm
