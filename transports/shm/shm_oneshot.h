// One-shot collectives through a shared board, for small messages between ranks that
// all share one host.
//
// Every rank owns a small board segment with two slots (double buffering by sequence
// parity). For collective number s each rank copies its input into slot s % 2 of its
// board, stores the collective's fingerprint and publishes s with a release store;
// then it waits until every rank published s in its slot s % 2 and computes its
// output straight from the slots, combining ranks in rank order so that every rank
// gets the same bits. A collective whose slots hold at most 48 bytes travels instead in
// one cache line per rank and parity (sequence, fingerprint, data). No queue, no
// allocation, no clock read and no syscall on the fast path: a waiter spins (reading
// the clock only after 32 spins, then every 16) for
// COLLIE_SHM_SPIN, then sleeps on its doorbell futex, which publishers ring only when
// someone sleeps. Reusing slot s % 2 at s + 2 is safe without more flags: a rank
// publishes s + 1 only after it finished reading the slots of s.
//
// An all-reduce larger than the slots goes direct (shm_direct.h): each rank publishes
// the registration windows of its buffers in its slot header, and when every rank's
// are registered (all ranks read the same headers, so all decide alike) each reduces
// its share into every output, then publishes a done flag and waits for everyone's;
// otherwise, when every rank's all-reduce is in place or at most COLLIE_SHM_CMA_MAX
// bytes, it goes single-copy through cross-memory attach (shm_cma.h): each rank
// publishes its buffer addresses, reduces its share from peers' inputs and writes it
// into every output, then publishes the done flag and waits for everyone's. The first
// such collective probes process_vm_readv/writev on every rank; if any rank is denied,
// every rank says so in the log and keeps the FIFO ring. Otherwise run() returns
// kDeclined on every rank and the engine runs the schedule.
//
// Plain-buffer all-reduces that fit the slots but exceed COLLIE_SHM_CMA_MIN take the
// same cross-memory path, because it beats the board there, except where a host's ranks
// outnumber its cores (there the board wins). Each rank publishes its range in its board
// header and every rank uses the intersection, so all route alike.
//
// Peers' boards are mapped read-only and their headers validated; a peer whose tag
// differs fails the collective with kMismatch naming it before any output is written.
//
// Thread safety: used by one thread at a time (the engine serialises collectives).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/transport/transport.h"
#include "transports/shm/shm_cma.h"
#include "transports/shm/shm_connection.h"
#include "transports/shm/shm_direct.h"

namespace collie::shm {

class OneShotBoard final : public CollectiveOffload {
 public:
  // Creates this rank's board, publishes it, maps every peer's and unlinks the names
  // once all ranks mapped them. `shared` provides peer liveness and doorbells.
  static Result<std::unique_ptr<OneShotBoard>> connect(const TransportContext& ctx,
                                                       std::shared_ptr<ShmShared> shared,
                                                       std::chrono::microseconds spin,
                                                       bool ranksOutnumberCores);
  ~OneShotBoard() override;

  bool accepts(const CollectiveArgs& args) const override;
  // Small ones always; direct ones when this rank's buffers are registered (an
  // unregistered large all-reduce will be declined: no point blocking the caller).
  bool runsInline(const CollectiveArgs& args, const void* input, const void* output) const override;
  Result<OffloadOutcome> run(const CollectiveArgs& args, uint64_t tag, const void* input,
                             void* output, std::chrono::microseconds timeout,
                             const std::atomic<bool>& cancelled) override;

 private:
  struct Mapping {
    void* base = nullptr;
    size_t bytes = 0;
  };
  OneShotBoard(const TransportContext& ctx, std::shared_ptr<ShmShared> shared, size_t slotBytes,
               std::chrono::microseconds spin);
  // Collectives too large for the slots: a fingerprint check, then the direct
  // all-reduce when every rank's buffers are registered, else kDeclined.
  Result<OffloadOutcome> runLarge(const CollectiveArgs& args, uint64_t tag, const void* input,
                                  void* output, std::chrono::microseconds timeout,
                                  const std::atomic<bool>& cancelled);
  // The single-copy all-reduce over unregistered buffers, once every rank chose it.
  Result<OffloadOutcome> runCrossMemory(const CollectiveArgs& args, uint64_t sequence,
                                        const void* input, void* output,
                                        std::chrono::microseconds timeout,
                                        const std::atomic<bool>& cancelled);
  // Whether this rank would take the cross-memory path for `args` (a large all-reduce):
  // up to COLLIE_SHM_CMA_MAX bytes, or at any size in place.
  bool wantsCrossMemory(const CollectiveArgs& args, bool inPlace) const;
  // Whether run() takes runLarge(): too large for the slots, or a slot-sized all-reduce
  // that every rank agreed cross-memory attach takes. The same on every rank.
  bool goesLarge(const CollectiveArgs& args, size_t bytes) const;
  // Waits until ready(peer) for every peer: spin, then yield, then the doorbell futex.
  template <typename Ready>
  Status waitForAll(Ready ready, const char* what, std::chrono::microseconds timeout,
                    const std::atomic<bool>& cancelled);
  void ringPeers();
  // Publishes `sequence` in this rank's flag (`flag` finds it in a board) and waits
  // until every rank's is at least `sequence`.
  Status meet(std::atomic<uint64_t>* (*flag)(void*), uint64_t sequence, const char* what,
              std::chrono::microseconds timeout, const std::atomic<bool>& cancelled);
  // `inLine`: the collective travels in LineSlots (sequence, tag, data in one line).
  Status waitForPeers(uint64_t sequence, uint64_t tag, size_t bytes, bool inLine,
                      std::chrono::microseconds timeout, const std::atomic<bool>& cancelled);
  const uint8_t* slotData(int rank, int parity) const;

  TransportContext ctx_;
  std::shared_ptr<ShmShared> shared_;
  size_t slotBytes_;
  std::string name_;
  std::vector<Mapping> boards_;  // per rank; this rank's is writable
  uint64_t sequence_ = 0;
  std::chrono::microseconds spin_;
  uint64_t pidNamespace_;
  struct FreeScratch {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, FreeScratch> scratch_;  // kDirectTileBytes, 64-byte aligned
  PeerWindows windows_;
  // Cross-memory attach: untested until the first such collective, then the same on
  // every rank (decided from what every rank published).
  enum class CrossMemoryState { kUntested, kAllowed, kDenied };
  CrossMemoryState crossMemoryState_ = CrossMemoryState::kUntested;
  size_t crossMemoryMax_;
  // Slot-sized all-reduces of (from, to] bytes go cross-memory: the largest `from` and
  // smallest `to` any rank published in its board header.
  uint64_t crossMemoryFrom_ = UINT64_MAX;
  uint64_t crossMemoryTo_ = 0;
  CrossMemoryAllReduce crossMemory_;
};

}  // namespace collie::shm
