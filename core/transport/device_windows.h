// Device windows: an optional capability of a transport (Transport::deviceWindows())
// whose ranks on one host can map each other's device memory (transports/cuda_ipc).
// Core's device path (core/device/device_comm) asks it for one window per rank and
// lays out its flags and inboxes there itself; the kernels then load and store peers'
// windows directly. Core never names the transport that provides them.
//
// Contract:
//   - available() gives the same answer on every rank (it depends only on what every
//     rank published at transport creation: one host, one kind of device runtime).
//   - open() is collective: when available() is true every rank calls it once, with
//     the same `bytes` and `layout`. It allocates this rank's window (`bytes` of
//     zero-filled device memory of the communicator's DeviceRuntime), publishes its IPC
//     handle through the store and opens every peer's. What peers publish is untrusted:
//     a malformed entry, another layout or size, or another runtime fails with
//     RemoteError / InvalidArgument naming the peer. Returns null on every rank alike
//     when some rank could not map every peer's window (the caller then stages device
//     buffers through host memory); Timeout naming a peer that never published.
//   - A DeviceWindows owns this rank's window and the mappings of the peers' windows
//     and releases them on destruction; it does not need its transport to stay alive.
//     window(r) is a device address this rank's kernels may read and write.
// Thread safety: open() on one thread; a DeviceWindows is immutable after open().
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "collie/status.h"

namespace collie {

class DeviceWindows {
 public:
  virtual ~DeviceWindows() = default;
  // Rank r's window as mapped in this process (r = this rank: its own allocation).
  virtual uint8_t* window(int rank) const = 0;
  virtual size_t bytes() const = 0;
};

class DeviceWindowProvider {
 public:
  virtual ~DeviceWindowProvider() = default;
  virtual bool available() const = 0;
  virtual Result<std::unique_ptr<DeviceWindows>> open(
      size_t bytes, uint32_t layout, std::chrono::steady_clock::time_point deadline) = 0;
};

}  // namespace collie
