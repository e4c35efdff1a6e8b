// A c10 CPU allocator that serves large allocations from a caching pool of collie
// shared memory, so that tensors torch allocates itself (DDP's gradient buckets above
// all) are zero-copy all-reduce buffers for the collie backend.
//
// SharedPool keeps blocks of collie::allocShared memory. A request is rounded up to
// its size class (pages up to 1 MiB, then 4 classes per power of two: at most 25%
// slack) and served from that class's free list, or from a fresh block (zero-filled
// and populated once by allocShared); a freed block goes back to its free list while
// the idle bytes stay within the pool's cap, and to the system otherwise. Every block
// has an id that is never reused, so a backend can register a block with its
// communicator once and remember it by id (freeShared drops the registrations of a
// block it unmaps).
//
// installSharedAllocator() makes torch's CPU allocator (c10::SetCPUAllocator) one that
// sends requests of at least `minBytes` to the pool and everything smaller to the
// allocator it replaced; frees go back to whichever allocator made the memory (the
// DataPtr carries its deleter). When the pool cannot make a block, the request falls
// back to the replaced allocator (the tensor is then ordinary, and the all-reduces
// that use it take the copy path on every rank alike). In a child made by fork()
// (DataLoader workers) the pool serves nothing: its MAP_SHARED blocks are the
// parent's memory too. uninstallSharedAllocator() puts the replaced allocator back; pool memory
// still in use stays valid and returns to the pool when freed (the pool is never destroyed).
//
// Thread safety: every function may be called from any thread. Swapping torch's
// allocator is not synchronised with threads allocating at that moment (torch's own
// rule): install before the training threads start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace torch_collie {

struct SharedBlock {
  void* base = nullptr;
  size_t bytes = 0;  // the size class: what was mapped
  uint64_t id = 0;   // unique for the process's lifetime, never 0
};

struct SharedPoolStats {
  uint64_t blocksInUse = 0;
  uint64_t bytesInUse = 0;
  uint64_t blocksCached = 0;
  uint64_t bytesCached = 0;
  uint64_t hits = 0;       // requests served from a free list
  uint64_t misses = 0;     // requests that made a new block
  uint64_t fallbacks = 0;  // requests the pool could not serve (replaced allocator)
  uint64_t released = 0;   // blocks given back to the system (cap exceeded)
};

class SharedPool {
 public:
  static SharedPool& instance();  // never destroyed

  // The block holding [ptr, ptr + bytes), in use or cached; nullopt otherwise.
  std::optional<SharedBlock> find(const void* ptr, size_t bytes) const;
  SharedPoolStats stats() const;

  // A block of at least `bytes` (its size class); nullopt when collie cannot make one.
  std::optional<SharedBlock> acquire(size_t bytes);
  // Returns a block made by acquire(); false (and nothing done) for other pointers.
  bool release(void* base);
  // Idle bytes kept for reuse at most; lowering it frees idle blocks at once.
  void setMaxCachedBytes(size_t bytes);
  // Gives every idle block back to the system.
  void trim();

  static size_t sizeClass(size_t bytes);

 private:
  SharedPool() = default;
  struct Impl;
  Impl& impl() const;
};

// Installs the allocator; throws c10::Error when it is already installed or torch
// would not take it. `minBytes` >= 1, `maxCachedBytes` bounds the pool's idle memory.
void installSharedAllocator(size_t minBytes, size_t maxCachedBytes);
// Restores the replaced allocator; a no-op when not installed.
void uninstallSharedAllocator();
bool sharedAllocatorInstalled();

}  // namespace torch_collie
