// Single-copy all-reduce over unregistered buffers through Cross-Memory Attach
// (process_vm_readv).
//
// Every rank of a one-host communicator publishes its pid and the addresses of its
// input and output (shm_oneshot.cc does, in its board slot). Rank r owns share r of the
// elements (shareRange(), as the registered direct path). Phase 1, reduceShare(): for
// each tile of its share it pulls every peer's part of the input into a cache-resident
// buffer with process_vm_readv and reduces those, together with its own input, in rank
// order straight into its own output (fused: no separate copy pass). Phase 2, after
// every rank finished phase 1, gatherShares(): it pulls every other share of the result
// from its owner's output into its own output (one copy). So every element is reduced
// once, by one rank, in rank order: all outputs hold the same bits, and in-place buffers
// are safe (phase 1 writes share r of rank r's buffer only, which only rank r reads).
//
// Ranks that are threads of one process go through the same system call on their own
// pid, so a bad address published by a peer fails with EFAULT instead of a crash.
// Failures name the peer: a gone process (ESRCH) is a RemoteError; a denied call
// (EPERM, ENOSYS: seccomp, Yama, other uid) is reported by probe() so that the caller
// can fall back to the FIFO ring on every rank alike.
//
// Thread safety: a CrossMemoryAllReduce is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "collie/status.h"
#include "collie/types.h"

namespace collie::shm {

// What one rank published for a cross-memory collective.
struct CrossMemoryRank {
  int32_t pid = 0;
  uint64_t input = 0;   // address of its input in its process
  uint64_t output = 0;  // address of its output in its process
};

// Tile of phase 1: the pulled parts of all peers together stay within this many bytes
// (in L2 next to the output tile being written).
constexpr size_t kCrossMemoryTileBytes = 256 * 1024;

class CrossMemoryAllReduce {
 public:
  enum class Probe { kAllowed, kDenied };

  // Reads a few bytes of every peer's input. kDenied (with *why set) when the kernel
  // refuses the calls (EPERM, EACCES, ENOSYS); an error for a gone peer or a bad address.
  static Result<Probe> probe(const std::vector<CrossMemoryRank>& ranks, int rank, size_t bytes,
                             std::string* why);

  // Phase 1: share `rank` of `count` elements, every rank's input in rank order, into
  // `output` (this rank's, at the share's offset).
  Status reduceShare(const std::vector<CrossMemoryRank>& ranks, int rank, const void* input,
                     void* output, size_t count, DataType dtype, ReduceOp op, bool push);

  // Phase 2: every other share from its owner's output into `output`.
  static Status gatherShares(const std::vector<CrossMemoryRank>& ranks, int rank, void* output,
                             size_t count, DataType dtype);

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> buffer_;  // pulled tiles + scratch, 64-byte aligned
  size_t bufferBytes_ = 0;
};

// Reads `bytes` bytes at `remote` in process `pid` (rank `peer`) into `local`.
Status pullFromPeer(int peer, int32_t pid, uint64_t remote, void* local, size_t bytes);

// Writes `bytes` bytes from `local` to `remote` in process `pid` (rank `peer`).
Status pushToPeer(int peer, int32_t pid, uint64_t remote, const void* local, size_t bytes);

// How many shares reduceShare() reduced in this process (tests: shows the path ran).
uint64_t crossMemoryShareCount();

}  // namespace collie::shm
