// The exchanges (all-to-all, gather, scatter) through Cross-Memory Attach: each rank
// pulls the blocks it receives straight from the senders' inputs into its output with
// process_vm_readv, one copy per block and no staging (as Open MPI's vader/sm does with
// CMA). The board's single-copy path (shm_board_single_copy.cc) publishes every rank's
// pid and buffer addresses, probes once, runs pullBlocks() and then waits until every
// rank pulled before anyone returns (a sender's input must stay valid until then).
//
// Failures name the peer, as shm_cma.h's: a gone process is a RemoteError, a denied call
// is reported by CrossMemoryAllReduce::probeReads() so that every rank can fall back alike.
//
// Thread safety: pure functions of their arguments (the buffers excepted).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "collie/status.h"
#include "collie/types.h"
#include "transports/shm/shm_cma.h"

namespace collie::shm {

// The ranks whose input rank `rank` reads in exchange `kind` on `nranks` ranks: every
// other rank for an all-to-all and a gather's root, the root for a scatter's leaves,
// none otherwise.
std::vector<int> exchangeSources(CollectiveKind kind, int root, int rank, int nranks);

// This rank's part of exchange `kind` of blocks of `bytes` bytes: an all-to-all pulls
// block `rank` of every peer's input into block p of `output` (p the peer) and copies its
// own; a gather's root pulls every peer's input into its block; a scatter's leaf pulls
// its block of the root's input, the root copies its own. `ranks` as published.
Status pullBlocks(const std::vector<CrossMemoryRank>& ranks, int rank, CollectiveKind kind,
                  int root, const void* input, void* output, size_t bytes);

// How many exchanges pullBlocks() ran in this process (tests: shows the path ran).
uint64_t crossMemoryExchangeCount();

}  // namespace collie::shm
