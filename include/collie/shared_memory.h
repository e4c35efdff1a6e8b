// Memory that the ranks of one host can map: the allocator behind registered buffers.
//
// allocShared(bytes) returns page-aligned, zero-filled memory backed by a memfd (huge
// pages when the size warrants it and the system has them reserved, populated up
// front). A Communicator can then registerBuffer() ranges of it; when every local
// rank's send and receive buffers of an all-reduce are registered, the shm transport
// loads the peers' inputs and stores into their outputs directly (one pass, no FIFO
// copies). freeShared() releases it; peers that mapped it keep their mapping until
// their communicator is destroyed, so freeing while a collective runs is a user error.
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
