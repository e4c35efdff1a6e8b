// The table of built-in algorithms. The schedule algorithms' order is the order the
// tuner weighs a collective's candidates in after the robust default (core/tune/tuner.h),
// which breaks ties between equal predictions; the team algorithms follow (the order a
// team step tries them in is kTeamOrder, core/plan/team_step.h).
#include "core/plan/builtin_algorithms.h"

namespace collie {

void registerBuiltinAlgorithms(AlgorithmRegistry& registry) {
  for (auto make : {makeRingSpec, makeTreeSpec, makeChainSpec, makeOneShotSpec, makeHierSpec,
                    makePairwiseSpec, makeLinearSpec, makeBoardSpec, makeDirectSpec, makeCmaSpec}) {
    (void)registry.add(make());
  }
}

}  // namespace collie
