// The team board: the primitive a transport offers when every rank of a communicator maps
// the same memory (shm, every rank on one host). The transport owns the memory, the
// sequence words and how ranks wait for each other; core/team runs the collectives on it
// (core/team/board_collectives.h). No collective is named here.
//
// Memory. Every rank owns a board, which every peer maps: per parity (0, 1) one line
// (BoardLine: a sequence word, a tag and 48 bytes of data in one cache line), one note
// (BoardNote: a sequence word, a tag and what single copy publishes) and one data slot of
// offer().boardBytes bytes; and two meeting flags (BoardFlag: done, probed). views() gives every
// rank's addresses in this process, fixed from connect to close.
//
// Rounds. Every rank runs the same rounds in the same order, numbered 1, 2, 3, ... by the
// caller: round s's parity s % 2 selects the line, note and slot. A rank
// writes its own line (or note and slot), then publish()es s in that line's or note's
// sequence word; its peers read them once they see s there (awaitPublished() waits, with
// the claims below, for every rank's line or note). Reusing parity s % 2 at s + 2 needs no
// more flags as long as the caller keeps one rule: a rank opens round s + 1 only after it
// finished reading the lines, notes and slots of round s, or, where it reads nothing of
// round s, only when no rank can finish round s before every rank published it. A
// meeting (meet()) publishes s in one of the rank's flags and waits until every rank's
// flag holds at least s: nobody returns from a meeting before every rank arrived.
//
// One outcome per round (the verdict): publications are compare-and-swaps. A rank that
// gives up a wait (timeout, abort, a peer gone) claims the word of every peer that has
// not published yet; a claimed rank's publish() fails naming the claimer; the claimer
// completes the round when every peer had published (the wait then succeeds), else fails
// it, and so does every rank: no rank reports success for a round another rank failed.
//
// Waits spin, then yield, then sleep on the rank's doorbell (publishers ring only
// sleepers); each wait fails with kTimeout naming the peer after `timeout` (the clock
// starts when the wait does), kAborted soon after `cancelled`, kRemoteError when a peer
// that has not published is gone.
//
// Single copy through the peers' memory (registered windows, cross-memory attach) is the
// board's companion, peerMemory() (core/transport/peer_memory.h).
//
// Thread safety: used by one thread at a time (the engine's running claim); offer() and
// views() may be read from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "collie/status.h"
#include "core/memory/shared_region.h"
#include "core/plan/team_step.h"
#include "core/transport/peer_memory.h"

namespace collie {

// A rank's line: a round whose every part fits kBoardLineBytes travels here, sequence,
// tag and data in one cache line, so a peer's publication costs one line transfer.
inline constexpr size_t kBoardLineBytes = 48;
struct BoardLine {
  alignas(64) std::atomic<uint64_t> sequence;
  uint64_t tag;
  uint8_t data[kBoardLineBytes];
};
static_assert(sizeof(BoardLine) == 64);

// A rank's note for a round whose part travels in its slot (or has no part).
struct BoardNote {
  alignas(64) std::atomic<uint64_t> sequence;
  uint64_t tag;
  uint64_t bytes;        // of its part in the slot
  uint32_t registered;   // its buffers are registered (single copy: where they are below)
  uint32_t crossMemory;  // it would go through cross-memory attach (its addresses below)
  uint32_t waits;        // it waits for every rank's note of this round (see publish())
  uint64_t pidNamespace;
  SharedWindow send;
  SharedWindow recv;
  uint64_t inputAddress;
  uint64_t outputAddress;
};

// A meeting flag and a value published with it.
struct BoardFlag {
  alignas(64) std::atomic<uint64_t> sequence;
  uint32_t value;
};

// One rank's board as mapped in this process.
struct BoardView {
  BoardLine* line[2];
  BoardNote* note[2];
  uint8_t* slot[2];
  BoardFlag* done;
  BoardFlag* probed;
};

enum class BoardMeeting { kDone, kProbed };

// How long a wait may take and what cancels it.
struct BoardWait {
  std::chrono::microseconds timeout;
  const std::atomic<bool>* cancelled;
};

class TeamBoard {
 public:
  virtual ~TeamBoard() = default;

  // The team algorithms and their costs, agreed at connect: equal on every rank. Its
  // boardBytes is the size of one data slot.
  virtual TeamOffer offer() const = 0;
  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  // Every rank's board, indexed by rank; this rank's is the one it writes.
  virtual const BoardView* views() const = 0;
  // This process's pid namespace: single copy needs every rank's to be the same.
  virtual uint64_t pidNamespace() const = 0;

  // Publishes `sequence` in `word` (this rank's line, note or flag) unless a giving-up
  // rank claimed it (then the error naming the claimer). With `wake` it rings every peer
  // that sleeps; without, only those whose note of this round is published with `waits`
  // set (a rank that publishes a note nobody waits for wakes only the peers that do).
  virtual Status publish(std::atomic<uint64_t>& word, uint64_t sequence, bool wake) = 0;

  // Waits until every peer published `sequence` in its line or its note (either: a rank
  // checks the lane afterwards, so that a disagreement is a mismatch, not a timeout).
  // Settled with claims when the wait fails.
  virtual Status awaitPublished(uint64_t sequence, const BoardWait& wait) = 0;

  // Publishes `sequence` (and `value`) in this rank's flag `which` and waits until
  // every rank's is at least `sequence`; `what` ("finish its share of ...") names what a
  // late peer did not do in the timeout's error.
  virtual Status meet(BoardMeeting which, uint64_t sequence, uint32_t value, const char* what,
                      const BoardWait& wait) = 0;

  // How this rank reaches its peers' buffers for single copy; lives as long as the board.
  virtual PeerMemory& peerMemory() = 0;
};

}  // namespace collie
