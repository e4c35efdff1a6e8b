// DeviceStaging: device buffers on a communicator whose ranks span hosts, where no
// device path reaches every peer. Each collective is staged through pinned host
// memory: on the caller's stream the input is copied to a host bounce buffer, the
// host engine runs the collective over the host transports (tcp, ucx, ...), and the
// result is copied back to the device buffer on the same stream.
//
// Contract: submit() returns after the host part finished (the calling thread waits
// for the stream to reach the input copy, then for the host collective), with a Work
// that completes when the copy back did; stream order holds on both sides. Errors of
// the host collective are returned as they are (naming the peer).
// Thread safety: submit() from any thread; calls are serialised.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>

#include "collie/communicator.h"
#include "core/device/device_runtime.h"
#include "core/device/device_work.h"
#include "core/plan/schedule.h"

namespace collie {

class DeviceStaging {
 public:
  // `hostSubmit` runs the host part; `workFromPoller` makes the returned Work.
  DeviceStaging(DeviceRuntime* runtime, HostSubmit hostSubmit, WorkFromPoller workFromPoller,
                int rank, int nranks, std::chrono::microseconds timeout);
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  Result<Work> submit(const CollectiveArgs& args, const void* input, void* output,
                      DeviceStream stream);

 private:
  DeviceRuntime* const runtime_;
  const HostSubmit hostSubmit_;
  const WorkFromPoller workFromPoller_;
  const int rank_;
  const int nranks_;
  const std::chrono::microseconds timeout_;
  // A pinned bounce buffer of at least `bytes` (pinning page-locks and maps every page,
  // so it is kept), reused once the previous call's copy back finished.
  std::shared_ptr<uint8_t> bounce(std::shared_ptr<uint8_t>* cached, size_t* cachedBytes,
                                  size_t bytes, bool reusable, Status* status);

  std::mutex mutex_;
  DeviceStream ownStream_ = nullptr;  // created on first use
  std::shared_ptr<uint8_t> hostIn_, hostOut_;
  size_t hostInBytes_ = 0, hostOutBytes_ = 0;
  std::shared_ptr<void> lastDone_;  // the previous call's copy-back event
};

}  // namespace collie
