// Cross-memory attach (process_vm_readv/writev) between the ranks of one host: the team
// board's pull(), push() and probe() (core/transport/team_board.h). core/team's cma
// collectives (core/team/cross_memory.h) run on them.
//
// Ranks that are threads of one process go through the same system call on their own
// pid, so a bad address published by a peer fails with EFAULT instead of a crash.
// Failures name the peer: a gone process (ESRCH) is a RemoteError; a denied call
// (EPERM, EACCES, ENOSYS: seccomp, Yama, other uid) is what probeAccess() reports, so
// that the caller can fall back on every rank alike.
//
// Thread safety: reentrant (the buffers aside).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "collie/status.h"

namespace collie::shm {

// Reads `bytes` bytes at `remote` in process `pid` (rank `peer`) into `local`.
Status pullFromPeer(int peer, int32_t pid, uint64_t remote, void* local, size_t bytes);

// Writes `bytes` bytes from `local` to `remote` in process `pid` (rank `peer`).
Status pushToPeer(int peer, int32_t pid, uint64_t remote, const void* local, size_t bytes);

// Reads up to 64 bytes at `remote` in process `pid` (rank `peer`) and, with `write`,
// writes them back: false, with *why, when the kernel refuses (EPERM, EACCES, ENOSYS);
// an error naming the peer when it is gone or the address is not mapped.
Result<bool> probeAccess(int peer, int32_t pid, uint64_t remote, size_t bytes, bool write,
                         std::string* why);

}  // namespace collie::shm
