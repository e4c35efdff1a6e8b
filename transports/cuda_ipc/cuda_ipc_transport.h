// The CUDA IPC transport: ranks on one host map each other's device memory, and
// core's device path (core/device/device_comm) runs its step kernels over those
// mappings. It offers exactly that, as the DeviceWindowProvider capability
// (core/transport/device_windows.h); it carries no host messages.
//
// Registered as "cuda_ipc" (priority 150, offersDeviceWindows). It uses only the
// communicator's DeviceRuntime (TransportContext::deviceRuntime): allocate,
// exportHandle, openHandle — CUDA IPC handles with the CUDA runtime, memfd windows
// with the emulated runtime (COLLIE_DEVICE_EMULATION=1), so it is built with or
// without CUDA and fully tested without a GPU.
//
// create() never fails for lack of a device: every rank publishes
// "collie-cuda-ipc-v2 <runtime name or none> <host id>" under ctx.jobKey and reads
// every peer's (validated: magic, bounded fields); windows are available() when every
// rank has the same runtime and host. open(): see device_windows.h; each rank's entry
// "collie-cuda-ipc-window-v2 <runtime> <layout> <bytes> <handle hex>" is checked
// field by field against this rank's before the handle is opened.
//
// Never chosen for host buffers: canConnect() is false for every peer, connect() and
// its connections' postSend/postRecv return Unsupported naming deviceWindows(), and
// forcing COLLIE_TRANSPORT=cuda_ipc fails at creation with what to force instead.
//
// Thread safety: as Transport (one thread at a time).
#pragma once

#include <memory>

#include "core/transport/transport.h"

namespace collie {

Result<std::unique_ptr<Transport>> createCudaIpcTransport(const TransportContext& ctx);
void registerCudaIpcTransport(TransportRegistry& registry);

}  // namespace collie
