// The shm transport's team collectives (core/transport/team_collectives.h) for ranks that all share
// one host: the board, and the single-copy all-reduces direct and cma.
//
// Board: every rank owns a small board segment with two slots (double buffering by
// sequence parity). For collective number s each rank copies its input into slot s % 2
// of its board, stores the collective's fingerprint and publishes s with a release
// store; then it waits until every rank published s in its slot s % 2 and computes its
// output straight from the slots, combining ranks in rank order so that every rank
// gets the same bits. A collective whose slots hold at most 48 bytes travels instead in
// one cache line per rank and parity (sequence, fingerprint, data). No queue, no
// allocation, no clock read and no syscall on the fast path: a waiter spins (reading
// the clock only after 32 spins, then every 16) for COLLIE_SHM_SPIN, then sleeps on its
// doorbell futex, which publishers ring only when someone sleeps. Each rank keeps the
// CPU it runs on in its board (Placement); a waiter whose peer last ran on the waiter's
// own CPU yields from the start instead of spinning first (the peer cannot run while it
// spins: two ranks that the scheduler stacked on one core, as it sometimes does for the
// first tens of milliseconds of a job). Reusing slot s % 2 at
// s + 2 is safe without more flags: a rank publishes s + 1 only after it finished
// reading the slots of s.
//
// Direct before the board: an all-reduce that fits the board and whose team step offers
// direct (the tuner's model, from COLLIE_SHM_DIRECT_MIN) publishes on the board whether
// its buffers are registered; when every rank's were, the next such all-reduce tries
// direct first (the single copy below, the board as its fallback). Every rank learns it
// from the same headers, so every rank goes first to the same path.
//
// Single copy (an all-reduce whose team step tries direct or cma): each rank publishes
// in its slot header whether its buffers are registered (shm_direct.h) and where, and
// whether it would go through cross-memory attach (shm_cma.h: cma tried, not denied, in
// place or at most the agreed COLLIE_SHM_CMA_MAX) and its buffer addresses. Every rank
// reads the same headers, so every rank decides alike: direct when every rank's buffers
// are registered, else cma when every rank would, else declined (then the board, when
// the step tries it and the collective fits, else the fallback schedule). Both reduce
// share r of the elements on rank r into every output, then publish a done flag and
// wait for everyone's. The first cma all-reduce probes process_vm_readv/writev on
// every rank; if any rank is denied, every rank says so in the log and cma declines from
// then on.
//
// The equal exchanges (all-to-all, gather, scatter) run on the board (each rank copies
// its blocks out of the slots) or through cma the same way (shm_cma_exchange.h: each rank
// pulls the blocks it receives from the senders' inputs, then the done flag).
//
// A team step with no algorithm (the fingerprint check) publishes the header too: the
// ranks whose collective cannot complete before every rank started it (all-reduce,
// reduce-scatter, all-gather, all-to-all) decline at once; the others (broadcast, reduce,
// gather, scatter, whose root or leaves could finish alone and lap a slow peer's slot)
// wait for every rank's header, so ranks running different collectives fail with
// Mismatch.
//
// One outcome per collective (shm_verdict.h): a rank publishes each sequence number
// (its line or slot header, its done and probe flags) with a compare-and-swap, and a rank
// that gives up (timeout, abort, a peer gone), or that sees a peer's word claimed, claims
// the words of every peer that has not published yet. It completes the collective when
// every peer had published, else it fails, and so does every other rank: a late rank
// fails with an error naming the rank that claimed its word. The fast path costs nothing
// more: the compare-and-swap replaces a store that a full fence followed anyway.
//
// Peers' boards are mapped read-write (only the sequence words are ever written by a
// peer, by claims) and their headers validated; a peer whose tag differs fails the
// collective with kMismatch naming it before any output is written.
//
// Thread safety: used by one thread at a time (the engine serialises collectives).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/transport/team_collectives.h"
#include "core/transport/transport.h"
#include "core/transport/wait_policy.h"
#include "transports/shm/shm_cma.h"
#include "transports/shm/shm_connection.h"
#include "transports/shm/shm_direct.h"
#include "transports/shm/shm_huge_pages.h"
#include "transports/shm/shm_knobs.h"
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

// How many board all-reduces this process ran in two shots (tests: shows the path ran).
uint64_t boardTwoShotCount();
// How many waits of this process's boards skipped the pure spin because the peer had
// last run on the waiter's CPU (tests: shows the detection ran).
uint64_t boardSharedCpuWaitCount();
// How many all-reduces that the board could carry this process's boards tried direct
// first, because every rank's buffers were registered at the last such call (tests).
uint64_t boardDirectFirstCount();

class Board final : public TeamCollectives {
 public:
  // Creates this rank's board, publishes it, maps every peer's and unlinks the names
  // once all ranks mapped them. `shared` provides peer liveness and doorbells.
  static Result<std::unique_ptr<Board>> connect(const TransportContext& ctx, const ShmKnobs& knobs,
                                                std::shared_ptr<ShmShared> shared,
                                                const WaitPolicy& wait);
  ~Board() override;

  TeamOffer offer() const override { return offer_; }
  // Collectives up to 256 KiB per rank (larger ones would block the caller for their
  // copies): those that fit the board, and single copy when this rank's buffers are
  // registered (an unregistered large all-reduce may be declined: no point blocking the
  // caller).
  bool runsInline(const CollectiveArgs& args, TeamAlgorithms algorithms, const void* input,
                  const void* output) const override;
  Result<TeamOutcome> run(const CollectiveArgs& args, TeamAlgorithms algorithms, bool fallback,
                          uint64_t tag, const void* input, void* output,
                          std::chrono::microseconds timeout,
                          const std::atomic<bool>& cancelled) override;

 private:
  struct Mapping {
    void* base = nullptr;
    size_t bytes = 0;
  };
  // What one collective runs with, passed down the paths.
  struct Call {
    const CollectiveArgs& args;
    TeamAlgorithms algorithms;
    bool fallback;
    bool boardNext;  // declined, it goes on to the board (with the next sequence number)
    uint64_t tag;
    const void* input;
    void* output;
    std::chrono::microseconds timeout;
    const std::atomic<bool>& cancelled;
  };
  Board(const TransportContext& ctx, const ShmKnobs& knobs, std::shared_ptr<ShmShared> shared,
        size_t slotBytes, const WaitPolicy& wait);

  // The board itself (the collective fits the slots; `bytes`: its count's bytes).
  // `offersDirect`: an all-reduce whose step offers direct (it publishes whether its
  // buffers are registered, and learns directLikely_).
  Result<TeamOutcome> runBoard(const CollectiveArgs& args, size_t bytes, uint64_t tag,
                               const void* input, void* output, std::chrono::microseconds timeout,
                               const std::atomic<bool>& cancelled, bool offersDirect);
  // Whether both buffers are allocShared memory (shm_direct.h), as direct needs them.
  bool buffersRegistered(const void* input, const void* output, size_t bytes) const;
  // The board's all-reduce in two shots: each rank reduces its share from the slots into
  // its output and its own slot's share, a meeting, then it copies the peers' shares.
  // In place from the third rank on, the first reductions overwrite this rank's input
  // before it is added: it reads its share from its own slot, which then holds it too.
  static bool twoShotReadsOwnSlot(const void* input, const void* output, int rank) {
    return input == output && rank >= 2;
  }
  Status twoShotAllReduce(const CollectiveArgs& args, const void* input, uint8_t* out,
                          uint64_t sequence, int parity, std::chrono::microseconds timeout,
                          const std::atomic<bool>& cancelled);
  // Single copy (direct, cma) or the fingerprint check; declined when neither runs
  // (shm_board_single_copy.cc).
  Result<TeamOutcome> runSingleCopy(const Call& call);
  // The cma all-reduce, once every rank chose it.
  Result<TeamOutcome> runCrossMemory(const Call& call, uint64_t sequence);
  // Whether this rank would take cma for `call` (published; cma runs when every rank
  // would). `hugePages`: its plain buffers are in huge pages (adviseHugePages).
  bool wantsCrossMemory(const Call& call, bool hugePages) const;
  bool crossMemoryPossible(const Call& call) const;
  // Asks for huge pages behind an all-reduce's plain buffers (shm_huge_pages.h); true
  // when both are in them.
  bool adviseHugePages(const Call& call, size_t bytes);
  // Declined on every rank alike: the outcome, or without a fallback an error saying
  // `why` (a forced team algorithm that cannot run this collective).
  Result<TeamOutcome> declined(const Call& call, const std::string& why) const;
  // Waits until ready(peer) for every peer: spin, then yield, then the doorbell futex.
  // Fails at once (with the error naming the peer) when claimed(peer) returns a marker
  // (shm_verdict.h) while the peer is not ready.
  template <typename Ready, typename Claimed>
  Status waitForAll(Ready ready, Claimed claimed, const char* what,
                    std::chrono::microseconds timeout, const std::atomic<bool>& cancelled);
  // After a failed wait for `sequence` (`failure`, not a mismatch): claims the words
  // (`words(peer, out)` fills at most 2) of every peer; OK when every peer had published
  // (the collective completes), else `failure`.
  template <typename Words>
  Status claimPeers(uint64_t sequence, Status failure, Words words);
  // Wakes the peers that sleep; right after a publish() (its compare-and-swap is the
  // fence between the publication and the reads of their sleeper counts).
  void ringPeers();
  // Publishes `sequence` in this rank's flag (`flag` finds it in a board) and waits
  // until every rank's is at least `sequence`.
  Status meet(std::atomic<uint64_t>* (*flag)(void*), uint64_t sequence, const char* what,
              std::chrono::microseconds timeout, const std::atomic<bool>& cancelled);
  // `inLine`: the collective travels in LineSlots (sequence, tag, data in one line).
  // Settled with claims (claimPeers) when the wait fails.
  Status waitForPeers(uint64_t sequence, uint64_t tag, size_t bytes, bool inLine,
                      std::chrono::microseconds timeout, const std::atomic<bool>& cancelled);
  Status waitForPublished(uint64_t sequence, std::chrono::microseconds timeout,
                          const std::atomic<bool>& cancelled);
  // Publishes `sequence` in this rank's `word` unless a giving-up rank claimed it.
  Status publish(std::atomic<uint64_t>& word, uint64_t sequence) {
    return verdict::publish(word, sequence, ctx_.rank);
  }
  const uint8_t* slotData(int rank, int parity) const;
  // Stores this rank's CPU in its board's Placement when it changed (every collective;
  // sched_getcpu reads the kernel's rseq area, about 2 ns here).
  void notePlacement();
  // Whether `peer` ran its latest collective on the CPU this rank runs on.
  bool peerSharesCpu(int peer) const;

  TransportContext ctx_;
  std::shared_ptr<ShmShared> shared_;
  size_t slotBytes_;
  uint64_t twoShotMin_ = UINT64_MAX;  // agreed at connect
  std::string name_;
  std::vector<Mapping> boards_;  // per rank; this rank's is writable
  uint64_t sequence_ = 0;
  // Every rank's buffers were registered at the last all-reduce whose team step offered
  // direct (read from the headers every rank read, so equal on every rank): the next one
  // that fits the board tries direct first. Direct before the board costs a meeting when
  // it declines, which a program of plain buffers then never pays.
  bool directLikely_ = false;
  int cpu_ = -1;     // as last stored in this rank's Placement
  WaitPolicy wait_;  // COLLIE_SHM_SPIN; oversubscribed: yield from the start
  uint64_t pidNamespace_;
  TeamOffer offer_;  // agreed at connect
  struct FreeScratch {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, FreeScratch> scratch_;  // kDirectTileBytes, 64-byte aligned
  PeerWindows windows_;
  // Cross-memory attach: untested until the first cma all-reduce, then the same on
  // every rank (decided from what every rank published). The exchanges only read, and
  // only from the ranks they receive from: they probe once for themselves.
  enum class CrossMemoryState { kUntested, kAllowed, kDenied };
  CrossMemoryState crossMemoryState_ = CrossMemoryState::kUntested;
  CrossMemoryState pullState_ = CrossMemoryState::kUntested;
  CrossMemoryState& crossMemoryStateFor(CollectiveKind kind) {
    return kind == CollectiveKind::kAllReduce ? crossMemoryState_ : pullState_;
  }
  const CrossMemoryState& crossMemoryStateFor(CollectiveKind kind) const {
    return kind == CollectiveKind::kAllReduce ? crossMemoryState_ : pullState_;
  }
  CrossMemoryAllReduce crossMemory_;
  HugePageAdvisor hugePages_;  // the plain buffers cma all-reduces publish
  // Reused by every single-copy collective (no allocation per call): the headers read,
  // every rank's input and output (direct), every rank's pid and addresses (cma); nranks
  // entries each.
  struct HeaderCopy {  // what a single-copy all-reduce reads of a rank's slot header
    uint32_t registered = 0;
    uint64_t pidNamespace = 0;
    SharedWindow send, recv;
    uint32_t crossMemory = 0;
  };
  std::vector<HeaderCopy> headerCopies_;
  std::vector<const uint8_t*> directInputs_;
  std::vector<uint8_t*> directOutputs_;
  std::vector<CrossMemoryRank> crossMemoryRanks_;
};

}  // namespace collie::shm
