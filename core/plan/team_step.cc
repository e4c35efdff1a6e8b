#include "core/plan/team_step.h"

#include <algorithm>

namespace collie {

std::string teamAlgorithmsText(TeamAlgorithms set) {
  std::string text;
  for (Algorithm algo : kTeamOrder) {
    if (teamHas(set, algo)) text += (text.empty() ? "" : ">") + std::string(algorithmName(algo));
  }
  return text.empty() ? "check" : text;
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

}  // namespace

double boardMicros(CollectiveKind kind, double s, double n, const TeamOffer& offer) {
  const TeamCosts& c = offer.costs;
  if (kind == CollectiveKind::kAllReduce && s >= static_cast<double>(offer.boardTwoShotBytes)) {
    return 2 * c.boardAlphaUs * (n - 1) + (4 * n - 1) / n * s / c.boardBytesPerUs;
  }
  return c.boardAlphaUs * (n - 1) + boardTraffic(kind, s, n) / c.boardBytesPerUs;
}

double singleCopyFixedMicros(size_t crossoverBytes, double perByteUs, double n,
                             const TeamOffer& offer) {
  const double crossover =
      static_cast<double>(std::max<size_t>(1, std::min(crossoverBytes, offer.boardBytes)));
  return boardMicros(CollectiveKind::kAllReduce, crossover, n, offer) - perByteUs * crossover;
}

Status teamStepOnly(Algorithm algo) {
  return unsupported(std::string(algorithmName(algo)) +
                     " is a team collective: it runs in a team step, not in steps of messages");
}

}  // namespace collie
