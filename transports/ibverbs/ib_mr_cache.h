// A memory-registration cache for the ibverbs transport.
//
// Registering memory with the HCA is slow (pins pages, updates tables), and the
// engine sends from and receives into the same buffers again and again, so
// registrations are kept: acquire() returns a registration covering [addr, addr+len)
// (page-aligned, reused when an existing one covers the range), and release() drops
// the caller's reference. At most `capacity` idle registrations are kept; the least
// recently used idle one is deregistered first. Registrations still referenced by an
// operation in flight are never evicted.
//
// Limitation (shared with NCCL without memory hooks): memory freed and reallocated at
// the same address reuses the old registration, which still pins the old pages; users
// that free buffers between collectives should keep COLLIE_IB_MR_CACHE small.
//
// Thread safety: one thread at a time.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <map>

#include "collie/status.h"

namespace collie::ib {

class MrCache {
 public:
  MrCache(ibv_pd* pd, size_t capacity) : pd_(pd), capacity_(capacity) {}
  ~MrCache();
  MrCache(const MrCache&) = delete;
  MrCache& operator=(const MrCache&) = delete;

  Result<ibv_mr*> acquire(const void* addr, size_t length);
  void release(ibv_mr* mr);

 private:
  struct Entry {
    uintptr_t end = 0;
    ibv_mr* mr = nullptr;
    int refs = 0;
    uint64_t lastUse = 0;
  };
  void evictIdle();

  ibv_pd* pd_;
  size_t capacity_;
  uint64_t clock_ = 0;
  std::map<uintptr_t, Entry> entries_;  // by page-aligned start
};

}  // namespace collie::ib
