// The shm transport's team board (core/transport/team_board.h) for ranks that all share
// one host. core/team runs the collectives on it (board, direct, cma); this file is the
// memory and the waits, and names no collective.
//
// Every rank owns a board segment (shm_board_layout.h): per parity a line, a note and a
// data slot of COLLIE_SHM_ONESHOT_MAX bytes, two meeting flags and its Placement. Peers'
// boards are mapped read-write (only the sequence words are ever written by a peer, by
// claims) and their headers validated at connect, where the ranks also agree on the team
// offer (the largest crossovers, the smallest cma maximum any rank published).
//
// Waiting: a waiter spins (reading the clock only after 32 spins, then every 16) for
// COLLIE_SHM_SPIN, then sleeps on its doorbell futex, which publishers ring only when
// someone sleeps. Each rank keeps the CPU it runs on in its board (Placement); a waiter
// whose peer last ran on the waiter's own CPU yields from the start instead of spinning
// first (the peer cannot run while it spins: two ranks that the scheduler stacked on one
// core, as it sometimes does for the first tens of milliseconds of a job).
//
// One outcome per round (shm_verdict.h): a rank publishes each sequence number (its line
// or note, its flags) with a compare-and-swap, and a rank that gives up (timeout, abort,
// a peer gone), or that sees a peer's word claimed, claims the words of every peer that
// has not published yet. It completes the round when every peer had published, else it
// fails, and so does every other rank: a late rank fails with an error naming the rank
// that claimed its word. The fast path costs nothing more: the compare-and-swap replaces
// a store that a full fence followed anyway.
//
// Single copy: peerMemory() (shm_peer_memory.h) reaches the peers' buffers, through
// their registered windows or cross-memory attach to the pid each peer's segment gave at
// connect.
//
// Thread safety: used by one thread at a time (the engine serialises collectives).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/transport/team_board.h"
#include "core/transport/transport.h"
#include "core/transport/wait_policy.h"
#include "transports/shm/shm_connection.h"
#include "transports/shm/shm_knobs.h"
#include "transports/shm/shm_peer_memory.h"
#include "transports/shm/shm_verdict.h"

namespace collie::shm {

// The team offer these knobs give a board of `nranks` ranks, before
// the ranks agree (connect() takes the largest crossover and the smallest cma maximum
// any rank published): the board up to COLLIE_SHM_ONESHOT_MAX bytes per rank, direct,
// and cma unless COLLIE_SHM_CMA_MAX is 0, crossing the board at COLLIE_SHM_CMA_MIN
// (at the board's size where `ranksOutnumberCores`: there the board wins at every size
// it carries, docs/transports-shm.md); direct crossing it at COLLIE_SHM_DIRECT_MIN (at
// least kOversubscribedDirectMin where `ranksOutnumberCores`). Empty when
// COLLIE_SHM_ONESHOT_MAX is 0.
inline constexpr size_t kOversubscribedDirectMin = 16 * 1024;
TeamOffer boardTeamOffer(const ShmKnobs& knobs, int nranks, bool ranksOutnumberCores);

// The smallest board all-reduce these knobs run in two shots
// (COLLIE_SHM_TWOSHOT_MIN, at least kOversubscribedTwoShotMin where
// `ranksOutnumberCores`; UINT64_MAX when it is 0). connect() takes the largest any rank
// published.
inline constexpr uint64_t kOversubscribedTwoShotMin = 64 * 1024;
uint64_t boardTwoShotMin(const ShmKnobs& knobs, bool ranksOutnumberCores);

// How many waits of this process's boards skipped the pure spin because the peer had
// last run on the waiter's CPU (tests: shows the detection ran).
uint64_t boardSharedCpuWaitCount();

class Board final : public TeamBoard {
 public:
  // Creates this rank's board, publishes it, maps every peer's and unlinks the names
  // once all ranks mapped them. `shared` provides peer liveness, pids and doorbells.
  static Result<std::unique_ptr<Board>> connect(const TransportContext& ctx, const ShmKnobs& knobs,
                                                std::shared_ptr<ShmShared> shared,
                                                const WaitPolicy& wait);
  ~Board() override;

  TeamOffer offer() const override { return offer_; }
  int rank() const override { return ctx_.rank; }
  int nranks() const override { return ctx_.nranks; }
  const BoardView* views() const override { return views_.data(); }
  uint64_t pidNamespace() const override { return pidNamespace_; }
  Status publish(std::atomic<uint64_t>& word, uint64_t sequence, bool wake) override;
  Status awaitPublished(uint64_t sequence, const BoardWait& wait) override;
  Status meet(BoardMeeting which, uint64_t sequence, uint32_t value, const char* what,
              const BoardWait& wait) override;
  PeerMemory& peerMemory() override { return peerMemory_; }

 private:
  struct Mapping {
    void* base = nullptr;
    size_t bytes = 0;
  };
  Board(const TransportContext& ctx, const ShmKnobs& knobs, std::shared_ptr<ShmShared> shared,
        size_t slotBytes, const WaitPolicy& wait);

  // Waits until ready(peer) for every peer: spin, then yield, then the doorbell futex.
  // Fails at once (with the error naming the peer) when claimed(peer) returns a marker
  // (shm_verdict.h) while the peer is not ready.
  template <typename Ready, typename Claimed>
  Status waitForAll(Ready ready, Claimed claimed, const char* what, const BoardWait& wait);
  // After a failed wait for `sequence` (`failure`, not a mismatch): claims the words
  // (`words(peer, out)` fills at most 2) of every peer; OK when every peer had published
  // (the round completes), else `failure`.
  template <typename Words>
  Status claimPeers(uint64_t sequence, Status failure, Words words);
  // Wakes the peers that sleep; right after a publish (its compare-and-swap is the
  // fence between the publication and the reads of their sleeper counts).
  void ringPeers();
  // Stores this rank's CPU in its board's Placement when it changed (every publication;
  // sched_getcpu reads the kernel's rseq area, about 2 ns here).
  void notePlacement();
  // Whether `peer` ran its latest round on the CPU this rank runs on.
  bool peerSharesCpu(int peer) const;

  TransportContext ctx_;
  std::shared_ptr<ShmShared> shared_;
  size_t slotBytes_;
  std::string name_;
  std::vector<Mapping> boards_;   // per rank; this rank's is writable
  std::vector<BoardView> views_;  // per rank, into boards_
  int cpu_ = -1;                  // as last stored in this rank's Placement
  WaitPolicy wait_;               // COLLIE_SHM_SPIN; oversubscribed: yield from the start
  uint64_t pidNamespace_;
  TeamOffer offer_;  // agreed at connect
  PeerMemoryAccess peerMemory_;
};

}  // namespace collie::shm
