// Tensors in collie shared memory: the zero-copy path of the torch backend.
//
// collie's shm transport all-reduces in a single pass (each rank reduces its share
// straight from every rank's input into every rank's output) when every rank's buffer
// is collie::allocShared memory registered with the communicator. emptyShared() makes
// a CPU tensor whose storage is such memory (freed with the storage); the backend
// registers it around each all-reduce (CollieBackend::allreduce), so an all-reduce of
// such tensors on every rank is zero-copy. Ordinary tensors take the FIFO ring.
//
// Thread safety: both functions may be called from any thread.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace torch_collie {

// An uninitialised (zero-filled) contiguous tensor of `sizes` and `type` in shared
// memory; an empty one is an ordinary tensor. Throws c10::Error when the memory
// cannot be made.
at::Tensor emptyShared(const std::vector<int64_t>& sizes, at::ScalarType type);

// True when `t`'s storage was made by emptyShared.
bool isShared(const at::Tensor& t);

}  // namespace torch_collie
