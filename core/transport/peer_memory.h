// Single copy through the peers' memory: the access a transport offers, beside its team
// board (core/transport/team_board.h), when every rank of a communicator is a process (or
// a thread) on one host. core/team's direct and cma collectives read and write the
// buffers their peers published in board notes through it; the board orders the
// accesses, this interface only makes them. No collective is named here.
//
// - resolveWindow() maps a peer's registered buffer (collie/shared_memory.h) into this
//   process: direct loads and stores after that.
// - pull()/push() read and write a peer's memory at an address it published, through the
//   kernel (cross-memory attach); probe() says whether the kernel allows that at all.
// - adviseHugePages() asks for huge pages behind a buffer that cross-memory attach will
//   pin, so that each call pins fewer pages.
//
// Every failure names the peer: kRemoteError when it is gone or the address is not mapped
// in its process.
//
// Thread safety: used by one thread at a time (the engine's running claim), like the
// board it belongs to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collie/status.h"
#include "core/memory/shared_region.h"

namespace collie {

class PeerMemory {
 public:
  virtual ~PeerMemory() = default;

  // The address in this process of `bytes` bytes of `window`, which rank `peer`
  // published. kRemoteError naming the peer when it cannot be mapped.
  virtual Result<uint8_t*> resolveWindow(int peer, const SharedWindow& window, size_t bytes) = 0;

  // Reads (pull) or writes (push) `bytes` bytes at `remote` in rank `peer`'s process.
  virtual Status pull(int peer, uint64_t remote, void* local, size_t bytes) = 0;
  virtual Status push(int peer, uint64_t remote, const void* local, size_t bytes) = 0;
  // Whether the kernel lets this rank read (and, with `write`, write back) up to 64
  // bytes at `remote` in rank `peer`'s process: false, with *why, when it refuses
  // (permissions, seccomp, no such call); an error for a gone peer or a bad address.
  // The caller makes sure nobody writes there before every rank probed.
  virtual Result<bool> probe(int peer, uint64_t remote, size_t bytes, bool write,
                             std::string* why) = 0;

  // Asks for huge pages behind [p, p + bytes) of this process (a hint, within a
  // budget); true when they are.
  virtual bool adviseHugePages(const void* p, size_t bytes) = 0;
};

}  // namespace collie
