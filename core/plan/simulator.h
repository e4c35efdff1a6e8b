// Runs the schedules of every rank of a collective in one process, moving real bytes
// through unbounded in-memory FIFOs (one per sender, receiver and channel). It
// checks that every receive matches the size of the message it gets and that no rank
// waits forever (deadlock), and leaves each rank's output buffer for the caller to
// verify. Used by the schedule tests and `collie sim`.
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

struct SimulationStats {
  uint64_t messages = 0;
  uint64_t bytesMoved = 0;
  uint64_t maxBytesOnOneLink = 0;  // busiest directed (sender, receiver) pair
};

// `schedules[r]` must be the schedule of rank r. `ranks` holds each rank's buffers.
// `inPlace`: one buffer holds input and output as NCCL lays them out: all-gather's
// input is block `rank` of `output`, reduce-scatter's output is block `rank` of
// `input` (and `output` is unused), every other collective uses `output` for both.
Status simulateSchedules(const std::vector<Schedule>& schedules, std::vector<SimulatedRank>* ranks,
                         bool inPlace, SimulationStats* stats);

}  // namespace collie
