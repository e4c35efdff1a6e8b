// SingleCopyChoice: whether a large all-reduce's team step may try cross-memory attach
// (cma) or goes straight to the schedule that follows it, chosen by timing both.
//
// The tuner prices cma with constants measured once on a test VM and the schedule
// (ring, tree) with constants probed at creation. Where the host's vCPU placement, page
// size or load differ from that VM's, the model can pick the slower of the two: on 2
// ranks in the fast placement the ring ran a 1 MiB all-reduce in 52-65 us where cma took
// 92-239 us (docs/decisions/measured-single-copy.md). So each all-reduce whose team
// step offers cma with a schedule behind it (above the board's slot: the board's range
// needs the same set on every rank) and that is at most `maxBytes` goes through
// begin()/end():
//   - per size class (the power of two at or above its bytes; in place or not) the
//     first calls run in two blocks of kBlock, cma withheld then allowed;
//   - only a call that follows a call of the same side is timed: the first call after a
//     switch pays for the other side's footprint in the caches (a ring's FIFOs evict the
//     buffers that cma's next call would find in L3) and, once, for first-touch page
//     faults and the huge-page collapse. With the sides alternating call by call, every
//     call was such a first one, and cma measured 1.5-2.2x its steady-state time at 4
//     MiB on 2 ranks (docs/decisions/measured-single-copy.md);
//   - then cma runs unless the schedule's lower quartile (the second fastest) of its
//     newest kWindow timed calls is kMargin below cma's, judged as the probe judges its
//     ping-pongs: load on a shared host only adds time, so up to 3 of 5 calls may be
//     descheduled without moving it;
//   - every kRecheckEvery calls of the class the other side runs kRecheckCalls calls in a
//     row (the first untimed), and the class changes where that one timed call beats the
//     chosen side's lower quartile by the same margin: a change of placement or load is
//     followed at the next recheck, and a burst that slows the chosen side alone is not
//     judged against the other side's figures from before it.
// A class where cma never runs although allowed (denied, or out of place past
// COLLIE_SHM_CMA_MAX) stops exploring after kMaxExploreCalls and leaves the set as the
// tuner made it.
//
// Agreement: a rank that withholds cma publishes no cma wish, and the team runs cma only
// when every rank wishes it (core/team/board_collectives.h: every rank reads the same notes),
// so ranks whose timings decide differently still run one algorithm alike. Call counts
// per class are equal on every rank (every rank runs the same collectives), so the
// blocks and rechecks run in step. Outcomes are recorded by what ran (TeamOutcome), not by the
// wish: a rank that allowed cma where a peer withheld it times the schedule.
//
// Thread safety: one thread at a time (the engine's running claim).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/plan/team_step.h"

namespace collie {

class SingleCopyChoice {
 public:
  static constexpr int kWindow = 5;  // timed calls each side is judged on
  // Calls per exploration block: one untimed, then kWindow timed.
  static constexpr uint64_t kBlock = kWindow + 1;
  static constexpr uint64_t kRecheckEvery = 128;  // calls of a class between rechecks
  static constexpr uint64_t kRecheckCalls = 2;    // the other side's calls per recheck
  static constexpr uint64_t kMaxExploreCalls = 32;
  // The schedule runs only where its figure is this much below cma's (the tuner's choice):
  // where the two are within it, the measurement does not overrule the model.
  static constexpr double kMargin = 0.1;

  // maxBytes: COLLIE_TUNE_ADAPT_MAX (0: never withholds cma); boardBytes: the team's
  // board slot (TeamOffer::boardBytes), at or below which nothing is chosen here.
  SingleCopyChoice(size_t maxBytes, size_t boardBytes);

  // One team step about to run: the set to give the team, and where to record its time.
  struct Trial {
    TeamAlgorithms algorithms = 0;
    int slot = -1;  // -1: not timed
  };
  // `fallback`: a schedule follows the team step.
  Trial begin(CollectiveKind kind, size_t bytes, bool inPlace, TeamAlgorithms algorithms,
              bool fallback);
  // The trial's outcome: the algorithm that ran it (kAuto: declined, the schedule ran) and
  // the microseconds from the team step's start to the collective's end on this rank.
  // True when it made or changed the class's choice.
  bool end(const Trial& trial, Algorithm ran, double micros);
  // The trial's class, its two figures and its choice, for the log.
  std::string describe(const Trial& trial) const;

  // For tests and logs: whether the class of (bytes, inPlace) now prefers cma, and
  // whether its exploration is over.
  bool prefersCma(size_t bytes, bool inPlace) const;
  bool decided(size_t bytes, bool inPlace) const;

 private:
  struct Side {
    std::array<double, kWindow> micros{};
    uint64_t runs = 0;   // calls run
    uint64_t timed = 0;  // of them timed (each right after a call of the same side)
  };
  struct Class {
    uint64_t calls = 0;
    Side cma, steps;
    int lastSide = -1;  // the side of the class's previous recorded call: 0 cma, 1 schedule
    bool preferCma = true;
    bool decided = false;
    // The figures of the last judgement, and whether it judged a recheck's call.
    double cmaFigure = 0;
    double stepsFigure = 0;
    bool rechecked = false;
  };
  static constexpr int kClasses = 2 * 64;
  static int slotOf(size_t bytes, bool inPlace);
  static double lowerQuartile(const Side& side);

  size_t maxBytes_;
  size_t boardBytes_;
  std::array<Class, kClasses> classes_{};
};

}  // namespace collie
