// Single-copy all-reduce over unregistered buffers through Cross-Memory Attach
// (process_vm_readv).
//
// Every rank of a one-host communicator publishes its pid and the addresses of its
// input and output (shm_board_single_copy.cc does, in its board slot). Rank r owns share r of the
// elements (shareRange(), as the registered direct path). For each tile of its share
// (kCrossMemoryTileBytes over all peers, so that it stays in cache) it pulls every peer's part of
// the input with process_vm_readv, reduces those and its own input in rank order straight into its
// own output (fused: no separate copy pass), and pushes that tile, still in cache, into every
// peer's output with process_vm_writev. So each input byte is read once and each output byte
// written once, and every element is reduced once, by one rank, in rank order: all outputs hold the
// same bits. In-place buffers are safe: share r of any rank's buffer is read and then written only
// by rank r, tile by tile.
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

// Tile budget: the pulled parts of all peers together stay within this many bytes (in
// cache next to the output tile being written): 256 KiB, and 1 MiB where this rank's
// share is 4 MiB or more. Paired on 2 ranks (docs/decisions/huge-pages-cma.md): 1 MiB
// tiles were 13-20% faster at 4-256 MiB (fewer system calls, each pinning few folios in
// huge pages); below, where one or two tiles cover a share, 256 KiB stays as it was.
constexpr size_t kCrossMemoryTileBytes = 256 * 1024;
constexpr size_t kCrossMemoryLargeTileBytes = 1024 * 1024;
constexpr size_t kCrossMemoryLargeShareBytes = 4 << 20;

class CrossMemoryAllReduce {
 public:
  enum class Probe { kAllowed, kDenied };

  // Reads a few bytes of every peer's output and writes them back (call it before
  // anyone writes an output). kDenied (with *why set) when the kernel
  // refuses the calls (EPERM, EACCES, ENOSYS); an error for a gone peer or a bad address.
  static Result<Probe> probe(const std::vector<CrossMemoryRank>& ranks, int rank, size_t bytes,
                             std::string* why);
  // The same for a caller that only reads (the exchanges): reads the first bytes of each
  // `sources` rank's input and writes nothing.
  static Result<Probe> probeReads(const std::vector<CrossMemoryRank>& ranks,
                                  const std::vector<int>& sources, size_t bytes, std::string* why);

  // Share `rank` of `count` elements: for each tile, pulls every peer's part of the
  // input, reduces them with `input`'s in rank order into `output` and pushes the result
  // into every peer's output. `output` may equal `input`.
  Status reduceShare(const std::vector<CrossMemoryRank>& ranks, int rank, const void* input,
                     void* output, size_t count, DataType dtype, ReduceOp op);

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
