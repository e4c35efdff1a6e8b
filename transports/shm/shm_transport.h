// The shared-memory transport: ranks with equal host ids exchange messages through
// FIFOs in POSIX shared memory (see docs/transports-shm.md).
//
// Registered as "shm" (priority 100, same host only). connect() creates this rank's
// segment, publishes its name and nonce under ctx.jobKey + "/shm/<rank>" in the store,
// maps every peer's segment, and waits until every peer mapped this rank's segment
// before unlinking its name (at once when connecting fails). waitForActivity() spins
// for COLLIE_SHM_SPIN (not when there are more local ranks than CPUs), then sleeps on
// this rank's doorbell futex.
//
// Thread safety: as Transport (one thread at a time).
#pragma once

#include <memory>

#include "core/transport/transport.h"

namespace collie {

Result<std::unique_ptr<Transport>> createShmTransport(const TransportContext& ctx);
void registerShmTransport(TransportRegistry& registry);

}  // namespace collie
