// Memory that the ranks of one host can map: the allocator behind registered buffers.
//
// allocShared(bytes) returns page-aligned, zero-filled memory backed by a memfd (huge
// pages when the size warrants it and the system has them reserved, populated up
// front). When every local rank's send and receive buffers of an all-reduce are
// allocShared memory, the shm transport loads the peers' inputs and stores into their
// outputs directly (one pass, no FIFO copies); registering them
// (Communicator::registerBuffer) is optional: collie knows its own allocations.
// freeShared() releases it; a peer that mapped it unmaps its mapping when it next maps
// a region of this process at an overlapping address, or with its communicator.
// Freeing while a collective runs on it is a user error.
//
// Thread safety: both functions may be called from any thread.
#pragma once

#include <cstddef>

#include "collie/status.h"

namespace collie {

// Null `bytes` is rejected. Fails with SystemError when the memory cannot be made.
Result<void*> allocShared(size_t bytes);
// `ptr` must come from allocShared and not be freed yet; otherwise InvalidArgument.
Status freeShared(void* ptr);

}  // namespace collie
