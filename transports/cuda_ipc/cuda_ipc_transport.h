// The CUDA IPC transport: GPU peers on one host map each other's device memory.
//
// Registered as "cuda_ipc" (priority 150: after shm, before tcp; built only with CUDA).
// create() never fails for lack of a GPU: it publishes this rank's CUDA device count
// under ctx.jobKey + "/cuda_ipc/<rank>" and reads every peer's, so that canConnect(peer)
// is true only when both ranks have a CUDA device and share a host id — on a machine
// without a driver or device (cudaGetDeviceCount fails) it is never chosen and the
// other transports serve every peer.
//
// connect() allocates this rank's device region (one uint64 step flag per peer and
// channel, then a staging area per peer and channel), publishes its
// cudaIpcMemHandle_t through the store, and opens every peer's handle, so that the
// kernels of kernels/cuda can load and store peers' memory directly and order steps
// through the flags (StepSync).
//
// Not implemented (Unsupported, with the reason): postSend/postRecv — two-sided
// messages through the engine; device collectives are meant to run as kernels over
// the mapped regions, a path the engine does not have yet (docs/cuda.md).
//
// Thread safety: as Transport (one thread at a time).
#pragma once

#include <memory>

#include "core/transport/transport.h"

namespace collie {

Result<std::unique_ptr<Transport>> createCudaIpcTransport(const TransportContext& ctx);
void registerCudaIpcTransport(TransportRegistry& registry);

}  // namespace collie
