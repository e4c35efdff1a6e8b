// The team step's runner: collectives that every rank of a communicator runs together on
// memory they all map (UCC's "team" collectives), as named algorithms of the planner.
//
// When one transport serves every peer and offers a team board (Transport::teamBoard(),
// core/transport/team_board.h: shm with every rank on one host), the executor runs team
// steps through a BoardCollectives over it (core/team/board_collectives.h: board, direct,
// cma). offer() says which team algorithms it runs and the constants of their cost model
// (core/plan/team_step.h); it is the same value on every rank (the team agrees on it
// while connecting), so the tuner, which plans with it, decides alike on every rank. The
// planner then puts a team step first in a collective's schedule (core/plan/team_step.h
// says what it means), and the executor hands that step to run(). A collective that is
// not point-to-point goes through the team step whenever the communicator has a team and
// the algorithm is auto or a team algorithm: even one the tuner gave to ring or tree meets
// the other ranks here first (an empty set), so ranks that run different collectives fail
// with Mismatch instead of waiting for each other's messages.
//
// Thread safety: used by one thread at a time, the one holding the engine's running
// claim (its progress thread, or a caller running a collective inline). offer() may
// be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "collie/status.h"
#include "core/plan/fold_order.h"
#include "core/plan/team_step.h"

namespace collie {

// What a team step's run() did.
struct TeamOutcome {
  Algorithm ran = Algorithm::kAuto;  // the algorithm that ran it; kAuto: declined
  bool declined() const { return ran == Algorithm::kAuto; }
};

class TeamCollectives {
 public:
  virtual ~TeamCollectives() = default;

  // The team algorithms this team runs and their costs; the same on every rank.
  virtual TeamOffer offer() const = 0;

  // Whether the engine may run this team step on the submitting thread when it is idle
  // (saving two thread hand-offs) rather than on its progress thread. A local choice:
  // it may depend on the buffers. An inline run blocks the caller until every rank
  // joined, so say yes only where that is short.
  virtual bool runsInline(const CollectiveArgs& args, TeamAlgorithms algorithms, const void* input,
                          const void* output) const = 0;

  // Runs the collective with the first algorithm of `algorithms` (kTeamOrder) whose
  // condition holds on every rank, decided from what every rank published so that every
  // rank takes the same one; or declines it on every rank alike, having written no
  // output. An empty set only checks that every rank runs this collective (`tag`, its
  // fingerprint), then declines. Without a fallback (`fallback` false: a forced team
  // algorithm) a collective none can run fails instead, on every rank, with
  // kUnsupported saying why. Fails with kMismatch when a peer runs a collective with
  // another fingerprint, kRemoteError when a peer is gone, kTimeout naming a peer it
  // waited `timeout` for (the clock starts when a wait starts, so a fast path reads no
  // clock), kAborted soon after `cancelled` becomes true. One outcome per collective:
  // once a rank failed a collective, no rank reports it a success (a late rank fails with
  // kRemoteError naming the rank that failed it), and a rank about to fail one that
  // another rank already completed completes it too (core/transport/team_board.h). An
  // all-to-all may be in place (input == output, each rank's own choice): no block a
  // peer still reads is overwritten before it read it. A single-copy all-reduce combines
  // each element's values in `fold`'s order (the schedule's: core/plan/fold_order.h), so
  // that it gives the bits the fallback would.
  virtual Result<TeamOutcome> run(const CollectiveArgs& args, TeamAlgorithms algorithms,
                                  bool fallback, const FoldOrder& fold, uint64_t tag,
                                  const void* input, void* output,
                                  std::chrono::microseconds timeout,
                                  const std::atomic<bool>& cancelled) = 0;
};

}  // namespace collie
