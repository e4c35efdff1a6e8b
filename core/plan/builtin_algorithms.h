// The built-in algorithms' specs (core/plan/algorithm_spec.h), one file each.
//
// Thread safety: the factories are pure.
#pragma once

#include <memory>

#include "core/plan/algorithm_spec.h"

namespace collie {

std::unique_ptr<const AlgorithmSpec> makeRingSpec();      // ring_spec.cc
std::unique_ptr<const AlgorithmSpec> makeTreeSpec();      // tree_spec.cc
std::unique_ptr<const AlgorithmSpec> makeChainSpec();     // chain_spec.cc
std::unique_ptr<const AlgorithmSpec> makeOneShotSpec();   // oneshot_spec.cc
std::unique_ptr<const AlgorithmSpec> makeHierSpec();      // hier_spec.cc
std::unique_ptr<const AlgorithmSpec> makePairwiseSpec();  // pairwise_spec.cc
std::unique_ptr<const AlgorithmSpec> makeLinearSpec();    // linear_spec.cc
std::unique_ptr<const AlgorithmSpec> makeBoardSpec();     // board_spec.cc (team)
std::unique_ptr<const AlgorithmSpec> makeDirectSpec();    // direct_spec.cc (team)
std::unique_ptr<const AlgorithmSpec> makeCmaSpec();       // cma_spec.cc (team)

}  // namespace collie
