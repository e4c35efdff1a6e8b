// DeviceComm: the device path of one communicator. A collective whose buffers are
// device memory is planned into the same Schedule as a host one (core/plan) and each
// step becomes one step kernel (DeviceRuntime::launchReduce / launchCopy) on the
// caller's stream; nothing runs on the progress thread.
//
// How steps talk (all ranks on one host; each rank's region is exported through the
// runtime's IPC handles and opened by every peer):
//   - region of rank r: sent[p] (messages r wrote into p's inbox), consumed[q]
//     (messages from q that r has read), a block counter, and inbox[q][kSlots] of
//     kSlotBytes each, which rank q writes directly.
//   - message m from q to r (counted per pair over the communicator's life, so flags
//     only grow and never need resetting) goes to r's inbox[q][m % kSlots]. The
//     sender's kernel first waits for r.consumed[q] >= m + 1 - kSlots (the slot is
//     free: in-place and back-to-back collectives cannot overwrite unread data), then
//     writes and posts sent[r] = m + 1; the receiver's kernel waits for q.sent[r] >=
//     m + 1, reads (reduces) the slot and posts consumed[q] = m + 1.
//   - the schedule is planned with one channel and chunks of kSlotBytes, so every
//     step fits one slot.
// Completion: an event after the last launch; Work::wait()/test() poll it. A wait
// that outlasts the communicator's timeout on the device stores the code of the peer
// it waited for into the error word (mapped memory), later steps skip themselves, and
// the Work fails with Timeout naming that peer. The failure is sticky.
// Ordering: collectives on one stream follow stream order; a collective on another
// stream than the previous one first waits (on the device) for the previous one.
//
// Thread safety: submit() may be called from any thread; submissions are serialised.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collie/communicator.h"
#include "collie/store.h"
#include "core/device/device_runtime.h"
#include "core/plan/schedule.h"

namespace collie {

struct DeviceCommConfig {
  int rank = 0;
  int nranks = 1;
  std::chrono::microseconds timeout{300'000'000};
  Algorithm algorithm = Algorithm::kAuto;
};

class DeviceComm {
 public:
  static constexpr size_t kSlotBytes = 64 * 1024;
  static constexpr uint64_t kSlots = 2;

  // Collective over all ranks (they must all call it, with the same runtime kind):
  // allocates and publishes this rank's region under `key`, opens every peer's. Null
  // (on every rank alike) when some rank could not open every peer's region: the
  // caller then stages device buffers through host memory.
  static Result<std::unique_ptr<DeviceComm>> create(DeviceRuntime* runtime,
                                                    const DeviceCommConfig& config, Store& store,
                                                    const std::string& key,
                                                    std::chrono::steady_clock::time_point deadline);
  ~DeviceComm();
  DeviceComm(const DeviceComm&) = delete;
  DeviceComm& operator=(const DeviceComm&) = delete;

  DeviceRuntime& runtime() const { return *runtime_; }
  // The sticky failure of the device path (OK while healthy).
  Status failure() const { return outcome_->sticky(); }
  // Enqueues the collective on `stream` (null: the communicator's own stream).
  Result<Work> submit(const CollectiveArgs& args, const void* input, void* output,
                      DeviceStream stream);

 private:
  struct Region;  // offsets into one rank's region
  class Launcher;
  // The error word and the sticky failure, shared with the Work pollers so that a
  // Work outlives its communicator safely.
  struct Outcome {
    DeviceRuntime* runtime = nullptr;
    int32_t* error = nullptr;  // mapped
    std::chrono::microseconds timeout{0};
    std::mutex mutex;
    Status failed;
    ~Outcome();
    // OK, or Timeout naming the peer from the error word; makes a failure sticky.
    Status finish(const std::string& what);
    Status sticky();
    Status fail(Status status);
  };

  DeviceComm(DeviceRuntime* runtime, const DeviceCommConfig& config);
  Status ensureScratch(size_t bytes);
  Status launchSchedule(const Schedule& schedule, const void* input, void* output,
                        DeviceStream stream);

  DeviceRuntime* const runtime_;
  const DeviceCommConfig config_;
  std::mutex mutex_;  // serialises submit()
  uint8_t* region_ = nullptr;
  std::vector<uint8_t*> peerRegions_;  // [rank]; this rank's own region at rank_
  std::shared_ptr<Outcome> outcome_;
  DeviceStream ownStream_ = nullptr;
  uint8_t* scratch_ = nullptr;
  size_t scratchBytes_ = 0;
  std::vector<uint8_t*> retiredScratch_;  // freed at destruction (kernels may use them)
  std::vector<uint64_t> sentCount_;       // [peer] messages sent over the life of the comm
  std::vector<uint64_t> recvCount_;       // [peer] messages received
  std::shared_ptr<void> lastEvent_;       // the previous collective's completion
  DeviceStream lastStream_ = nullptr;
};

}  // namespace collie
