// Communicator: a group of ranks that run collectives together.
//
// Every collective validates its arguments and returns a Work handle at once, or an
// InvalidArgument Status naming the bad argument (in which case nothing was sent).
// Collectives issued on one communicator run in issue order on its progress thread;
// every rank must issue the same collectives in the same order. Buffers must stay
// valid until the Work completes. send == recv (in place) is allowed where noted; any
// other overlap of send and recv is InvalidArgument naming both ranges.
//
// Thread safety: collectives may be issued from any thread, but the order of issue
// defines the order of execution, so ranks must agree on it. Work handles may be
// waited on from any thread. abort() may be called from any thread at any time.
//
// ABI: Communicator holds only a pointer to its implementation and has no inline
// methods, so collie's internals can change without changing its size or layout.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collie/status.h"
#include "collie/store.h"
#include "collie/types.h"
#include "collie/unique_id.h"

// Defined where Communicator::send/recv take a tag (tagged point-to-point), so that code
// built against several versions of collie can tell.
#define COLLIE_P2P_TAGS 1

namespace collie {

class WorkState;

// The handle of one asynchronous collective. Copies refer to the same operation.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<WorkState> state) : state_(std::move(state)) {}

  // Waits until the collective finished or `timeout` passed (Timeout status; the
  // collective itself goes on). Returns the collective's final status.
  Status wait(std::chrono::milliseconds timeout = std::chrono::milliseconds::max()) const;
  // True once the collective finished (successfully or not).
  bool test() const;
  // OK while running or after success; the error once it failed.
  Status status() const;

 private:
  std::shared_ptr<WorkState> state_;
};

// How to build one communicator. Its configuration is a snapshot taken at creation:
// every knob `collie info` lists at its default, then the environment (COLLIE_* and the
// NCCL_* aliases), then what is set here, so two communicators of one process may be
// configured differently. Later changes to the environment do not reach a communicator.
struct Options {
  // Typed overrides; each one left at its "unset" value (0, "", kAuto) leaves the knob to
  // the environment or its default. A negative value is InvalidArgument.
  std::chrono::milliseconds timeout{0};    // COLLIE_TIMEOUT
  std::string transport;                   // COLLIE_TRANSPORT: "", "shm", "tcp", ...
  Algorithm algorithm = Algorithm::kAuto;  // COLLIE_ALGO
  int nchannels = 0;                       // COLLIE_NCHANNELS
  size_t chunkBytes = 0;                   // COLLIE_CHUNKSIZE
  std::string hostId;                      // COLLIE_HOST_ID; default: this machine's id
  // Any other knob, by name, with the text its environment variable would hold:
  // {{"COLLIE_SHM_CMA_MAX", "0"}, {"COLLIE_BUFFSIZE", "1M"}}. Values are checked like
  // the environment's; an unknown name, a refused value, a process-wide knob (the log
  // level, the launcher's variables: `collie info` marks them) or an entry that
  // disagrees with a typed field above fails creation with InvalidArgument naming it.
  // An empty value puts the knob back to its default whatever the environment says.
  std::map<std::string, std::string> config;
  // Use this store instead of connecting to the one named in the UniqueId (tests
  // with ranks as threads share an in-memory store this way).
  std::shared_ptr<Store> store;
};

// One operation of a point-to-point group (Communicator::sendRecv).
struct PointToPoint {
  bool isSend = true;
  void* buffer = nullptr;  // read for a send, written for a receive
  size_t count = 0;
  DataType dtype = DataType::kUint8;
  int peer = -1;
  // Matched by peer and tag when set, by order when not (see Communicator::send).
  std::optional<int64_t> tag;
};

class Communicator {
 public:
  // Joins the job named by `id` as `rank` of `nranks`. Blocks until every rank joined
  // and all connections are up, or fails with a Status naming the missing rank.
  static Result<std::unique_ptr<Communicator>> create(const UniqueId& id, int rank, int nranks,
                                                      const Options& options = {});

  // Joins a job from launcher variables: collie run (COLLIE_RANK, COLLIE_WORLD_SIZE,
  // COLLIE_UNIQUE_ID), torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or Open
  // MPI (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE) in that order of preference.
  static Result<std::unique_ptr<Communicator>> createFromEnvironment(const Options& options = {});

  // Aborts what is still pending (it completes with Aborted; wait for every Work first
  // for a clean end), closes the connections and joins the progress thread. Peers
  // still running collectives with this rank fail at once, naming it.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  // The transport serving the connection to `peer` ("self" for this rank).
  std::string transportTo(int peer) const;
  // Ranks sharing this rank's host (the launcher's numbering may be block or cyclic):
  // this rank's index among them and how many there are; the number of hosts.
  int localRank() const;
  int localSize() const;
  int hostCount() const;
  // The communicator's topology as text: its hosts with their ranks (when
  // `withHosts`), then this rank's host, local rank and the transport per peer.
  std::string describeTopology(bool withHosts = true) const;

  // Device buffers: when both buffers of a collective are device memory (CUDA, or the
  // emulated runtime with COLLIE_DEVICE_EMULATION=1) the collective runs as kernels on
  // `stream` (a cudaStream_t; null: the communicator's own stream), in order with the
  // work already on it; the Work completes with the stream, so either wait on it or
  // synchronise the stream. Across hosts the data is staged through host memory and
  // the call returns after the host part (docs/cuda.md). The exchanges (all-to-all,
  // all-to-all v, gather, scatter) and point-to-point (sendRecv) move their blocks
  // between the ranks' device windows on one host; the kinds with a count per rank
  // (all-gather v, reduce-scatter v) are staged through host memory on every
  // communicator: they have no device kernels. Host buffers ignore `stream`. Mixing a
  // host and a device buffer is InvalidArgument. On a stream being captured into a CUDA
  // graph the kernels are recorded (the Work is complete at once; the graph's launches
  // run them); a staged collective is then Unsupported.

  // recv[i] = op over ranks of send[i], i < count. In place when send == recv.
  Result<Work> allReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                         void* stream = nullptr);
  // ReduceOp::kPreMulSum takes this rank's factor through the overloads with a
  // ReduceScalar (scalarOf(double, dtype) or scalarFromBytes): the result is the sum
  // over ranks r of scalar_r * send_r, each send multiplied once, then reduced like kSum
  // (docs/decisions/premul-sum.md). Every dtype. The scalar is each rank's own (not
  // compared); a scalar with another op, or kPreMulSum without one, is InvalidArgument.
  // Device buffers: the multiply is a kernel of the device path (docs/cuda.md).
  Result<Work> allReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                         const ReduceScalar& scalar, void* stream = nullptr);
  Result<Work> reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype,
                             ReduceOp op, const ReduceScalar& scalar, void* stream = nullptr);
  Result<Work> reduceScatterV(const void* send, void* recv, const std::vector<size_t>& counts,
                              DataType dtype, ReduceOp op, const ReduceScalar& scalar);
  Result<Work> reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                      int root, const ReduceScalar& scalar, void* stream = nullptr);
  // recv (recvCount elements) = this rank's block of op over ranks of send
  // (recvCount * size() elements). In place when recv == send + rank * recvCount.
  Result<Work> reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype,
                             ReduceOp op, void* stream = nullptr);
  // recv (sendCount * size() elements) = concatenation of every rank's send in rank
  // order. In place when send == recv + rank * sendCount.
  Result<Work> allGather(const void* send, void* recv, size_t sendCount, DataType dtype,
                         void* stream = nullptr);
  // The same with a count per rank (MPI's Allgatherv and Reduce_scatter): counts has
  // size() entries, equal on every rank (ranks that pass other counts fail with
  // Mismatch), and the blocks are packed in rank order (block p starts at the sum of
  // counts[0..p)). Empty blocks are fine. Device buffers are staged through host memory.
  //
  // recv (counts[r] elements, r = this rank) = block r of op over ranks of send (the sum
  // of counts elements), reduced in ring order, the same order as reduceScatter's: rank
  // r + 1's block first, then r + 2, ..., r last (ranks in host order over several
  // hosts). In place when recv == send + offset of block r.
  Result<Work> reduceScatterV(const void* send, void* recv, const std::vector<size_t>& counts,
                              DataType dtype, ReduceOp op);
  // recv (the sum of counts elements) = every rank's send (counts[p] elements from rank
  // p) in rank order. In place when send == recv + offset of block r.
  Result<Work> allGatherV(const void* send, void* recv, const std::vector<size_t>& counts,
                          DataType dtype);
  // recv = root's send on every rank (send is read only on the root).
  Result<Work> broadcast(const void* send, void* recv, size_t count, DataType dtype, int root,
                         void* stream = nullptr);
  // recv on root = op over ranks of send; recv is not touched on other ranks.
  Result<Work> reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                      int root, void* stream = nullptr);
  // The exchanges: blocks move between ranks, nothing is reduced. Device buffers: see
  // above. The algorithm (pairwise or linear for all-to-all) is
  // the tuner's, or COLLIE_ALGO's. Ranks that disagree on count, dtype or root fail with
  // Mismatch naming the field and the rank.
  //
  // recv block p (count elements) = block r of rank p's send, where r is this rank; send
  // and recv hold size() blocks each. In place when send == recv (host memory; each rank
  // chooses for itself; what peers still read is copied first, at most the buffer); any
  // other overlap, and in place on device buffers, is InvalidArgument.
  Result<Work> allToAll(const void* send, void* recv, size_t count, DataType dtype,
                        void* stream = nullptr);
  // All-to-all with a count per peer: sendCounts[p] elements at send + sendOffsets[p]
  // (elements) go to rank p, recvCounts[p] elements from rank p land at recv +
  // recvOffsets[p]. Each vector has size() entries; empty offsets mean packed blocks in
  // rank order. sendCounts[p] must equal recvCounts[r] on rank p (a rank that sends
  // another length fails with Mismatch naming both ranks); receive blocks must not
  // overlap each other. In place when send == recv (host memory; the send blocks are read
  // as they were before any block landed, and bytes in no receive block keep theirs);
  // otherwise the send blocks must not overlap the receive blocks.
  Result<Work> allToAllV(const void* send, const std::vector<size_t>& sendCounts,
                         const std::vector<size_t>& sendOffsets, void* recv,
                         const std::vector<size_t>& recvCounts,
                         const std::vector<size_t>& recvOffsets, DataType dtype);
  // recv on root (count * size() elements) = every rank's send (count elements) in rank
  // order; recv is not touched on other ranks. In place when send == recv + root * count
  // on the root.
  Result<Work> gather(const void* send, void* recv, size_t count, DataType dtype, int root,
                      void* stream = nullptr);
  // recv (count elements) = block r of the root's send (count * size() elements), where r
  // is this rank; send is read only on the root. In place when recv == send + root *
  // count on the root.
  Result<Work> scatter(const void* send, void* recv, size_t count, DataType dtype, int root,
                       void* stream = nullptr);

  // Point-to-point: count elements of dtype to or from `peer`, host buffers only.
  //
  // Untagged, they match by order: the n-th send to a peer meets that peer's n-th
  // receive from this rank (NCCL's semantics). Counts and dtypes must agree (Mismatch
  // naming the peer otherwise).
  //
  // Tagged (the overloads with `tag`, any value), they match by peer and tag: the n-th
  // send to a peer with tag t meets that peer's n-th receive from this rank with tag t,
  // whatever order the receives of different tags are posted in (gloo's and MPI's
  // semantics). A send that arrives before its receive is posted is held by the
  // receiving rank (in memory it allocates, the send's size) and delivered when the
  // receive is posted, so a sender blocked on one tag never waits for the receiver to
  // post its other tags first. A receive whose send never arrives fails when the
  // communicator's timeout passes without progress: Timeout naming the peer and the
  // tag. Each part of a tagged send travels behind a 48-byte envelope: a few
  // microseconds more per message than untagged (docs/decisions/p2p-tags.md).
  //
  // One pair of ranks uses one kind: a rank refuses a tagged operation with a peer it
  // exchanged untagged ones with (and the reverse) with InvalidArgument, for the
  // communicator's lifetime; a peer that mixes them anyway meets Mismatch at the first
  // message of the other kind ("tagged and untagged point-to-point cannot be mixed").
  Result<Work> send(const void* buf, size_t count, DataType dtype, int peer);
  Result<Work> recv(void* buf, size_t count, DataType dtype, int peer);
  Result<Work> send(const void* buf, size_t count, DataType dtype, int peer, int64_t tag);
  Result<Work> recv(void* buf, size_t count, DataType dtype, int peer, int64_t tag);
  Result<Work> barrier();
  // Runs every operation of `ops` at once: all sends and receives are posted before
  // any is waited for, so any set of operations that the peers match (the n-th send to
  // a peer with that peer's n-th receive from this rank, per tag for tagged operations,
  // grouped or not) completes without deadlock whatever the sizes and the order of the
  // list. One Work for all.
  // Device buffers (every rank on one host, with the device path): all of a group's
  // buffers are device memory, untagged; the operations are enqueued on `stream` (null:
  // the communicator's own) and the Work completes with it; sends to this rank pair up
  // in order with receives from it (a device copy). send/recv on device buffers run on
  // the communicator's own stream. Across hosts device buffers are Unsupported.
  Result<Work> sendRecv(const std::vector<PointToPoint>& ops, void* stream = nullptr);

  // Splits this communicator (collective over all its ranks, like MPI_Comm_split):
  // ranks passing the same color >= 0 form a new communicator, ranked by (key, rank
  // here). A negative color joins none and yields a null pointer. The new
  // communicator reuses this one's store and configuration snapshot (the environment is
  // not read again); `options` fields that are set, and its config entries, override
  // them. Blocks until the new communicator is up.
  Result<std::unique_ptr<Communicator>> split(int color, int key, const Options& options = {});

  // True when `ptr` is device memory of the communicator's device runtime (CUDA, or
  // the emulated one); false for host memory and null.
  bool isDeviceBuffer(const void* ptr) const;
  // The CUDA device this communicator's kernels run on: the one current on the calling
  // thread when it was created (as ncclCommInitRank binds); -1 without a device runtime.
  int deviceOrdinal() const;

  // The tuner's predicted time in microseconds of one `kind` of `count` elements of
  // `dtype` on this communicator now (the algorithm it would choose, with the constants
  // every rank agreed on); a send or receive is one message of that size. Runs nothing.
  // InvalidArgument for a dtype or kind the collective would refuse.
  Result<double> predictMicros(CollectiveKind kind, size_t count, DataType dtype) const;

  // The sticky error of this communicator: OK while healthy, the first failure of a
  // collective otherwise (RemoteError naming a dead peer, Timeout, Aborted, ...).
  Status asyncError() const;

  // Registers [ptr, ptr + bytes), which must lie in memory from collie::allocShared(),
  // for single-copy collectives: when every rank of a one-host communicator passes
  // allocShared send and receive buffers to an all-reduce the tuner gives to the direct
  // team algorithm (shm: above COLLIE_SHM_DIRECT_MIN, 2 KiB; within the board's slot
  // from the second such call, docs/decisions/direct-before-board.md), each rank
  // reduces its share straight from all inputs into all outputs. allocShared memory
  // takes that path registered or not (collie keeps a table of its allocations and
  // drops a region from it when it is freed); registering checks the range early.
  // Local: ranks may differ; a collective whose buffers are not allocShared memory on
  // every rank takes the usual path (every rank decides alike from what all ranks
  // publish). InvalidArgument when the range is not allocShared memory.
  Status registerBuffer(const void* ptr, size_t bytes);
  // Drops a registration made on this communicator (NotFound when there is none).
  // Destroying the communicator drops its registrations.
  Status deregisterBuffer(const void* ptr);

  // Registers device memory [ptr, ptr + bytes) as a window that every rank maps (CUDA
  // IPC; ncclCommWindowRegister's semantics). Collective: every rank calls it, in the
  // same order relative to its other collectives, with the same `bytes`; the range lies
  // in one device allocation (cudaMalloc, ncclMemAlloc, a caching allocator's segment).
  // An all-reduce, reduce-scatter or all-gather of 2..8 ranks beyond the board whose
  // input and output lie in windows, at the same offsets on every rank, then runs as
  // one direct kernel (each rank reduces its share straight from every input into every
  // output, docs/cuda.md), and so does an all-to-all whose inputs do (each rank pulls
  // its block of every input); a rank whose buffers lie elsewhere fails that collective
  // with Mismatch on every rank, before any output byte is written. Every rank gets
  // the same outcome: InvalidArgument naming a rank whose range is not device memory,
  // overlaps one of its windows or has another size; Unsupported (nothing registered
  // anywhere) when this communicator has no device windows (ranks on several hosts, no
  // device runtime) or a rank cannot map a peer's range.
  Status registerDeviceWindow(void* ptr, size_t bytes);
  // Closes this rank's window starting at ptr (NotFound when there is none). Local: the
  // caller orders it after the collectives that used the window (their kernels ended);
  // a later collective on it fails with Mismatch until every rank closed it. Destroying
  // the communicator closes its windows.
  Status deregisterDeviceWindow(const void* ptr);

  // Fails every pending and later collective with Aborted and closes every connection
  // (peers then fail at once, naming this rank). Returns promptly even when peers are
  // gone. After a failure, collectives fail with the first error until destruction.
  void abort();

  // Builds a new communicator of the ranks of this one that are not in `excluded`
  // (ranks of this communicator), typically after a failure: survivors keep their
  // order and are renumbered 0..size()-excluded-1. Collective over the survivors:
  // every survivor must call it with the same list (in any order, duplicates ignored),
  // and successive shrinks in the same order. It uses this communicator's store,
  // configuration and job secret under a new key, works whether or not this one failed,
  // and leaves this one untouched (destroy it when done). When this rank hosts the job's store
  // (torchrun/mpirun starts) the new communicator keeps it alive. Fails with
  // InvalidArgument for a bad list (or this rank in it) and with Timeout naming a
  // survivor that did not join before COLLIE_TIMEOUT.
  Result<std::unique_ptr<Communicator>> shrink(const std::vector<int>& excluded);

  // The flight recorder: the last COLLIE_TRACE_DEPTH collectives of this rank (id,
  // sequence, kind, bytes, dtype, op, root, algorithm, state, queued/start/end times in
  // microseconds since the epoch) and the sticky error, as JSON. With COLLIE_TRACE_DUMP
  // set it is also written there on failure and at destruction.
  std::string dumpFlightRecorder() const;

 private:
  // Everything else a communicator holds (core/comm/communicator_impl.h): behind one
  // pointer so that internal changes leave this class, and with it the ABI, unchanged.
  struct Impl;
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace collie
