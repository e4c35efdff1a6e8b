// Runs the schedules of every rank of a collective in one process, moving real bytes
// through unbounded in-memory FIFOs (one per sender, receiver and channel). It
// checks that every receive matches the size of the message it gets and that no rank
// waits forever (deadlock), and leaves each rank's output buffer for the caller to
// verify. It models the engine where that matters for correctness: a reduction whose
// destination is a scratch slot receives straight into that slot (so a schedule that
// reduces a slot into itself is caught), and a channel runs its steps in order.
//
// Ranks are run from a work list (a rank runs until it waits for a message; a message
// wakes its receiver), so the cost is linear in the number of steps. Used by the
// schedule tests and `collie sim`.
//
// A team step (core/plan/team_step.h) must be first on channel 0 of every rank's schedule
// or of none, with the same set everywhere. The simulated team either runs it, as the
// reference of the team algorithms (every rank's output computed from every rank's
// input, combined with the host kernels in the order the board and the single-copy
// paths combine them: rank order, or an all-reduce's in the order of the ring behind the
// team step, core/plan/fold_order.h; so results compare bitwise), or declines it on
// every rank, and then the fallback steps after it run. A team step with an empty set
// (the fingerprint check) always declines; declining one without a fallback is an error,
// as it is for the engine.
//
// Thread safety: a call uses only its arguments; concurrent calls are independent.
#pragma once

#include <cstdint>
#include <vector>

#include "collie/status.h"
#include "core/plan/schedule.h"

namespace collie {

struct SimulatedRank {
  std::vector<uint8_t> input;   // inputBytes(args, nranks) bytes
  std::vector<uint8_t> output;  // outputBytes(args, nranks) bytes
};

enum class TeamSimulation { kRun, kDecline };

struct SimulationStats {
  uint64_t steps = 0;  // over all ranks and channels
  uint64_t maxStepsOnOneRank = 0;
  uint64_t messages = 0;
  uint64_t bytesMoved = 0;
  uint64_t links = 0;              // directed (sender, receiver) pairs that carried data
  uint64_t maxBytesOnOneLink = 0;  // busiest directed (sender, receiver) pair
  int busiestSender = -1;
  int busiestReceiver = -1;
  // With PlanParams::hosts (simulateCollective): bytes sent between hosts, and the most
  // that leave one host (its link's egress).
  uint64_t bytesBetweenHosts = 0;
  uint64_t maxBytesOutOfOneHost = 0;
  int busiestHost = -1;
};

// `schedules[r]` must be the schedule of rank r. `ranks` holds each rank's buffers.
// `inPlace`: one buffer holds input and output as NCCL lays them out: all-gather's
// input is block `rank` of `output`, reduce-scatter's output is block `rank` of
// `input` (and `output` is unused), every other collective uses `output` for both.
Status simulateSchedules(const std::vector<Schedule>& schedules, std::vector<SimulatedRank>* ranks,
                         bool inPlace, SimulationStats* stats,
                         TeamSimulation team = TeamSimulation::kRun);

// Generates every rank's steps lazily with the real generator (streamSchedule) and
// runs them. With `ranks` null no data moves: only message sizes, order and deadlock
// freedom are checked and the statistics gathered (for sizes too large to hold). A plan
// with a team step is built whole for every rank (simulateSchedules()).
Status simulateCollective(const CollectiveArgs& args, const PlanParams& params,
                          std::vector<SimulatedRank>* ranks, bool inPlace, SimulationStats* stats,
                          TeamSimulation team = TeamSimulation::kRun);

}  // namespace collie
