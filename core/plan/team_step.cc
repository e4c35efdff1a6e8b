#include "core/plan/team_step.h"

#include <algorithm>

namespace collie {

Algorithm firstTeamAlgorithm(TeamAlgorithms set) {
  for (Algorithm algo : kTeamOrder) {
    if (teamHas(set, algo)) return algo;
  }
  return Algorithm::kAuto;
}

std::string teamAlgorithmsText(TeamAlgorithms set) {
  std::string text;
  for (Algorithm algo : kTeamOrder) {
    if (teamHas(set, algo)) text += (text.empty() ? "" : ">") + std::string(algorithmName(algo));
  }
  return text.empty() ? "check" : text;
}

bool teamSupports(Algorithm algo, CollectiveKind kind) {
  switch (algo) {
    case Algorithm::kBoard:
      return kind != CollectiveKind::kSend && kind != CollectiveKind::kRecv &&
             kind != CollectiveKind::kAllToAllV && !hasBlockCounts(kind);
    case Algorithm::kDirect:
      return kind == CollectiveKind::kAllReduce;
    case Algorithm::kCma:
      return kind == CollectiveKind::kAllReduce || isEqualExchange(kind);
    default:
      return false;
  }
}

bool cmaIsMeasured(CollectiveKind kind, size_t bytes, TeamAlgorithms algorithms,
                   bool scheduleBehind, size_t boardBytes, size_t measuredMaxBytes) {
  return kind == CollectiveKind::kAllReduce && scheduleBehind &&
         !teamHas(algorithms, Algorithm::kBoard) && bytes > boardBytes && bytes <= measuredMaxBytes;
}

size_t boardBytesOf(CollectiveKind kind, size_t bytes, int nranks) {
  switch (kind) {
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kScatter:  // the root publishes every block
      return bytes * static_cast<size_t>(nranks);
    case CollectiveKind::kBarrier:
      return 0;
    default:
      return bytes;
  }
}

namespace {

// Bytes one rank touches on the board: its part copied in, every rank's part read, its
// output written (S = bytes of the collective's count).
double boardTraffic(CollectiveKind kind, double s, double n) {
  switch (kind) {
    case CollectiveKind::kReduceScatter:
      return n * s + n * s + s;  // copy in the whole input, read a block of each, write one
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather:  // the root's: every block read and written
      return s + n * s + n * s;
    case CollectiveKind::kAllToAll:  // copy in n blocks, read one of each rank, write n
      return 3 * n * s;
    case CollectiveKind::kScatter:  // the root copies in n blocks, every rank copies one out
      return n * s + 2 * s;
    case CollectiveKind::kBroadcast:
      return s + s;  // the root copies in, every rank copies out
    case CollectiveKind::kBarrier:
      return 0;
    default:
      return (n + 2) * s;
  }
}

double boardMicros(CollectiveKind kind, double s, double n, const TeamOffer& offer) {
  const TeamCosts& c = offer.costs;
  if (kind == CollectiveKind::kAllReduce && s >= static_cast<double>(offer.boardTwoShotBytes)) {
    return 2 * c.boardAlphaUs * (n - 1) + (4 * n - 1) / n * s / c.boardBytesPerUs;
  }
  return c.boardAlphaUs * (n - 1) + boardTraffic(kind, s, n) / c.boardBytesPerUs;
}

// Microseconds per byte of a single-copy all-reduce.
double perByte(Algorithm algo, double n, const TeamCosts& c) {
  return algo == Algorithm::kDirect ? 2 / c.directBytesPerUs : 2 * (n - 1) / n / c.cmaBytesPerUs;
}

// The fixed cost of a single-copy all-reduce: it costs what the board costs at its
// crossover (positive: the board's per-byte cost is the highest of the three).
double singleCopyMicros(Algorithm algo, double n, const TeamOffer& offer) {
  const size_t at =
      algo == Algorithm::kDirect ? offer.directCrossoverBytes : offer.cmaCrossoverBytes;
  const double crossover = static_cast<double>(std::max<size_t>(1, std::min(at, offer.boardBytes)));
  return boardMicros(CollectiveKind::kAllReduce, crossover, n, offer) -
         perByte(algo, n, offer.costs) * crossover;
}

}  // namespace

double predictTeamMicros(Algorithm algo, CollectiveKind kind, size_t bytes, int nranks,
                         const TeamOffer& offer) {
  const double s = static_cast<double>(bytes);
  const double n = std::max(nranks, 2);
  const TeamCosts& c = offer.costs;
  switch (algo) {
    case Algorithm::kBoard:
      return boardMicros(kind, s, n, offer);
    case Algorithm::kDirect:
    case Algorithm::kCma:
      if (isEqualExchange(kind)) {
        // One pull per block a rank receives (the root's n - 1 for a gather, one for a
        // scatter's leaves), straight from the sender's buffer into the output.
        const double pulled = kind == CollectiveKind::kScatter ? s : (n - 1) * s;
        return singleCopyMicros(algo, n, offer) + pulled / c.cmaBytesPerUs;
      }
      return singleCopyMicros(algo, n, offer) + perByte(algo, n, c) * s;
    default:
      return 0;
  }
}

void planTeamStep(const PlanParams& params, Schedule* schedule) {
  Step step;
  step.kind = StepKind::kTeam;
  step.team = params.team;
  schedule->channels[0].push_back(step);
}

}  // namespace collie
