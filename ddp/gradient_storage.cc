#include "ddp/gradient_storage.h"

#include <unistd.h>

#include <utility>

#include "collie/shared_memory.h"

namespace collie::ddp {

namespace {

size_t pageFloats() {
  const long page = sysconf(_SC_PAGESIZE);
  return static_cast<size_t>(page > 0 ? page : 4096) / sizeof(float);
}

}  // namespace

GradientStorage::GradientStorage(const std::vector<size_t>& elements, BucketMemory memory) {
  // Each bucket starts on a page of its own, so no two buckets share a page or a line.
  const size_t align = pageFloats();
  std::vector<size_t> offsets;
  size_t total = 0;
  for (size_t n : elements) {
    offsets.push_back(total);
    total += (n + align - 1) / align * align;
  }
  float* base = nullptr;
  if (memory == BucketMemory::kShared && total > 0) {
    Result<void*> mem = allocShared(total * sizeof(float));  // zero-filled
    if (mem.isOk()) {
      shared_ = *mem;
      base = static_cast<float*>(shared_);
    }
  }
  if (base == nullptr) {
    heap_.assign(total, 0.0f);
    base = heap_.data();
  }
  for (size_t b = 0; b < elements.size(); ++b)
    buckets_.emplace_back(base + offsets[b], elements[b]);
}

GradientStorage::~GradientStorage() { release(); }

GradientStorage::GradientStorage(GradientStorage&& other) noexcept
    : shared_(std::exchange(other.shared_, nullptr)),
      heap_(std::move(other.heap_)),
      buckets_(std::move(other.buckets_)) {}

GradientStorage& GradientStorage::operator=(GradientStorage&& other) noexcept {
  if (this != &other) {
    release();
    shared_ = std::exchange(other.shared_, nullptr);
    heap_ = std::move(other.heap_);
    buckets_ = std::move(other.buckets_);
  }
  return *this;
}

void GradientStorage::release() {
  if (shared_ != nullptr) (void)freeShared(shared_);
  shared_ = nullptr;
  buckets_.clear();
}

}  // namespace collie::ddp
