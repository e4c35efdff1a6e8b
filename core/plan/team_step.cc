#include "core/plan/team_step.h"

#include <algorithm>

#include "core/plan/algorithm_spec.h"

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
  const AlgorithmSpec* spec = AlgorithmRegistry::instance().find(algo);
  return spec != nullptr && spec->isTeam() && spec->implements(kind);
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

double predictTeamMicros(Algorithm algo, CollectiveKind kind, size_t bytes, int nranks,
                         const TeamOffer& offer) {
  const AlgorithmSpec* spec = AlgorithmRegistry::instance().find(algo);
  if (spec == nullptr || !spec->isTeam()) return 0;
  CostQuery query;
  query.kind = kind;
  query.bytes = bytes;
  query.nranks = nranks;
  query.team = &offer;
  return spec->predict(query, nullptr);
}

Status teamStepOnly(Algorithm algo) {
  return unsupported(std::string(algorithmName(algo)) +
                     " is a team collective: it runs in a team step, not in steps of messages");
}

void planTeamStep(const PlanParams& params, Schedule* schedule) {
  Step step;
  step.kind = StepKind::kTeam;
  step.team = params.team;
  schedule->channels[0].push_back(step);
}

}  // namespace collie
