// Bucket assignment: which parameters' gradients share one all-reduce.
//
// Follows PyTorch DDP (compute_bucket_assignment_by_size over the parameters in
// gradient-ready order): parameters are visited from the last one registered to the
// first (backward produces gradients roughly in that order) and appended to the open
// bucket; a bucket closes as soon as its size reaches its limit (so it may exceed the
// limit by its last parameter). The first bucket's limit is `firstBucketBytes` (small,
// so the first all-reduce starts early), every later bucket's is `capBytes`.
//
// Pure function; safe from any thread.
#pragma once

#include <cstddef>
#include <vector>

namespace collie::ddp {

inline constexpr size_t kDefaultFirstBucketBytes = 1024 * 1024;  // PyTorch's 1 MiB
inline constexpr double kDefaultBucketCapMb = 25.0;              // PyTorch's bucket_cap_mb

// `paramBytes[i]` is the gradient size of parameter i in model (registration) order.
// Returns buckets in launch order; each lists parameter indices in the order they are
// laid out in the bucket's flat buffer (reverse model order). Zero limits are treated
// as 1 byte (one parameter per bucket).
std::vector<std::vector<size_t>> assignBuckets(const std::vector<size_t>& paramBytes,
                                               size_t firstBucketBytes, size_t capBytes);

// Megabytes as PyTorch converts bucket_cap_mb: int(mb * 1024 * 1024).
size_t megabytesToBytes(double mb);

}  // namespace collie::ddp
