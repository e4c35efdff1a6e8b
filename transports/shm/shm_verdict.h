// TeamVerdict: the one outcome of each team collective of the shm board (shm_board.h),
// decided by one compare-and-swap on one word that every rank of the host maps
// read-write (SegmentHeader::teamVerdict of rank 0's segment).
//
// Why one word: a rank that gives up on collective s (timeout, abort, a peer gone) and a
// late rank that completes s from what the failed rank had already published must not
// report different outcomes. Two flags ("I withdrew", "I completed") cannot settle that:
// each rank can see the other's. One word can: the word holds the verdict of the latest
// decided sequence, and the first rank to swap it decides for everyone.
//   - decideOk(s), before a rank reports success: only after it saw every rank's part of
//     s. If the word says s failed, the rank fails too (having written no output), with
//     an error naming the rank that failed s and its reason code.
//   - decideFailed(s, error), before a rank reports failure of s: if the word already
//     says s succeeded, every part of s was published (the deciding rank saw them), so
//     the caller finishes s successfully instead (returns OK); else s fails for every
//     rank and the caller reports `error`.
// A word that already holds a later sequence means s succeeded: no rank passes s
// without deciding it so, and no rank starts s + 1's wait before finishing s.
//
// Word layout: sequence (low 40 bits of the team's sequence number) << 24 | rank << 8 |
// state, state 1 = succeeded, 0x80 | StatusCode = failed by `rank`. Ranks of one
// communicator are at most one sequence apart, so 40 bits cannot alias.
//
// Cost on the fast path: one acquire load of a line every rank touches once per
// collective, and one compare-and-swap by whichever rank gets there first.
//
// Thread safety: the word is shared between processes; a TeamVerdict is used by the one
// thread running the team's collectives.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "collie/status.h"

namespace collie::shm {

class TeamVerdict {
 public:
  TeamVerdict() = default;
  TeamVerdict(std::atomic<uint64_t>* word, int rank) : word_(word), rank_(rank) {}

  // OK when s is (now) decided a success; otherwise the error for this rank (kRemoteError
  // naming the rank that failed s).
  Status decideOk(uint64_t sequence) {
    if (word_ == nullptr) return Status();
    const uint64_t ok = pack(sequence, rank_, kSucceeded);
    uint64_t seen = word_->load(std::memory_order_acquire);
    while (true) {
      const int verdict = verdictOf(seen, sequence);
      if (verdict == kSucceeded) return Status();
      if (verdict != kUndecided) return failedBy(seen);
      if (word_->compare_exchange_weak(seen, ok, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        return Status();
      }
    }
  }

  // True when s was decided a success before this rank could fail it (the caller then
  // completes it); false when s is failed for every rank.
  bool decideFailed(uint64_t sequence, const Status& error) {
    if (word_ == nullptr) return false;
    const int code = 0x80 | (static_cast<int>(error.code()) & 0x7f);
    const uint64_t failed = pack(sequence, rank_, code);
    uint64_t seen = word_->load(std::memory_order_acquire);
    while (true) {
      const int verdict = verdictOf(seen, sequence);
      if (verdict == kSucceeded) return true;
      if (verdict != kUndecided) return false;
      if (word_->compare_exchange_weak(seen, failed, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        return false;
      }
    }
  }

  // Whether s is already decided a failure (a cheap look before touching peers' memory).
  Status failedAlready(uint64_t sequence) const {
    if (word_ == nullptr) return Status();
    const uint64_t seen = word_->load(std::memory_order_acquire);
    const int verdict = verdictOf(seen, sequence);
    return verdict == kSucceeded || verdict == kUndecided ? Status() : failedBy(seen);
  }

 private:
  static constexpr int kUndecided = 0;
  static constexpr int kSucceeded = 1;
  static constexpr uint64_t kSequenceMask = (uint64_t{1} << 40) - 1;

  static uint64_t pack(uint64_t sequence, int rank, int state) {
    return (sequence & kSequenceMask) << 24 | (static_cast<uint64_t>(rank) & 0xffff) << 8 |
           static_cast<uint64_t>(state & 0xff);
  }
  // kUndecided, kSucceeded or the failed state of `sequence` as `word` tells it.
  static int verdictOf(uint64_t word, uint64_t sequence) {
    const uint64_t decided = word >> 24;
    const uint64_t mine = sequence & kSequenceMask;
    if (decided == mine) return static_cast<int>(word & 0xff);
    // A later sequence decided (mod 2^40): this one succeeded.
    return ((decided - mine) & kSequenceMask) < (kSequenceMask >> 1) ? kSucceeded : kUndecided;
  }
  Status failedBy(uint64_t word) const {
    const int rank = static_cast<int>((word >> 8) & 0xffff);
    const auto code = static_cast<StatusCode>(word & 0x7f);
    return remoteError("rank " + std::to_string(rank) + " failed this team collective (" +
                           statusCodeName(code) + ") before rank " + std::to_string(rank_) +
                           " could complete it; no rank reports it a success",
                       rank);
  }

  std::atomic<uint64_t>* word_ = nullptr;
  int rank_ = 0;
};

}  // namespace collie::shm
