// The device step handles: plain structs that the engine's device path
// (core/device) fills in and a DeviceRuntime (kernels/cuda: the CUDA runtime and the
// emulation) passes by value to the step kernels of kernels/cuda, whose __device__ code
// reads their fields. One declaration for both sides: this header includes nothing but
// <cstdint>, collie/types.h and core/common/host_device.h, so nvcc compiles it into the kernels as
// it is.
//
// Contract:
//   - Every pointer is a device address the kernel's GPU can load from or store to:
//     its own memory or a peer's mapped through CUDA IPC / P2P (see
//     transports/cuda_ipc). Host code never dereferences them.
//   - Buffers given to one step must not overlap, except that a destination may be
//     exactly a source (in place).
//   - Pointers need not be 16-byte aligned: when all of a step's pointers share the
//     same offset modulo 16 the body moves 16-byte vectors and the unaligned head and
//     tail elements are done one by one; otherwise the step runs element by element
//     (and byte by byte when a pointer is not even aligned to its element size).
//   - Counts are in elements of the step's dtype (bytes for the copy steps).
//   - divisor > 0 on the step that produces final values of kAvg: the reduced value
//     (a sum) is divided by it, as core/kernel/reduce_backend.h specifies.
//   - StepSync orders a step after peers' steps through flags in device memory: wait
//     until *waitFlags[i] >= waitValues[i] for every non-null entry (acquire, system
//     scope; usually the peers' own flags, read over P2P), run, then after every block
//     finished set *postFlags[j] = postValues[j] for every non-null entry (release,
//     system scope; usually this rank's own flags, which its peers poll). Flag values
//     only grow (a per-communicator message count), so flags never need resetting.
//     blockCounter (zero at launch; one per stream, since launches on a stream run one
//     at a time) counts finished blocks; the last block resets it.
//     A wait that outlasts timeoutNs (0 means kDefaultStepTimeoutNs) stores
//     waitErrors[i] (0: kStepErrorTimeout) into *error and abandons the step, so a dead
//     peer ends the collective instead of hanging the GPU; a step that finds *error
//     already set skips itself (without waiting), so the rest of a failed collective
//     drains at once, and a wait in progress rereads *error every few hundred polls
//     and gives up once it is set (the host's abort stores a code there). Grids must
//     be one-dimensional.
//   - Counts on the device: with waitBase[i] set, wait i's target is *waitBase[i] +
//     waitValues[i] (signed; a target <= 0 is no wait); with postBase[j] set, post j
//     stores *postBase[j] + postValues[j]; after the posts the last block adds 1 to
//     every non-null advance[k]. With recvCount (sendCount) set, the step's incoming
//     slot (a copy's src) (its peerOut) is the address of slot 0 and the kernel adds
//     (*recvCount % slots) * slotBytes. Every block reads the counts before the last
//     block advances them, so all blocks agree; a CUDA graph that captured the kernel
//     reads them afresh at every replay.
// Thread safety: values.
#pragma once

#include <cstdint>

#include "collie/types.h"
#include "core/common/host_device.h"

namespace collie {

inline constexpr int kDeviceMaxWaits = 2;  // tree reduce waits for both children
inline constexpr int kDeviceMaxPosts = 2;  // a forwarding step: "sent" and "slot consumed"
inline constexpr int kDeviceMaxCheckPeers = 16;
inline constexpr uint64_t kDefaultStepTimeoutNs = 30ull * 1000 * 1000 * 1000;
inline constexpr int32_t kStepErrorTimeout = 1;

// Device-side ordering of one step (the StepSync rules of the contract above).
struct DeviceStepSync {
  const uint64_t* waitFlags[kDeviceMaxWaits] = {};  // null entries: no wait
  uint64_t waitValues[kDeviceMaxWaits] = {};
  int32_t waitErrors[kDeviceMaxWaits] = {};   // error code per wait; 0: kStepErrorTimeout
  uint64_t* postFlags[kDeviceMaxPosts] = {};  // null entries: no post
  uint64_t postValues[kDeviceMaxPosts] = {};
  // Device-held counts (optional; see "Counts on the device" above).
  const uint64_t* waitBase[kDeviceMaxWaits] = {};
  const uint64_t* postBase[kDeviceMaxPosts] = {};
  uint64_t* advance[kDeviceMaxPosts] = {};
  const uint64_t* recvCount = nullptr;
  const uint64_t* sendCount = nullptr;
  uint64_t slotBytes = 0;
  uint32_t slots = 1;
  uint32_t* blockCounter = nullptr;  // zeroed device memory, one per stream; required
                                     // when a post flag is set
  int32_t* error = nullptr;          // mapped memory; required when a wait flag is set
  uint64_t timeoutNs = 0;
  // Optional, device memory: [0] += nanoseconds block 0 waited for the flags,
  // [1] += 1 per kernel (COLLIE_DEVICE_PROFILE).
  unsigned long long* profile = nullptr;
};

// One ring reduce-scatter step (RecvReduceSend / RecvReduceCopy of core/plan/schedule.h
// with the peer's data read in place): r = op(local, incoming), count elements of dtype;
// write r to `out` (this rank's buffer; null on a forwarding step) and to `peerOut` (the
// next rank's receive slot; null on the final step). dtype and op choose the kernel.
struct DeviceReduceStep {
  const void* local = nullptr;
  const void* incoming = nullptr;
  void* out = nullptr;
  void* peerOut = nullptr;
  uint64_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int32_t divisor = 0;
  DeviceStepSync sync;
};

// One ring all-gather step (RecvCopySend / Copy): copy `bytes` from src to `out`
// and/or `peerOut` (at least one). src == out is allowed (only the forward happens in
// effect).
struct DeviceCopyStep {
  const void* src = nullptr;
  void* out = nullptr;
  void* peerOut = nullptr;
  uint64_t bytes = 0;
  DeviceStepSync sync;
};

// PREMUL_SUM's multiply: dst[i] = ProdOp(src[i], factor) for i < count elements of dtype
// (half types in float with one rounding, integers wrapping: the host backend's
// `scale`). `factor` holds one element of dtype in its low bytes (little-endian), or,
// with factorAt set, the element at factorAt (device memory) read when it runs. dst may
// be src.
struct DeviceScaleStep {
  const void* src = nullptr;
  void* dst = nullptr;
  uint64_t count = 0;
  DataType dtype = DataType::kFloat32;
  uint64_t factor = 0;
  const void* factorAt = nullptr;
};

// The fingerprint check that opens a device collective (one block, thread 0): store
// `fingerprint` to *ownSlot and then `posted` to *ownPosted (release; skipped when
// ownSlot is null: a later launch of the same check, for more peers); then for each
// peer i wait until *peerPosted[i] >= posted and compare *peerSlot[i] with
// `fingerprint`. A difference stores the peer's value into *peerFingerprint (and this
// rank's into *ownFingerprint when set) and then
// mismatchBase + peerRank[i] into *error; a wait longer than timeoutNs stores
// timeoutBase + peerRank[i]. Nothing happens when *error is already set. The steps
// after it find the error word set and skip, so no output byte is written.
struct DeviceFingerprintCheck {
  uint64_t* ownSlot = nullptr;
  uint64_t* ownPosted = nullptr;
  const uint64_t* peerSlot[kDeviceMaxCheckPeers] = {};
  const uint64_t* peerPosted[kDeviceMaxCheckPeers] = {};
  int32_t peerRank[kDeviceMaxCheckPeers] = {};
  int32_t npeers = 0;
  uint64_t fingerprint = 0;
  uint64_t posted = 0;
  int32_t* error = nullptr;             // mapped memory
  uint64_t* peerFingerprint = nullptr;  // mapped memory
  uint64_t* ownFingerprint = nullptr;   // mapped; optional: this rank's side of a mismatch
  uint64_t timeoutNs = 0;
  int32_t timeoutBase = kStepErrorTimeout;
  int32_t mismatchBase = 0;
  // Optional, device memory: the collectives checked so far. When set, s = *sequence
  // picks slot s % 2 of ownSlot and of every peerSlot (each the address of slot 0), the
  // posted value is s + posted and the fingerprint gets (s & 0xFFFFF) << sequenceShift;
  // with advanceSequence the launch adds 1 to *sequence at its end.
  uint64_t* sequence = nullptr;
  bool advanceSequence = false;
  uint32_t sequenceShift = 0;
};

// The board (one kernel per collective, kernels/cuda/board_kernel.cuh): every rank
// copies its input onto its board (a slot of its device window that every peer maps),
// publishes, and computes its output from every rank's board, folding in rank order
// (so all ranks get the same bits), in one launch that also runs the fingerprint check.
//   - all-reduce: out[i] = op(board_0[i], ..., board_{n-1}[i]), i < count;
//   - reduce-scatter: out[i] = op over r of board_r[rank * count + i] (the board holds
//     the whole input, nranks * count elements);
//   - all-gather: out[r * count + i] = board_r[i] (bytes: dtype kUint8, count in bytes).
// Block b owns elements [b * perBlock, (b + 1) * perBlock) of every part and works
// alone: it copies its part of the input, publishes it with the fingerprint (block 0
// through the check's own flags, so that a rank running the check kernel instead meets
// it; block b > 0 through flags of its own), waits for every peer's block b, compares
// the fingerprints, and writes its part of the output. Blocks never wait for each
// other, and no output byte is written before the check of that block passed. The slot
// is s % 2 for the collective with sequence number s (*check.sequence); a rank reaches
// collective s only after its check of s - 1 saw every peer start s - 1, that is, after
// every peer finished reading slot s % 2 in collective s - 2: no wait for a free slot.
// The last block to finish advances the sequence number (blockCounter as in stepPost).
// Every rank must launch the same blocks and perBlock (they follow from the collective).
inline constexpr int kDeviceMaxBoardRanks = 8;
inline constexpr int kDeviceMaxBoardBlocks = 16;
inline constexpr int kDeviceBoardFlagWords = 3;  // per block b > 0: posted, fingerprint x 2

// kAllToAll: the direct kernel only (the board and the ring program refuse it).
enum class DeviceBoardKind : int32_t {
  kAllReduce = 0,
  kReduceScatter = 1,
  kAllGather = 2,
  kAllToAll = 3
};

struct DeviceBoardStep {
  DeviceBoardKind kind = DeviceBoardKind::kAllReduce;
  const void* input = nullptr;
  void* output = nullptr;
  uint64_t count = 0;  // elements of dtype per part (all-gather: bytes)
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int32_t divisor = 0;  // kAvg: nranks
  int32_t rank = 0;
  int32_t nranks = 0;                       // 2..kDeviceMaxBoardRanks
  void* boards[kDeviceMaxBoardRanks] = {};  // slot 0 of every rank's board; [rank] is this rank's
  uint64_t slotBytes = 0;                   // from slot 0 to slot 1; holds the whole input
  uint32_t blocks = 1;                      // the grid, 1..kDeviceMaxBoardBlocks
  uint64_t perBlock = 0;                    // elements per block, a multiple of 16
  // Blocks 1..: kDeviceBoardFlagWords words each, this rank's and each check peer's
  // (peerBlockFlags[i] belongs to check.peerRank[i]).
  uint64_t* ownBlockFlags = nullptr;
  const uint64_t* peerBlockFlags[kDeviceMaxCheckPeers] = {};
  uint32_t* blockCounter = nullptr;  // zero at launch
  DeviceFingerprintCheck check;      // block 0's; sequence required, one launch for all peers
  // Optional, as DeviceStepSync::profile: block 0's wait for its peers, and 1 per kernel.
  unsigned long long* profile = nullptr;
};

// The direct kernel (one kernel per collective on registered device windows,
// kernels/cuda/direct_kernel.cuh): the buffers peers touch (an all-reduce's input and
// output, a reduce-scatter's and an all-to-all's input, an all-gather's output) lie in device
// windows that every rank registered (Communicator::registerDeviceWindow) and mapped, at the same
// offsets, so a rank loads its peers' inputs and stores into their outputs itself: no
// FIFO, no staging, each byte read once and written once (the memory-traffic bound; more
// than 4 ranks add local traffic: the passes re-read and re-write the accumulator).
//   - all-reduce (two-shot): rank r owns share r of the elements (shares of shareCount
//     elements, a multiple of 16; the last ones shorter or empty) and stores
//     op over p in fold order of inputs[p][share r] into outputs[q][share r] for every q;
//   - reduce-scatter: outputs[r][i] = op over p in fold order of inputs[p][r * count + i]
//     (only outputs[rank] is used);
//   - fold order: rank order up to 4 ranks (one pass reads every input); beyond, from
//     rank r on (r, r + 1, .., n - 1, 0, .., r - 1), as the kernel folds in passes into
//     outputs[r] and in place must consume its own input first;
//   - all-gather (bytes: dtype kUint8, count in bytes): inputs[r] goes to outputs[q][r *
//     count, (r + 1) * count) for every q (only inputs[rank] is used);
//   - all-to-all (bytes, count in bytes per block; never in place: a peer may still read
//     the block this rank would overwrite): outputs[r][p * count + i] =
//     inputs[p][r * count + i], rank r pulling from every input (only outputs[rank] is
//     used), from its own block on (r, r + 1, .., r - 1).
// Each element is folded by one rank only, so all ranks get the same bits. Block b of
// every rank handles part b of its share (perBlock elements, a multiple of 16) and
// synchronises only with block b of its peers:
//   - entry: the fingerprint check with the same block of every peer (block 0 on the
//     check's own flags, so that a peer running the check kernel instead meets it; block
//     b > 0 on flags of its own: ownBlockFlags + b * kDeviceDirectFlagWords, words
//     posted, fingerprint slot 0, slot 1). When it passes, every peer's stream has
//     reached this collective: its input is ready and nothing else uses its output.
//   - exit: once its stores are fenced, done (word 3 of its flags, for every block)
//     = s + 1, and wait until every peer's done >= s + 1: when a rank's kernel ends, no
//     peer still reads its input or writes its output.
// Timeouts and the error word as for the board; no output byte is written before the
// entry check passed. The last block to finish advances the sequence number. Every rank
// must launch the same blocks, perBlock and shareCount (they follow from the collective).
inline constexpr int kDeviceMaxDirectRanks = 8;  // as the board: a node's GPUs
inline constexpr int kDeviceMaxDirectBlocks = 64;
inline constexpr int kDeviceDirectFlagWords = 4;  // posted, fingerprint x 2, done

// The buffers of a direct step that peers touch, so that they must lie in windows: the
// inputs of every kind but all-gather, the outputs of all-reduce and all-gather.
constexpr bool directPeersReadInputs(DeviceBoardKind kind) {
  return kind != DeviceBoardKind::kAllGather;
}
constexpr bool directPeersWriteOutputs(DeviceBoardKind kind) {
  return kind == DeviceBoardKind::kAllReduce || kind == DeviceBoardKind::kAllGather;
}

struct DeviceDirectStep {
  DeviceBoardKind kind = DeviceBoardKind::kAllReduce;
  const void* inputs[kDeviceMaxDirectRanks] = {};  // every rank's, as mapped here
  void* outputs[kDeviceMaxDirectRanks] = {};
  uint64_t count = 0;       // elements (all-gather: bytes) per rank part, as for the board
  uint64_t shareCount = 0;  // all-reduce: elements per share, a multiple of 16
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int32_t divisor = 0;  // kAvg: nranks
  int32_t rank = 0;
  int32_t nranks = 0;                 // 2..kDeviceMaxDirectRanks
  uint32_t blocks = 1;                // the grid, 1..kDeviceMaxDirectBlocks
  uint64_t perBlock = 0;              // elements per block, a multiple of 16
  uint64_t* ownBlockFlags = nullptr;  // kDeviceDirectFlagWords per block
  const uint64_t* peerBlockFlags[kDeviceMaxCheckPeers] = {};  // [i]: check.peerRank[i]'s
  uint32_t* blockCounter = nullptr;                           // zero at launch
  DeviceFingerprintCheck check;  // block 0's; sequence required, one launch for all peers
  // Optional, as DeviceStepSync::profile: block 0's waits for its peers, and 1 per kernel.
  unsigned long long* profile = nullptr;
};

// The ring program (one kernel per collective, kernels/cuda/ring_program_kernel.cuh):
// the steps of one rank's schedule whose messages all go to the next rank and come from
// the previous one (ring all-reduce, reduce-scatter and all-gather; chain broadcast and
// reduce), planned without chunks, run by one launch. Block b of every rank moves the
// same bytes of every step: a step's bytes are cut into `blocks` parts (a multiple of
// kDeviceRingSplitBytes each, the last one shorter or empty) and block b's part into
// pieces of sliceBytes. Block b runs "for each piece index i, for each step in order,
// move piece i of the step" (a step with fewer pieces skips the index), so a block
// issues exactly the messages, in the order, that the schedule chunked by sliceBytes
// would. Messages travel through a FIFO per block: kDeviceRingSlots slots of
// sliceBytes in the next rank's window, with two counts per block in each rank's
// window: sent[b] (messages this rank's block b wrote to the next rank) and consumed[b]
// (messages it read from the previous rank). They only grow over the communicator's
// life, and a block reads its own two counts when it starts, so nothing in the launch
// depends on what ran before it (a captured launch replays). Sending message m waits
// for next.consumed[b] >= m + 1 - kDeviceRingSlots (its slot is free), writes slot
// m % kDeviceRingSlots, fences and posts sent[b] = m + 1; receiving message m waits
// for prev.sent[b] >= m + 1, reads the slot and posts consumed[b] = m + 1. Blocks never
// wait for each other. A wait longer than timeoutNs stores timeoutBase + the peer into
// *error; a block that finds *error set stops (the check kernel launched before it
// stores a mismatch there, so a mismatched collective writes no output byte).
// Contract on the steps (the host checks it when it builds the program): a step's bytes
// are a multiple of the element size; two steps that touch overlapping bytes, one of
// them writing, touch exactly the same bytes, so "piece i of every step" never reads a
// byte that another piece index writes. A null dst on a step that receives and reduces
// or copies drops the local write (the value only travels on).
inline constexpr int kDeviceMaxRingSteps = 32;  // 2n - 1 steps of a ring all-reduce, n <= 16
inline constexpr int kDeviceMaxRingBlocks = 16;
inline constexpr int kDeviceRingSlots = 4;             // FIFO depth per block
inline constexpr uint64_t kDeviceRingSplitBytes = 64;  // blocks' parts are multiples of this
inline constexpr int kDeviceRingFlagStride = 16;       // words between two blocks' counts

enum class DeviceRingOp : uint8_t {
  kSend = 0,            // src -> next
  kRecv = 1,            // prev -> dst
  kRecvReduceSend = 2,  // op(src, prev) -> dst (when set) and next
  kRecvReduceCopy = 3,  // op(src, prev) -> dst
  kRecvCopySend = 4,    // prev -> dst (when set) and next
  kCopy = 5,            // src -> dst
};

// What a step does with the FIFOs and its own source.
COLLIE_HOST_DEVICE constexpr bool ringStepReceives(DeviceRingOp op) {
  return op == DeviceRingOp::kRecv || op == DeviceRingOp::kRecvReduceSend ||
         op == DeviceRingOp::kRecvReduceCopy || op == DeviceRingOp::kRecvCopySend;
}
COLLIE_HOST_DEVICE constexpr bool ringStepSends(DeviceRingOp op) {
  return op == DeviceRingOp::kSend || op == DeviceRingOp::kRecvReduceSend ||
         op == DeviceRingOp::kRecvCopySend;
}
COLLIE_HOST_DEVICE constexpr bool ringStepReadsSrc(DeviceRingOp op) {
  return op == DeviceRingOp::kSend || op == DeviceRingOp::kCopy ||
         op == DeviceRingOp::kRecvReduceSend || op == DeviceRingOp::kRecvReduceCopy;
}

struct DeviceRingStep {
  const void* src = nullptr;
  void* dst = nullptr;
  uint64_t bytes = 0;
  int32_t divisor = 0;  // > 0: the step's result is divided by it (kAvg's last step)
  DeviceRingOp op = DeviceRingOp::kCopy;
  uint8_t incomingFirst = 0;  // op(incoming, src) instead of op(src, incoming)
};

struct DeviceRingProgram {
  DeviceRingStep steps[kDeviceMaxRingSteps];
  int32_t nsteps = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  uint32_t blocks = 1;      // the grid, 1..kDeviceMaxRingBlocks; the same on every rank
  uint64_t sliceBytes = 0;  // one FIFO slot; a multiple of kDeviceRingSplitBytes
  // The FIFO this rank writes (slot k of block b at sendFifo + (b * kDeviceRingSlots +
  // k) * sliceBytes: in the next rank's window) and the one it reads (in its own).
  void* sendFifo = nullptr;
  const void* recvFifo = nullptr;
  // Counts, kDeviceRingFlagStride words apart per block: this rank's (sent, consumed),
  // the next rank's consumed and the previous rank's sent.
  uint64_t* sent = nullptr;
  uint64_t* consumed = nullptr;
  const uint64_t* nextConsumed = nullptr;
  const uint64_t* prevSent = nullptr;
  int32_t nextRank = -1;
  int32_t prevRank = -1;
  int32_t* error = nullptr;                 // mapped memory; required
  uint64_t timeoutNs = 0;                   // 0: kDefaultStepTimeoutNs
  int32_t timeoutBase = kStepErrorTimeout;  // the code of a wait for rank p: timeoutBase + p
  // Optional, as DeviceStepSync::profile: block 0's waits for its peers, and 1 per kernel.
  unsigned long long* profile = nullptr;
};

}  // namespace collie
