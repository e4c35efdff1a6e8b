// The memory layout of one rank's shared-memory segment, and the doorbell (futex)
// through which ranks wake each other.
//
// Every rank owns one segment. It holds a header (identity, pid, doorbell), a table
// mapping sender ranks to FIFO slots, and one receive FIFO per (sender peer, channel):
// the receiver owns the memory of the FIFOs it reads, senders map the receiver's
// segment and write into their FIFO there. A peer's segment is untrusted input: every
// offset, size and counter read from it is validated before use.
//
// Thread safety: the atomics in these structs are shared between processes; plain
// fields are written once by the owner before the segment is published and are
// read-only afterwards.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace collie::shm {

inline constexpr uint64_t kSegmentMagic = 0x31454d48534c4c43ull;  // "CLLSHME1"
inline constexpr uint32_t kLayoutVersion = 1;
inline constexpr size_t kCacheLine = 64;
inline constexpr size_t kPage = 4096;
inline constexpr size_t kNonceBytes = 16;
// Every message starts with this header in the FIFO's byte stream.
struct MessageHeader {
  uint64_t tag;
  uint64_t length;
};
inline constexpr size_t kHeaderBytes = sizeof(MessageHeader);

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

struct SegmentHeader {
  // Written by the owner before publication.
  uint64_t magic;
  uint32_t version;
  int32_t rank;
  int32_t nranks;
  int32_t nchannels;
  int32_t nslots;  // FIFO slots (one per peer)
  int32_t pid;
  uint64_t pidNamespace;  // inode of /proc/self/ns/pid; pids compare only within one
  uint64_t fifoBytes;     // power of two
  uint64_t fifoStride;    // bytes from one FIFO's control block to the next
  uint64_t fifoBase;      // offset of the first FIFO's control block
  uint64_t slotTable;     // offset of int32_t[nranks]: sender rank -> slot or -1
  uint64_t totalBytes;
  uint8_t nonce[kNonceBytes];

  // The doorbell: peers bump `doorbell` and FUTEX_WAKE it when they add data to one of
  // this rank's FIFOs or free space in a FIFO this rank sends into, but only when
  // `sleepers` says someone may be waiting.
  alignas(kCacheLine) std::atomic<uint32_t> doorbell;
  std::atomic<uint32_t> sleepers;
  // Set by the owner when it tears down its transport.
  alignas(kCacheLine) std::atomic<uint32_t> closed;
};

// The control block of one FIFO. head = bytes written by the sender so far, tail =
// bytes consumed by the receiver; both only grow. head - tail <= fifoBytes.
struct FifoControl {
  alignas(kCacheLine) std::atomic<uint64_t> head;
  alignas(kCacheLine) std::atomic<uint64_t> tail;
  // Set by the sender once it mapped this FIFO (connect's barrier).
  alignas(kCacheLine) std::atomic<uint32_t> attached;
};
static_assert(sizeof(FifoControl) <= kPage);

// Bumps the doorbell of the segment `header` and wakes its sleepers, if any. The
// caller has just published data or space with a release store; the fence orders that
// store before the read of `sleepers` (the sleeper orders the other way round).
void ringDoorbell(SegmentHeader* header);

// Waits on `header`'s doorbell while it still equals `seen`, for at most
// `timeoutMicros`. Returns early on a wake, a signal, or when the value differs.
void waitDoorbell(SegmentHeader* header, uint32_t seen, int64_t timeoutMicros);

}  // namespace collie::shm
