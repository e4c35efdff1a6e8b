#include "transports/ibverbs/ib_mr_cache.h"

#include <cerrno>
#include <string>

namespace collie::ib {

namespace {
constexpr uintptr_t kPage = 4096;
}

MrCache::~MrCache() {
  for (auto& [start, e] : entries_) ibv_dereg_mr(e.mr);
}

Result<ibv_mr*> MrCache::acquire(const void* addr, size_t length) {
  uintptr_t begin = reinterpret_cast<uintptr_t>(addr);
  uintptr_t end = begin + length;
  auto it = entries_.upper_bound(begin);
  if (it != entries_.begin()) {
    --it;
    if (it->first <= begin && end <= it->second.end) {
      ++it->second.refs;
      it->second.lastUse = ++clock_;
      return it->second.mr;
    }
  }
  uintptr_t start = begin & ~(kPage - 1);
  uintptr_t stop = (end + kPage - 1) & ~(kPage - 1);
  ibv_mr* mr = ibv_reg_mr(pd_, reinterpret_cast<void*>(start), stop - start,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (mr == nullptr) {
    return systemError("ibverbs: registering " + std::to_string(stop - start) +
                           " bytes of memory (raise the memlock limit: ulimit -l)",
                       errno);
  }
  // A new registration may cover older, smaller ones at the same start: replace an
  // idle one, else keep the old (still referenced) and track the new one elsewhere.
  auto existing = entries_.find(start);
  if (existing != entries_.end()) {
    if (existing->second.refs == 0) {
      ibv_dereg_mr(existing->second.mr);
      existing->second = Entry{stop, mr, 1, ++clock_};
      return mr;
    }
    // Rare: leave the cache alone; the caller's release() deregisters it.
    return mr;
  }
  entries_[start] = Entry{stop, mr, 1, ++clock_};
  evictIdle();
  return mr;
}

void MrCache::release(ibv_mr* mr) {
  if (mr == nullptr) return;
  auto it = entries_.find(reinterpret_cast<uintptr_t>(mr->addr));
  if (it != entries_.end() && it->second.mr == mr) {
    --it->second.refs;
    evictIdle();
    return;
  }
  ibv_dereg_mr(mr);  // an uncached registration (see acquire)
}

void MrCache::evictIdle() {
  while (entries_.size() > capacity_) {
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.refs == 0 &&
          (victim == entries_.end() || it->second.lastUse < victim->second.lastUse)) {
        victim = it;
      }
    }
    if (victim == entries_.end()) return;
    ibv_dereg_mr(victim->second.mr);
    entries_.erase(victim);
  }
}

}  // namespace collie::ib
