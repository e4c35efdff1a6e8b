// The table of built-in schedule algorithms. Its order is the order the tuner weighs a
// collective's candidates in after the robust default (core/tune/tuner.h), which breaks
// ties between equal predictions.
#include "core/plan/builtin_algorithms.h"

namespace collie {

void registerBuiltinAlgorithms(AlgorithmRegistry& registry) {
  for (auto make : {makeRingSpec, makeTreeSpec, makeChainSpec, makeOneShotSpec, makeHierSpec,
                    makePairwiseSpec, makeLinearSpec}) {
    (void)registry.add(make());
  }
}

}  // namespace collie
