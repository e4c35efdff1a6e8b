// One outcome per round of the shm team board (shm_board.h), decided on the words
// the ranks publish in anyway: no shared word, no extra cache line on the fast path.
//
// The problem: a rank that gives up on collective s (timeout, abort, a peer gone) and a
// late rank that completes s from what the failed rank had already published must not
// report different outcomes. Two flags ("I withdrew", "I completed") cannot settle it
// (each rank can see the other's); a compare-and-swap on one word per publication can.
//
// Every rank publishes s in its own words (its line or note, its done flag) with
// a compare-and-swap (publish()) instead of a store. A rank that gives up claims every
// peer's words for s (claim()): it swaps a marker (the sequence, its rank, its error
// code) into each word the peer has not published s in yet. Each word's compare-and-swaps
// are totally ordered, so for each peer either its publication came first (the claimer
// sees it, takes back the markers it placed on the peer's other words and counts the
// peer published) or a marker did (the peer's publish() fails: it reports an error naming
// the claimer and never publishes s). The claimer then completes s when every peer had
// published (their parts are there; a claimer that timed out completes the collective
// after all) and fails it otherwise. A rank that already published and waits sees a
// marker on a peer that has not published and claims too, so it reaches the same
// conclusion. Nobody can complete s without every rank's publication, and a claimer
// fails s only when some rank's publication is blocked for good: every rank gets the
// same outcome.
//
// Word values: sequence numbers (below 2^63), or a marker: bit 63, the error code in bits
// 56..62, the claiming rank in bits 40..55, the sequence's low 40 bits. Markers are
// never taken back once the claimer concluded the collective failed: the communicator is
// done.
//
// Thread safety: the words are shared between processes; the functions are lock-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "collie/status.h"

namespace collie::shm::verdict {

inline constexpr uint64_t kMarker = uint64_t{1} << 63;

inline uint64_t marker(uint64_t sequence, int rank, StatusCode code) {
  return kMarker | (static_cast<uint64_t>(code) & 0x7f) << 56 |
         (static_cast<uint64_t>(rank) & 0xffff) << 40 | (sequence & ((uint64_t{1} << 40) - 1));
}
inline bool isMarker(uint64_t word) { return (word & kMarker) != 0; }
// Whether `word` shows its owner published `sequence` (a flag that only grows counts
// later sequences too).
inline bool published(uint64_t word, uint64_t sequence) {
  return !isMarker(word) && word >= sequence;
}

// The error of rank `rank`, which found `word` (a marker) where it waited or published.
inline Status blockedError(uint64_t word, int rank) {
  const int claimer = static_cast<int>((word >> 40) & 0xffff);
  const auto code = static_cast<StatusCode>((word >> 56) & 0x7f);
  return remoteError("rank " + std::to_string(claimer) + " failed this team collective (" +
                         statusCodeName(code) + ") before rank " + std::to_string(rank) +
                         " could complete it; no rank reports it a success",
                     claimer);
}

// The error of rank `rank`, which waited for `peer` and found `word` (a marker) in its
// place: `peer` never published, and a rank gave up on the collective. It names `peer`
// (the rank that did not join: dead, late or stuck), whose own error names the claimer.
inline Status claimedError(uint64_t word, int peer, int rank) {
  const int claimer = static_cast<int>((word >> 40) & 0xffff);
  const auto code = static_cast<StatusCode>((word >> 56) & 0x7f);
  return remoteError(
      "rank " + std::to_string(peer) + " did not join this team collective before rank " +
          std::to_string(claimer) + " gave up on it (" + statusCodeName(code) + "); rank " +
          std::to_string(rank) + " fails it too, no rank reports it a success",
      peer);
}

// Publishes `sequence` in this rank's own `word` unless a failing rank claimed it first:
// then the error naming that rank. Sequentially consistent (also a release of what the
// rank wrote before; a full fence on x86, as the store and fence it replaces were).
inline Status publish(std::atomic<uint64_t>& word, uint64_t sequence, int rank) {
  uint64_t seen = word.load(std::memory_order_relaxed);
  while (!isMarker(seen)) {
    if (word.compare_exchange_weak(seen, sequence, std::memory_order_seq_cst,
                                   std::memory_order_relaxed)) {
      return Status();
    }
  }
  return blockedError(seen, rank);
}

// A giving-up rank's claim on one peer's `words` (where the peer may publish `sequence`)
// with `mark` (marker(sequence, this rank, code)). True when the peer had published
// (acquire: its part is visible; the markers placed here are taken back), false when it
// can no longer publish `sequence` in any of them.
inline bool claim(std::atomic<uint64_t>* const* words, int n, uint64_t sequence, uint64_t mark) {
  uint64_t before[4] = {0, 0, 0, 0};
  bool placed[4] = {false, false, false, false};
  bool wasPublished = false;
  for (int i = 0; i < n && !wasPublished; ++i) {
    uint64_t seen = words[i]->load(std::memory_order_acquire);
    while (true) {
      if (published(seen, sequence)) {
        wasPublished = true;
        break;
      }
      if (isMarker(seen)) break;  // another rank claimed this word
      if (words[i]->compare_exchange_weak(seen, mark, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
        before[i] = seen;
        placed[i] = true;
        break;
      }
    }
  }
  if (wasPublished) {
    // The peer published in another word; it never writes these for `sequence`.
    for (int i = 0; i < n; ++i) {
      uint64_t expected = mark;
      if (placed[i]) words[i]->compare_exchange_strong(expected, before[i]);
    }
  }
  return wasPublished;
}

// The first marker among `words` (0 when none).
inline uint64_t markerAmong(std::atomic<uint64_t>* const* words, int n) {
  for (int i = 0; i < n; ++i) {
    const uint64_t seen = words[i]->load(std::memory_order_acquire);
    if (isMarker(seen)) return seen;
  }
  return 0;
}

}  // namespace collie::shm::verdict
