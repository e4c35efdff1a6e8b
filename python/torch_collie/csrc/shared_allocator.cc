#include "shared_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <pthread.h>

#include <atomic>
#include <bit>
#include <iostream>
#include <map>
#include <mutex>
#include <vector>

#include "collie/shared_memory.h"

namespace torch_collie {

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kSmallClassLimit = size_t{1} << 20;
// Priority given to c10::SetCPUAllocator, for installing and for restoring: torch
// registers its default CPU allocator at 0, and takes only equal or higher ones.
constexpr uint8_t kPriority = 0;

struct BlockState {
  size_t bytes;
  uint64_t id;
  bool inUse;
};

}  // namespace

struct SharedPool::Impl {
  mutable std::mutex mutex;
  std::map<uintptr_t, BlockState> blocks;          // by base address
  std::map<size_t, std::vector<void*>> freeLists;  // by size class
  size_t maxCached = size_t{1} << 30;
  uint64_t nextId = 1;
  SharedPoolStats stats;

  // Unmaps idle blocks (largest first) until the idle bytes are within `limit`.
  // Requires mutex.
  void shrinkTo(size_t limit) {
    for (auto it = freeLists.rbegin(); it != freeLists.rend() && stats.bytesCached > limit;) {
      std::vector<void*>& list = it->second;
      while (!list.empty() && stats.bytesCached > limit) {
        void* base = list.back();
        list.pop_back();
        blocks.erase(reinterpret_cast<uintptr_t>(base));
        stats.bytesCached -= it->first;
        --stats.blocksCached;
        ++stats.released;
        collie::Status freed = collie::freeShared(base);
        if (!freed.isOk()) std::cerr << "torch_collie: " << freed.toString() << "\n";
      }
      ++it;
    }
  }
};

namespace {
// Set in a child made by fork(): pool blocks are MAP_SHARED, so a block the child
// reused would be written by parent and child alike. The child serves nothing from
// the pool and leaves the inherited blocks alone.
std::atomic<bool> gForked{false};
}  // namespace

SharedPool& SharedPool::instance() {
  static SharedPool* pool = [] {
    pthread_atfork(nullptr, nullptr, [] { gForked.store(true); });
    return new SharedPool();  // never destroyed: tensors may outlive main
  }();
  return *pool;
}

SharedPool::Impl& SharedPool::impl() const {
  static Impl* impl = new Impl();
  return *impl;
}

size_t SharedPool::sizeClass(size_t bytes) {
  if (bytes <= kSmallClassLimit) return (bytes + kPage - 1) / kPage * kPage;
  // Four classes per power of two: [2^k, 2^(k+1)) in steps of 2^(k-2).
  const size_t step = (std::bit_floor(bytes) >> 2);
  return (bytes + step - 1) / step * step;
}

std::optional<SharedBlock> SharedPool::find(const void* ptr, size_t bytes) const {
  Impl& s = impl();
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.blocks.upper_bound(p);
  if (it == s.blocks.begin()) return std::nullopt;
  --it;
  if (p - it->first > it->second.bytes || bytes > it->second.bytes - (p - it->first)) {
    return std::nullopt;
  }
  return SharedBlock{reinterpret_cast<void*>(it->first), it->second.bytes, it->second.id};
}

SharedPoolStats SharedPool::stats() const {
  Impl& s = impl();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.stats;
}

std::optional<SharedBlock> SharedPool::acquire(size_t bytes) {
  if (gForked.load(std::memory_order_relaxed)) return std::nullopt;
  Impl& s = impl();
  const size_t size = sizeClass(bytes);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto list = s.freeLists.find(size);
    if (list != s.freeLists.end() && !list->second.empty()) {
      void* base = list->second.back();
      list->second.pop_back();
      BlockState& block = s.blocks.at(reinterpret_cast<uintptr_t>(base));
      block.inUse = true;
      --s.stats.blocksCached;
      s.stats.bytesCached -= size;
      ++s.stats.blocksInUse;
      s.stats.bytesInUse += size;
      ++s.stats.hits;
      return SharedBlock{base, size, block.id};
    }
  }
  // Outside the lock: allocShared maps and populates the block (milliseconds).
  collie::Result<void*> made = collie::allocShared(size);
  if (!made.isOk()) {
    trim();  // idle blocks of other classes may be what stands in the way
    made = collie::allocShared(size);
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!made.isOk()) {
    if (s.stats.fallbacks++ == 0) {
      std::cerr << "torch_collie: shared CPU allocator: " << made.status().toString()
                << "; serving this and later failed requests from the default allocator "
                   "(those tensors all-reduce through the copy path)\n";
    }
    return std::nullopt;
  }
  const uint64_t id = s.nextId++;
  s.blocks[reinterpret_cast<uintptr_t>(*made)] = BlockState{size, id, true};
  ++s.stats.blocksInUse;
  s.stats.bytesInUse += size;
  ++s.stats.misses;
  return SharedBlock{*made, size, id};
}

bool SharedPool::release(void* base) {
  Impl& s = impl();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.blocks.find(reinterpret_cast<uintptr_t>(base));
  if (it == s.blocks.end() || !it->second.inUse) return false;
  if (gForked.load(std::memory_order_relaxed)) return true;  // the parent's memory too
  const size_t size = it->second.bytes;
  it->second.inUse = false;
  --s.stats.blocksInUse;
  s.stats.bytesInUse -= size;
  s.freeLists[size].push_back(base);
  ++s.stats.blocksCached;
  s.stats.bytesCached += size;
  s.shrinkTo(s.maxCached);
  return true;
}

void SharedPool::setMaxCachedBytes(size_t bytes) {
  Impl& s = impl();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.maxCached = bytes;
  s.shrinkTo(bytes);
}

void SharedPool::trim() {
  Impl& s = impl();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.shrinkTo(0);
}

namespace {

std::atomic<c10::DeleterFnPtr> gPreviousRawDeleter{nullptr};

void deleteShared(void* ptr) { SharedPool::instance().release(ptr); }

// raw_allocate() hands out memory of either allocator; free it with the right one.
void rawDelete(void* ptr) {
  if (SharedPool::instance().release(ptr)) return;
  if (c10::DeleterFnPtr previous = gPreviousRawDeleter.load()) previous(ptr);
}

class SharedCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    c10::Allocator* previous = previous_.load();
    if (n >= minBytes_.load()) {
      if (auto block = SharedPool::instance().acquire(n)) {
        return {block->base, block->base, &deleteShared, c10::Device(c10::DeviceType::CPU)};
      }
    }
    TORCH_CHECK(previous != nullptr, "torch_collie: shared CPU allocator has no fallback");
    return previous->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &rawDelete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  std::atomic<c10::Allocator*> previous_{nullptr};
  std::atomic<size_t> minBytes_{1};
};

SharedCpuAllocator& allocator() {
  static SharedCpuAllocator* a = new SharedCpuAllocator();  // its DataPtrs outlive us
  return *a;
}

std::mutex gInstallMutex;

}  // namespace

void installSharedAllocator(size_t minBytes, size_t maxCachedBytes) {
  TORCH_CHECK(minBytes >= 1, "torch_collie.use_shared_cpu_allocator: min_bytes must be >= 1");
  std::lock_guard<std::mutex> lock(gInstallMutex);
  SharedCpuAllocator& ours = allocator();
  c10::Allocator* current = c10::GetCPUAllocator();
  TORCH_CHECK(current != &ours,
              "torch_collie.use_shared_cpu_allocator: already installed; restore it first");
  SharedPool::instance().setMaxCachedBytes(maxCachedBytes);
  ours.minBytes_.store(minBytes);
  ours.previous_.store(current);
  gPreviousRawDeleter.store(current->raw_deleter());
  c10::SetCPUAllocator(&ours, kPriority);
  if (c10::GetCPUAllocator() != &ours) {
    ours.previous_.store(nullptr);
    TORCH_CHECK(false,
                "torch_collie.use_shared_cpu_allocator: torch kept its CPU allocator (another "
                "one was set with a priority above ",
                static_cast<int>(kPriority), ")");
  }
}

void uninstallSharedAllocator() {
  std::lock_guard<std::mutex> lock(gInstallMutex);
  SharedCpuAllocator& ours = allocator();
  c10::Allocator* previous = ours.previous_.load();
  if (previous == nullptr || c10::GetCPUAllocator() != &ours) return;
  c10::SetCPUAllocator(previous, kPriority);
  // previous_ stays: a thread that read our pointer just before the swap still
  // falls back correctly.
}

bool sharedAllocatorInstalled() { return c10::GetCPUAllocator() == &allocator(); }

}  // namespace torch_collie
