// GradientStorage: the memory behind a Reducer's gradient buckets.
//
// One zero-filled float32 allocation holding every bucket, each bucket starting on its
// own page. By default it is collie shared memory (collie::allocShared): when every rank
// of a one-host communicator all-reduces buckets in such memory, the shm transport
// reduces them in one pass straight between the ranks' buffers (the registered path,
// docs/decisions/ddp-bucket-memory.md) instead of copying through cross-memory attach
// or its FIFOs. When shared memory cannot be made (or kHeap is asked for) the buckets
// are ordinary heap memory and take the usual path; every rank decides per collective
// from what all ranks publish, so ranks may differ.
//
// Thread safety: none; the Reducer's driving thread owns it.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace collie::ddp {

enum class BucketMemory { kShared, kHeap };

class GradientStorage {
 public:
  GradientStorage() = default;
  // Room for buckets of `elements[b]` floats each; kShared falls back to the heap when
  // the shared memory cannot be made.
  GradientStorage(const std::vector<size_t>& elements, BucketMemory memory);
  ~GradientStorage();
  GradientStorage(const GradientStorage&) = delete;
  GradientStorage& operator=(const GradientStorage&) = delete;
  GradientStorage(GradientStorage&& other) noexcept;
  GradientStorage& operator=(GradientStorage&& other) noexcept;

  std::span<float> bucket(size_t b) const { return buckets_[b]; }
  size_t numBuckets() const { return buckets_.size(); }
  // True when the buckets are collie shared memory.
  bool shared() const { return shared_ != nullptr; }

 private:
  void release();

  void* shared_ = nullptr;   // from allocShared, or null
  std::vector<float> heap_;  // the fallback
  std::vector<std::span<float>> buckets_;
};

}  // namespace collie::ddp
