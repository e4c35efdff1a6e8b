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
  if (kind != CollectiveKind::kAllReduce || !fallback || bytes > maxBytes_ ||
      bytes <= boardBytes_ || !teamHas(algorithms, Algorithm::kCma) ||
      teamHas(algorithms, Algorithm::kBoard)) {
    return trial;
  }
  trial.slot = slotOf(bytes, inPlace);
  Class& c = classes_[trial.slot];
  ++c.calls;
  bool allow;
  if (!c.decided) {
    // Odd calls allow cma, even ones withhold it; the same call numbers on every rank.
    allow = c.calls % 2 == 1;
    if (c.calls > kMaxExploreCalls && c.cma.runs == 0) {
      allow = true;  // cma never ran here: nothing to compare, the tuner's set stands
      trial.slot = -1;
    }
  } else {
    allow = c.preferCma != (c.calls % kRecheckEvery == 0);
  }
  if (!allow) trial.algorithms &= ~teamBit(Algorithm::kCma);
  return trial;
}

bool SingleCopyChoice::end(const Trial& trial, Algorithm ran, double micros) {
  if (trial.slot < 0) return false;
  if (ran != Algorithm::kCma && ran != Algorithm::kAuto) return false;  // direct: not this choice
  Class& c = classes_[trial.slot];
  Side& side = ran == Algorithm::kCma ? c.cma : c.steps;
  // The first run of each side is not timed: it pays the first touch of the pages, or
  // the schedule's FIFOs, once.
  if (side.runs++ > 0) side.micros[(side.runs - 2) % kWindow] = micros;
  if (c.cma.runs <= kWindow || c.steps.runs <= kWindow) return false;
  // The tuner chose cma: the schedule takes over only where it is kMargin faster.
  const bool preferCma = !(lowerQuartile(c.steps) < (1 - kMargin) * lowerQuartile(c.cma));
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
                "size class <= %zu bytes %s: cma %.1f us, schedule %.1f us (lower quartiles "
                "of the newest %d) -> %s",
                size_t{1} << (trial.slot / 2), trial.slot % 2 ? "in place" : "out of place",
                lowerQuartile(c.cma), lowerQuartile(c.steps), kWindow,
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
