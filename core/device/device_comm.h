// DeviceComm: the device path of one communicator. A collective whose buffers are
// device memory is planned into the same Schedule as a host one (core/plan) and each
// step becomes one step kernel (DeviceRuntime::launchReduce / launchCopy) on the
// caller's stream; nothing runs on the progress thread. An all-reduce, reduce-scatter
// or all-gather of 2..kDeviceMaxBoardRanks ranks whose input fits a board slot
// (COLLIE_DEVICE_BOARD_BYTES; algorithm auto or board) runs instead as one board kernel
// (device_board.cc; DeviceBoardStep in device_steps.h says how it synchronises).
//
// How steps talk (all ranks on one host): each rank's region is its device window,
// which a transport offering device windows (core/transport/device_windows.h, e.g.
// transports/cuda_ipc) allocates, exports and maps in every peer; DeviceComm only
// lays it out:
//   - region of rank r: sent[p] (messages r wrote into p's inbox), consumed[q]
//     (messages from q that r has read), the fingerprint check (posted count and two
//     fingerprint slots), a block counter, the board kernel's flags of blocks 1..,
//     inbox[q][kSlots] of slotBytes each, which rank q writes directly, and two board
//     slots of boardBytes, which every peer reads.
//   - message m from q to r (counted per pair over the communicator's life, so flags
//     only grow and never need resetting) goes to r's inbox[q][m % kSlots]. The counts
//     live in device memory of each rank (messages sent to each peer, received from
//     each peer, collectives checked): a step kernel reads them when it runs, derives
//     its waits, posts and slots, and advances them when it ends. Nothing in a
//     kernel's arguments depends on how many collectives ran before it, so a kernel
//     captured into a CUDA graph replays correctly any number of times. The
//     sender's kernel first waits for r.consumed[q] >= m + 1 - kSlots (the slot is
//     free: in-place and back-to-back collectives cannot overwrite unread data), then
//     writes and posts sent[r] = m + 1; the receiver's kernel waits for q.sent[r] >=
//     m + 1, reads (reduces) the slot and posts consumed[q] = m + 1.
//   - the schedule is planned with one channel and chunks of slotBytes
//     (COLLIE_DEVICE_SLOT_BYTES), so every step fits one slot. Each step is one kernel
//     whose start waits for the peer's previous one: larger slots mean fewer such
//     hand-offs per byte (on an H200 under MPS a hand-off costs tens of microseconds).
// Mismatch: collective number s (the sequence number, counted on the device) opens
// with a check kernel that writes this rank's fingerprint (core/plan/fingerprint.h,
// with s) into its slot s % 2, posts `posted = s + 1`, waits for every peer's post and
// compares. A difference stores both fingerprints and a mismatch code naming the peer
// into mapped
// memory, every step after it skips, and the Work fails with Mismatch naming the peer
// and both sides, before any output byte is written. Two slots suffice: a rank can
// start check s + 2 only after its check s + 1 saw every peer's post s + 2, which each
// peer makes after its check s (the last read of slot s % 2) finished.
// Completion: an event after the last launch; Work::wait()/test() poll it. A wait
// that outlasts the communicator's timeout on the device stores the code of the peer
// it waited for into the error word (mapped memory), later steps skip themselves, and
// the Work fails with Timeout naming that peer. The failure is sticky, and failure()
// reads the error word itself, so the communicator's async error shows it while
// kernels are still in flight and before anyone waits on a Work. abort() stores a code
// of its own there: waiting kernels reread the word every few hundred polls and end,
// so the stream drains in microseconds instead of at the device-side deadline.
// Binding: a communicator runs on the device that was current when it was created
// (deviceOrdinal()); submit() makes it current for its launches and restores the
// caller's. Graph capture: a collective issued on a stream being captured is recorded
// into the graph (its Work is complete at once: the graph's launches run it); every
// rank must launch its graphs in the same order relative to its other collectives on
// the communicator, as with NCCL. Scratch cannot be allocated during a capture: a
// collective that needs more than the communicator holds fails (Unsupported) until it
// ran once outside.
// Ordering: collectives on one stream follow stream order; a collective on another
// stream than the previous one first waits (on the device) for the previous one
// (except while capturing: the caller orders the graph's launches).
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
#include "core/device/device_runtime.h"
#include "core/device/device_work.h"
#include "core/plan/schedule.h"
#include "core/transport/device_windows.h"

namespace collie {

class DeviceScope;  // device_comm_parts.h

struct DeviceCommConfig {
  int rank = 0;
  int nranks = 1;
  std::chrono::microseconds timeout{300'000'000};
  Algorithm algorithm = Algorithm::kAuto;
  size_t slotBytes = size_t{8} << 20;  // COLLIE_DEVICE_SLOT_BYTES; a multiple of 4 KiB
  // COLLIE_DEVICE_BOARD_BYTES: each of the two board slots; a multiple of 4 KiB, 0: no
  // board kernel.
  size_t boardBytes = size_t{256} << 10;
  // COLLIE_DEVICE_RING_SLICE_BYTES: the ring program's FIFO slot; a multiple of 4 KiB,
  // 0: no ring program (every step its own kernel).
  size_t ringSliceBytes = size_t{128} << 10;
  // COLLIE_DEVICE_PROFILE: step kernels add up how long they waited for peers' flags;
  // the sum is logged (INFO) when the communicator is destroyed.
  bool profile = false;
  // Wraps each submission's completion in a Work (core/device/device_work.h); required.
  WorkFromPoller workFromPoller = nullptr;
};

class DeviceComm {
 public:
  static constexpr size_t kMinSlotBytes = 4096;
  static constexpr uint64_t kSlots = 2;

  // The layout of the regions (published with the windows: every rank must agree).
  static constexpr uint32_t kWindowLayout = 6;
  // The bytes of one rank's region (its device window) for `nranks` ranks.
  static size_t windowBytes(int nranks, size_t slotBytes, size_t boardBytes, size_t ringSliceBytes);
  // What a collective puts on a rank's board: the whole input (all-reduce, reduce-
  // scatter, all-gather); 0 for the kinds the board kernel does not run.
  static size_t boardBytesOf(const CollectiveArgs& args, int nranks);

  // Takes the ranks' device windows (DeviceWindowProvider::open with windowBytes() and
  // kWindowLayout; zero-filled) and keeps them for its life. Local: no peer traffic.
  static Result<std::unique_ptr<DeviceComm>> create(DeviceRuntime* runtime,
                                                    const DeviceCommConfig& config,
                                                    std::unique_ptr<DeviceWindows> windows);
  ~DeviceComm();
  DeviceComm(const DeviceComm&) = delete;
  DeviceComm& operator=(const DeviceComm&) = delete;

  DeviceRuntime& runtime() const { return *runtime_; }
  // The device path's failure (OK while healthy): the sticky one, else what a kernel
  // stored into the error word (made sticky here).
  Status failure() const { return outcome_->poll(); }
  // Fails the device path for good: in-flight and later kernels skip their work and
  // the stream drains; later submissions fail with Aborted.
  void abort();
  // The device this communicator's kernels run on.
  int deviceOrdinal() const { return device_; }
  // Enqueues the collective on `stream` (null: the communicator's own stream).
  Result<Work> submit(const CollectiveArgs& args, const void* input, void* output,
                      DeviceStream stream);
  // Enqueues a group of sends and receives on `stream`: the n-th send to a peer meets
  // that peer's n-th receive from this rank (of the same bytes); sends to this rank
  // meet receives from it in order (InvalidArgument, before anything is enqueued,
  // when they do not pair up). Tags are not looked at. No fingerprint check: a peer
  // that never sends or receives its side is named by a Timeout.
  Result<Work> submitPointToPoint(const std::vector<PointToPoint>& ops, DeviceStream stream);
  // The exchanges whose blocks are messages between ranks (movesAsMessages: all-to-all,
  // all-to-all v, gather, scatter): the fingerprint check, then the blocks as
  // point-to-point messages; no staging through the host.
  static bool movesAsMessages(CollectiveKind kind) {
    return kind == CollectiveKind::kAllToAll || kind == CollectiveKind::kAllToAllV ||
           kind == CollectiveKind::kGather || kind == CollectiveKind::kScatter;
  }
  Result<Work> submitExchange(const CollectiveArgs& args, const void* input, void* output,
                              DeviceStream stream);

  // User windows (Communicator::registerDeviceWindow, which exchanges the entries):
  // device memory every rank registered collectively, the same bytes on every rank, mapped
  // in every rank. exportWindow describes this rank's [ptr, ptr + bytes) for its peers
  // (the allocation's IPC handle and the offset in it), a single line of text;
  // InvalidArgument when the range is not inside one allocation of the runtime or
  // overlaps a window already registered. addWindow takes every rank's line
  // (entries[rank] is this rank's own) and maps the peers' ranges: InvalidArgument naming
  // (Status::peer) the first rank, in rank order, whose size differs from rank 0's or
  // whose line is malformed (the same on every rank: it depends on the entries alone),
  // Unsupported naming a peer whose range cannot be mapped here (nothing is kept then).
  // removeWindow(ptr) closes a window (NotFound when none starts at ptr); destruction closes them
  // all. An all-reduce, reduce-scatter or all-gather of 2.. kDeviceMaxDirectRanks ranks beyond the
  // board whose input and output lie in windows runs as the direct kernel (device_direct.cc); the
  // fingerprint check tells a rank whose buffers lie elsewhere, or at other offsets, as a mismatch.
  Result<std::string> exportWindow(void* ptr, size_t bytes);
  Status addWindow(void* ptr, size_t bytes, const std::vector<std::string>& entries);
  Status removeWindow(const void* ptr);

 private:
  struct Region;    // offsets into one rank's region
  struct Counters;  // offsets into counters_
  class Launcher;
  void logProfile();
  // The error word and the sticky failure, shared with the Work pollers so that a
  // Work outlives its communicator safely.
  struct Outcome {
    DeviceRuntime* runtime = nullptr;
    int32_t* error = nullptr;             // mapped: the error word
    uint64_t* peerFingerprint = nullptr;  // mapped: the peer's side of a mismatch
    uint64_t* ownFingerprint = nullptr;   // mapped: this rank's side
    void* mapped = nullptr;               // holds both
    int rank = 0;
    std::chrono::microseconds timeout{0};
    std::mutex mutex;
    Status failed;
    ~Outcome();
    // OK, or Timeout / Mismatch / Aborted naming the peer from the error word (a
    // mismatch with both sides' fingerprints, which the check kernel stored); makes a
    // failure sticky.
    Status finish(const std::string& what);
    // finish() for whichever collective the error word is about.
    Status poll();
    Status sticky();
    Status fail(Status status);

   private:
    Status describeLocked(const std::string& what);
  };

  DeviceComm(DeviceRuntime* runtime, const DeviceCommConfig& config);
  struct Scratch {
    uint8_t* data = nullptr;  // device memory, grown never shrunk
    size_t bytes = 0;
  };
  Status ensureScratch(Scratch* scratch, size_t bytes, bool captured);
  Result<bool> begin(const DeviceScope& scope, DeviceStream stream);
  Result<size_t> preMultiplyCount(const CollectiveArgs& args) const;
  // Whether `args` runs as the board kernel (device_board.cc): auto or board forced,
  // 2..kDeviceMaxBoardRanks ranks, a kind it runs, the input fits a board slot.
  bool runsOnBoard(const CollectiveArgs& args) const;
  Status launchBoard(const CollectiveArgs& args, const void* input, void* output,
                     DeviceStream stream);
  // The ring program (device_ring.cc). mayRunRingProgram: it is on, 2..kDeviceMaxRingSteps/2
  // ranks, a kind with a ring or chain schedule; ringPlanBytes: the chunk that plans
  // `args` in one round; ringProgramOf: the program of `schedule` on these buffers, or
  // false when the schedule is not ring-shaped (DeviceRingProgram's contract).
  bool mayRunRingProgram(const CollectiveArgs& args) const;
  static size_t ringPlanBytes(const CollectiveArgs& args, int nranks);
  bool ringProgramOf(const Schedule& schedule, const void* input, void* output,
                     DeviceRingProgram* program) const;
  // The direct kernel (device_direct.cc): its step for `args` on these buffers, or false
  // when they do not lie in user windows or the collective is not one it runs; the
  // fingerprint then carries directMark (the windows and offsets) in its root field.
  struct UserWindow {
    uint8_t* base = nullptr;
    size_t bytes = 0;
    uint64_t serial = 0;          // registrations counted alike on every rank
    std::vector<uint8_t*> ranks;  // [r]: rank r's window as mapped here
    std::vector<void*> opened;    // [r]: what openHandle returned (null for this rank)
  };
  const UserWindow* userWindowOf(const void* ptr, size_t bytes) const;
  bool directStepOf(const CollectiveArgs& args, const void* input, void* output,
                    DeviceDirectStep* step, uint64_t* directMark) const;
  void closeWindow(const UserWindow& window);
  Status launchDirect(DeviceDirectStep step, uint64_t fingerprint, DeviceStream stream);
  // The fingerprint check's fields for this rank, without peers.
  DeviceFingerprintCheck checkOf(uint64_t fingerprint) const;
  // Appends `peer` to the check's peers (its slot, posted word and rank); returns its
  // index in the check.
  int addCheckPeer(DeviceFingerprintCheck& check, int peer) const;
  // checkOf with every peer in one check (the board and direct kernels: at most
  // kDeviceMaxCheckPeers peers), and peerBlockFlags[i] = the block flags at
  // `blockFlagsAt` in the region of check peer i.
  DeviceFingerprintCheck checkWithEveryPeer(uint64_t fingerprint, size_t blockFlagsAt,
                                            const uint64_t** peerBlockFlags) const;
  Status launchPreMultiply(const CollectiveArgs& args, size_t count, const void* input,
                           DeviceStream stream);
  Status launchCheck(uint64_t fingerprint, DeviceStream stream);
  Status launchSchedule(const Schedule& schedule, const void* input, void* output,
                        DeviceStream stream);
  struct Move {
    bool isSend;
    uint8_t* buffer;
    size_t bytes;
    int peer;
  };
  Status checkSelfMoves(const std::vector<Move>& moves) const;
  std::vector<Move> exchangeMoves(const CollectiveArgs& args, const void* input,
                                  void* output) const;
  Status launchMoves(const std::vector<Move>& moves, DeviceStream stream);
  Result<DeviceStream> orderAfterPrevious(DeviceStream stream, bool captured);
  Result<Work> complete(const Status& launched, DeviceStream stream, const std::string& what,
                        bool captured);

  DeviceRuntime* const runtime_;
  const DeviceCommConfig config_;
  int device_ = 0;    // the device current at create()
  std::mutex mutex_;  // serialises submit()
  std::unique_ptr<DeviceWindows> windows_;
  uint8_t* region_ = nullptr;          // windows_->window(rank)
  std::vector<uint8_t*> peerRegions_;  // [rank]; this rank's own region at rank_
  std::shared_ptr<Outcome> outcome_;
  DeviceStream ownStream_ = nullptr;
  uint64_t* profile_ = nullptr;           // device memory, COLLIE_DEVICE_PROFILE only
  Scratch scratch_;                       // the schedules' scratch slices
  Scratch premulScratch_;                 // PREMUL_SUM's scaled input
  std::vector<uint8_t*> retiredScratch_;  // freed at destruction (kernels may use them)
  std::vector<UserWindow> userWindows_;   // under mutex_
  uint64_t windowSerial_ = 0;
  uint64_t* counters_;               // device memory: Counters (message counts, sequence number)
  std::shared_ptr<void> lastEvent_;  // the previous collective's completion
  DeviceStream lastStream_ = nullptr;
};

}  // namespace collie
