// The parts of DeviceComm (device_comm.h) shared by its two sources, device_comm.cc
// (collectives, completion, failure) and device_moves.cc (point-to-point and
// all-to-all): the error word's codes, the layout of a rank's region and of its
// device-held counts, the Launcher that builds a step's waits and posts, and the
// scope that makes the communicator's device current. Internal to core/device.
//
// Thread safety: Launcher is used under DeviceComm's submission mutex; the rest are
// constants and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device/device_comm.h"

namespace collie {

// Error word codes: kGenericTimeout, kPeerTimeoutBase + peer (the peer a step waited
// for), kPeerMismatchBase + peer (the peer whose fingerprint differs), or kAbortedCode
// (DeviceComm::abort). Matches kStepErrorTimeout = 1 of kernels/cuda/device_handles.h.
inline constexpr int32_t kGenericTimeout = 1;
inline constexpr int32_t kPeerTimeoutBase = 2;
inline constexpr int32_t kPeerMismatchBase = 1 << 24;
inline constexpr int32_t kAbortedCode = 1 << 30;

inline size_t alignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }
inline uint64_t ceilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// The kinds the board and direct kernels run whole, as their kind; false for the rest.
inline bool wholeKindOf(CollectiveKind kind, DeviceBoardKind* out) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      *out = DeviceBoardKind::kAllReduce;
      return true;
    case CollectiveKind::kReduceScatter:
      *out = DeviceBoardKind::kReduceScatter;
      return true;
    case CollectiveKind::kAllGather:
      *out = DeviceBoardKind::kAllGather;
      return true;
    default:
      return false;
  }
}

// One rank's region: flags, the fingerprint check, the block counter, the board
// kernel's block flags, the inboxes, the two board slots, the ring program's counts
// and its FIFOs (the previous rank writes them), the direct kernel's block flags.
struct DeviceComm::Region {
  static size_t sent(int peer) { return static_cast<size_t>(peer) * sizeof(uint64_t); }
  static size_t consumed(int nranks, int peer) { return sent(nranks) + sent(peer); }
  static size_t checkPosted(int nranks) { return sent(2 * nranks); }
  static size_t checkSlot(int nranks, uint64_t sequence) {
    return sent(2 * nranks + 1 + static_cast<int>(sequence % 2));
  }
  static size_t counter(int nranks) { return sent(2 * nranks + 3); }
  // The board kernel's flags of blocks 1.. (DeviceBoardStep::ownBlockFlags).
  static size_t blockFlags(int nranks) { return sent(2 * nranks + 4); }
  static size_t inbox(int nranks, size_t slotBytes, int from, uint64_t slot) {
    constexpr size_t kBlockFlagBytes =
        (kDeviceMaxBoardBlocks - 1) * kDeviceBoardFlagWords * sizeof(uint64_t);
    return alignUp(blockFlags(nranks) + kBlockFlagBytes, 256) +
           (static_cast<size_t>(from) * kSlots + slot) * slotBytes;
  }
  // Board slot `slot` (of boardBytes each), after the inboxes.
  static size_t board(int nranks, size_t slotBytes, size_t boardBytes, uint64_t slot) {
    return inbox(nranks, slotBytes, nranks, 0) + static_cast<size_t>(slot) * boardBytes;
  }
  // The ring program's counts (DeviceRingProgram::sent and ::consumed) after the
  // boards, then its FIFOs (kDeviceMaxRingBlocks x kDeviceRingSlots slices).
  static size_t ringSent(int nranks, size_t slotBytes, size_t boardBytes) {
    return board(nranks, slotBytes, boardBytes, kSlots);
  }
  static constexpr size_t kRingCountBytes =
      kDeviceMaxRingBlocks * kDeviceRingFlagStride * sizeof(uint64_t);
  static size_t ringConsumed(int nranks, size_t slotBytes, size_t boardBytes) {
    return ringSent(nranks, slotBytes, boardBytes) + kRingCountBytes;
  }
  static size_t ringFifo(int nranks, size_t slotBytes, size_t boardBytes) {
    return alignUp(ringConsumed(nranks, slotBytes, boardBytes) + kRingCountBytes, 256);
  }
  // The direct kernel's block flags (DeviceDirectStep::ownBlockFlags), after the FIFOs.
  static size_t directFlags(int nranks, size_t slotBytes, size_t boardBytes,
                            size_t ringSliceBytes) {
    return alignUp(
        ringFifo(nranks, slotBytes, boardBytes) +
            static_cast<size_t>(kDeviceMaxRingBlocks) * kDeviceRingSlots * ringSliceBytes,
        256);
  }
  static constexpr size_t kDirectFlagBytes =
      kDeviceMaxDirectBlocks * kDeviceDirectFlagWords * sizeof(uint64_t);
  static size_t bytes(int nranks, size_t slotBytes, size_t boardBytes, size_t ringSliceBytes) {
    return directFlags(nranks, slotBytes, boardBytes, ringSliceBytes) + kDirectFlagBytes;
  }
};

// This rank's counts in device memory: messages sent to each peer, received from each
// peer, and the collectives checked so far (the sequence number). Only this rank's
// kernels read and advance them, in stream order.
struct DeviceComm::Counters {
  static size_t sent(int peer) { return static_cast<size_t>(peer); }
  static size_t received(int nranks, int peer) { return static_cast<size_t>(nranks + peer); }
  static size_t sequence(int nranks) { return static_cast<size_t>(2 * nranks); }
  static size_t bytes(int nranks) { return (sequence(nranks) + 1) * sizeof(uint64_t); }
};

// Builds the flag waits and posts of one step from the per-pair message counts.
class DeviceComm::Launcher {
 public:
  explicit Launcher(DeviceComm& comm) : c_(comm) {}

  DeviceStepSync baseSync() const {
    DeviceStepSync sync;
    sync.blockCounter =
        reinterpret_cast<uint32_t*>(c_.region_ + Region::counter(c_.config_.nranks));
    sync.error = c_.outcome_->error;
    sync.timeoutNs = static_cast<uint64_t>(c_.config_.timeout.count()) * 1000;
    sync.profile = reinterpret_cast<unsigned long long*>(c_.profile_);
    return sync;
  }

  // Wait `index` of sync: until *flag >= *base + value (a signed offset), else error
  // code `error`; post `index`: *flag = *base + value.
  static void wait(DeviceStepSync* sync, int index, const uint64_t* flag, uint64_t value,
                   int32_t error, const uint64_t* base) {
    sync->waitFlags[index] = flag;
    sync->waitValues[index] = value;
    sync->waitErrors[index] = error;
    sync->waitBase[index] = base;
  }
  static void post(DeviceStepSync* sync, int index, uint64_t* flag, uint64_t value,
                   const uint64_t* base) {
    sync->postFlags[index] = flag;
    sync->postValues[index] = value;
    sync->postBase[index] = base;
  }

  // The next message to `peer`: waits until its slot is free, posts "sent", advances
  // the count of messages sent to it. Returns the address of slot 0 of this rank's
  // inbox at the peer; the kernel picks the slot from the count.
  uint8_t* send(int peer, DeviceStepSync* sync, int index) {
    const int n = c_.config_.nranks;
    const uint64_t* count = c_.counters_ + Counters::sent(peer);
    // Message m (= *count) may go once the peer consumed m + 1 - kSlots messages.
    wait(sync, index, flag(peer, Region::consumed(n, c_.config_.rank)),
         static_cast<uint64_t>(1 - static_cast<int64_t>(kSlots)), kPeerTimeoutBase + peer, count);
    post(sync, index, flag(c_.config_.rank, Region::sent(peer)), 1, count);
    sync->advance[index] = c_.counters_ + Counters::sent(peer);
    sync->sendCount = count;
    selectSlots(sync);
    return c_.peerRegions_[peer] + Region::inbox(n, c_.config_.slotBytes, c_.config_.rank, 0);
  }

  // The next message from `peer`: waits until it was sent, posts "consumed", advances
  // the count of messages received from it. Returns the address of slot 0 of the
  // peer's inbox in this rank's region.
  const uint8_t* recv(int peer, DeviceStepSync* sync, int index) {
    const int n = c_.config_.nranks;
    const uint64_t* count = c_.counters_ + Counters::received(n, peer);
    wait(sync, index, flag(peer, Region::sent(c_.config_.rank)), 1, kPeerTimeoutBase + peer, count);
    post(sync, index, flag(c_.config_.rank, Region::consumed(n, peer)), 1, count);
    sync->advance[index] = c_.counters_ + Counters::received(n, peer);
    sync->recvCount = count;
    selectSlots(sync);
    return c_.region_ + Region::inbox(n, c_.config_.slotBytes, peer, 0);
  }

 private:
  void selectSlots(DeviceStepSync* sync) const {
    sync->slots = static_cast<uint32_t>(kSlots);
    sync->slotBytes = c_.config_.slotBytes;
  }
  uint64_t* flag(int owner, size_t offset) const {
    return reinterpret_cast<uint64_t*>(c_.peerRegions_[owner] + offset);
  }
  DeviceComm& c_;
};

// Makes the communicator's device current on this thread for a scope, restoring the
// caller's after (ncclCommInitRank binds a communicator to the device current then).
class DeviceScope {
 public:
  DeviceScope(DeviceRuntime& runtime, int device) : runtime_(runtime) {
    Result<int> current = runtime.currentDevice();
    if (!current.isOk()) {
      status_ = current.status();
      return;
    }
    previous_ = *current;
    if (previous_ != device) status_ = runtime.setCurrentDevice(device);
  }
  ~DeviceScope() {
    Result<int> current = runtime_.currentDevice();
    if (status_.isOk() && current.isOk() && *current != previous_) {
      (void)runtime_.setCurrentDevice(previous_);
    }
  }
  const Status& status() const { return status_; }

 private:
  DeviceRuntime& runtime_;
  int previous_ = 0;
  Status status_;
};
}  // namespace collie
