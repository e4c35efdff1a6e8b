#include "core/engine/single_copy_choice.h"

#include <algorithm>
#include <bit>
#include <cstdio>

namespace collie {

SingleCopyChoice::SingleCopyChoice(size_t maxBytes, size_t boardBytes)
    : maxBytes_(maxBytes), boardBytes_(boardBytes) {}

int SingleCopyChoice::slotOf(size_t bytes, bool inPlace) {
  const int log2 = std::min(63, static_cast<int>(std::bit_width(bytes > 0 ? bytes - 1 : 0)));
  return 2 * log2 + (inPlace ? 1 : 0);
}

double SingleCopyChoice::lowerQuartile(const Side& side) {
  std::array<double, kWindow> sorted = side.micros;
  std::sort(sorted.begin(), sorted.end());
  return sorted[kWindow / 4];
}

SingleCopyChoice::Trial SingleCopyChoice::begin(CollectiveKind kind, size_t bytes, bool inPlace,
                                                TeamAlgorithms algorithms, bool fallback) {
  Trial trial{algorithms, -1};
  if (!teamHas(algorithms, Algorithm::kCma) ||
      !cmaIsMeasured(kind, bytes, algorithms, fallback, boardBytes_, maxBytes_)) {
    return trial;
  }
  trial.slot = slotOf(bytes, inPlace);
  Class& c = classes_[trial.slot];
  ++c.calls;
  bool allow;
  if (!c.decided) {
    // A block of calls withholding cma, then a block allowing it (so that where cma is
    // kept, the tuner's choice, its calls go on from a warm block); the same call
    // numbers on every rank.
    allow = (c.calls - 1) / kBlock % 2 == 1;
    if (c.calls > kMaxExploreCalls && c.cma.runs == 0) {
      allow = true;  // cma never ran here: nothing to compare, the tuner's set stands
      trial.slot = -1;
    }
  } else {
    allow = c.preferCma != (c.calls % kRecheckEvery < kRecheckCalls);
  }
  if (!allow) trial.algorithms &= ~teamBit(Algorithm::kCma);
  return trial;
}

bool SingleCopyChoice::end(const Trial& trial, Algorithm ran, double micros) {
  if (trial.slot < 0) return false;
  if (ran != Algorithm::kCma && ran != Algorithm::kAuto) return false;  // direct: not this choice
  Class& c = classes_[trial.slot];
  const int sideIndex = ran == Algorithm::kCma ? 0 : 1;
  Side& side = sideIndex == 0 ? c.cma : c.steps;
  // A call right after the other side's is not timed: it pays for the other's footprint
  // in the caches (and, on a side's first run, the first touch of its pages or FIFOs).
  const bool warm = c.lastSide == sideIndex;
  c.lastSide = sideIndex;
  ++side.runs;
  if (!warm) return false;
  side.micros[side.timed++ % kWindow] = micros;
  if (c.cma.timed < kWindow || c.steps.timed < kWindow) return false;
  // The chosen side's calls keep its window current; the choice is judged again only
  // when a recheck timed the other side, and on that one call: the rest of the other
  // side's window is from before, and a burst of load that slows the chosen side alone
  // must not hand the class to a figure taken before it. (One call is enough evidence
  // that a side can be that fast: load only adds time.)
  if (c.decided && (sideIndex == 0) == c.preferCma) return false;
  double cmaFigure = lowerQuartile(c.cma);
  double stepsFigure = lowerQuartile(c.steps);
  if (c.decided) (sideIndex == 0 ? cmaFigure : stepsFigure) = micros;
  c.cmaFigure = cmaFigure;
  c.stepsFigure = stepsFigure;
  c.rechecked = c.decided;
  // The tuner chose cma: the schedule takes over only where it is kMargin faster.
  const bool preferCma = !(stepsFigure < (1 - kMargin) * cmaFigure);
  const bool changed = !c.decided || preferCma != c.preferCma;
  c.decided = true;
  c.preferCma = preferCma;
  return changed;
}

std::string SingleCopyChoice::describe(const Trial& trial) const {
  if (trial.slot < 0) return "";
  const Class& c = classes_[trial.slot];
  char text[160];
  std::snprintf(text, sizeof text,
                "size class <= %zu bytes %s: cma %.1f us, schedule %.1f us (%s) -> %s",
                size_t{1} << (trial.slot / 2), trial.slot % 2 ? "in place" : "out of place",
                c.cmaFigure, c.stepsFigure, c.rechecked ? "a recheck" : "lower quartiles",
                c.preferCma ? "cma" : "schedule");
  return text;
}

bool SingleCopyChoice::prefersCma(size_t bytes, bool inPlace) const {
  const Class& c = classes_[slotOf(bytes, inPlace)];
  return !c.decided || c.preferCma;
}

bool SingleCopyChoice::decided(size_t bytes, bool inPlace) const {
  return classes_[slotOf(bytes, inPlace)].decided;
}

}  // namespace collie
