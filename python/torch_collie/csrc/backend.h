// CollieBackend: the c10d::Backend that torch.distributed uses for
// init_process_group("collie") (registered by torch_collie/__init__.py).
//
// Each backend owns one collie::Communicator over the group's ranks, created from a
// collie UniqueId that group rank 0 publishes through the c10d store torch hands to
// the backend (rank 0 also runs the collie store server named in the id). An explicit
// init_process_group(timeout=) becomes the communicator's deadline (COLLIE_TIMEOUT
// otherwise). Every call validates its tensors (CPU, dtype and op, and the checks
// gloo makes, in its words: "invalid root rank", "requires non-empty tensor list",
// ...), makes contiguous copies where needed, issues collie operations and returns a
// CollieWork at once; the work completes on the backend's CompletionQueue thread, or
// before the call returns when collie already ran it on the caller's thread. Bad
// arguments raise RuntimeError before anything is issued; failures of communication
// fail the Work with DistBackendError naming the rank.
//
// The contract is ProcessGroupGloo's (pytorch's test_c10d_gloo.py, CPU tests):
//   - lists of several tensors per call: all_reduce reduces over every tensor of every
//     rank into each; broadcast sends the root's rootTensor to every tensor; allgather
//     of k inputs gathers all ranks' inputs into each of k lists (rank-major);
//   - all_reduce of sparse COO tensors (SUM: all-gather of indices and values, then
//     coalesce, as gloo does for DDP's sparse gradients);
//   - reduce_scatter with parts of different sizes: collie's reduceScatterV;
//   - gather, scatter, all_to_all(_single) with uneven splits: collie's gather, scatter
//     and all-to-all (with a count per peer), the engine's exchange schedules;
//     all_to_all_single without splits: collie's all-to-all of one count;
//   - send/recv; recv from any source (senders announce their messages in the c10d
//     store, the receiver picks a rank with an unreceived announcement); batches of
//     send/recv (batch_isend_irecv) are coalesced into one sendRecv group;
//   - sequence numbers per group (collectives only), profiler events named
//     "collie:<collective>", monitored_barrier (rank 0 names the ranks that did not
//     arrive), barrier with a timeout (through the store: names the ranks missing),
//     per-call timeouts of the others (the call fails, the communicator is aborted;
//     collie's own deadline still bounds what it runs inline on the calling thread);
//   - dtypes: reductions over float32/64, float16, bfloat16, int8/uint8, int32,
//     int64, uint32, uint64, bool (as uint8; SUM is OR, PRODUCT is AND) and complex
//     (as pairs of reals, for SUM/AVG/PREMUL_SUM); data movement takes any dtype;
//   - ops: SUM, AVG, PRODUCT, MIN, MAX, BAND/BOR/BXOR (integers and bool), PREMUL_SUM
//     (multiplied in the backend, then summed, as collie's NCCL API does).
// CUDA tensors (backend_device.cc; the backend is registered for "cpu" and "cuda", so
// one backend serves "cpu:collie,cuda:collie"): all_reduce, broadcast, reduce,
// all_gather (one input), all_gather_into_tensor, reduce_scatter (one output),
// reduce_scatter_tensor, all_to_all_single (with and without splits), send, recv and
// their batches run on collie's device path, enqueued on the current stream of the
// tensors' device, which must be the communicator's device (the one current when the
// group was made, as ncclCommInitRank binds); wait() makes the current stream wait, as
// ProcessGroupNCCL's does. Copies in and out (strided tensors, lists) are enqueued on
// that stream too. The other calls take CPU tensors only, and say so.
// An all-reduce of an emptyShared tensor (shared_tensor.h) registers it for the call,
// one of a tensor in the shared CPU allocator's pool (shared_allocator.h) registers
// its block once: zero-copy over shm when every rank's buffer is registered.
//
// Thread safety: as for collie::Communicator: calls may come from any thread, and
// their issue order is the execution order, which all ranks must agree on. Coalescing
// (startCoalescing .. endCoalescing) belongs to the thread that started it.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <unordered_set>

#include "backend_hooks.h"
#include "collie/communicator.h"
#include "collie/store.h"
#include "p2p_announcer.h"
#include "shared_allocator.h"
#include "shared_tensor.h"
#include "work.h"

namespace torch_collie {

class CollieBackend : public c10d::Backend {
 public:
  // Rendezvous over `store` and connect, with `config` (knob name -> value, the
  // group's pg_options) as the communicator's Options::config; throws
  // c10::DistBackendError on failure (a bad or unknown knob included, naming it).
  static c10::intrusive_ptr<c10d::Backend> create(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int rank, int size,
                                                  std::chrono::duration<float> timeout,
                                                  const std::map<std::string, std::string>& config);

  CollieBackend(int rank, int size, c10::intrusive_ptr<c10d::Store> store,
                std::chrono::milliseconds timeout, std::unique_ptr<collie::StoreServer> server,
                std::unique_ptr<collie::Communicator> comm);
  ~CollieBackend() override;

  const std::string getBackendName() const override { return "collie"; }
  c10::intrusive_ptr<Options> getBackendOptions() override { return options_; }
  // The group's default timeout from now on (what gloo's does): reported by
  // getBackendOptions, and the deadline of every later call that has none of its own
  // (it fails when it passes and the communicator is aborted, as an opts.timeout
  // does). Not for calls already issued; call it between calls, as with gloo.
  void setTimeout(std::chrono::milliseconds timeout) override;
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  uint64_t getSequenceNumberForGroup() override;
  void setSequenceNumberForGroup() override {}  // numbers start at 0 on every rank

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;

  void abort() override;
  void shutdown() override;

  // torch's completion and abort hooks (backend_hooks.h): its flight recorder retires an
  // entry when collie finished the call, and dumps its trace when a call failed or timed
  // out. An explicit abort() runs no abort hook itself; the calls it ends fail (Aborted),
  // and those run them as any failed call does.
  bool supportsCompletionHooks() const override { return true; }
  void registerCompletionHook(int64_t id, c10d::CompletionHook hook) override {
    hooks_.registerCompletion(id, std::move(hook));
  }
  void unregisterCompletionHook(int64_t id) override { hooks_.unregisterCompletion(id); }
  bool supportsAbortHooks() const override { return true; }
  void registerAbortHook(int64_t id, c10d::AbortHook hook) override {
    hooks_.registerAbort(id, std::move(hook));
  }
  void unregisterAbortHook(int64_t id) override { hooks_.unregisterAbort(id); }
  // The kind of the first failure that broke the communicator (backend_hooks.h): TIMEOUT,
  // REMOTE_ERROR or COMM_ERROR, as ProcessGroupNCCL reports; SUCCESS while none did.
  c10d::ErrorType getError() override { return hooks_.error(); }

  // An all-reduce of one dense CPU tensor in place, run now: the collie operation is
  // issued and waited for on the calling thread, with no Work, Future or completion
  // thread (torch_collie.all_reduce_, for latency-bound callers such as tensor-parallel
  // inference). Ordered with the group's other calls by issue order, counted in its
  // sequence number. Throws as the other calls: bad arguments before anything is issued,
  // DistBackendError when the collective fails or passes the group's timeout.
  void allreduceNow(at::Tensor& tensor, const c10d::ReduceOp& op);

  // All-reduces this process issued with registered buffers (pool blocks or
  // empty_shared tensors): offered to the zero-copy path, which collie takes when every
  // rank of a one-host group offers (and above the one-shot board's size).
  static uint64_t registeredAllreduces();

 private:
  // One call to submit: its profiler event and outputs, the collie operations behind
  // it and what to do when they succeeded.
  struct Call {
    // `outputs` as lists, `{tensors}` or `{{out}}` (no allocation up to the lists' inline
    // sizes), or a vector of lists.
    Call(c10d::OpType type, const char* title, const char* what, c10::ArrayRef<at::Tensor> inputs,
         std::initializer_list<c10::ArrayRef<at::Tensor>> outputs,
         std::chrono::milliseconds timeout = c10d::kUnsetTimeout)
        : type(type),
          title(title),
          what(what),
          inputs(inputs.begin(), inputs.end()),
          timeout(timeout) {
      for (c10::ArrayRef<at::Tensor> list : outputs)
        this->outputs.emplace_back(list.begin(), list.end());
    }
    Call(c10d::OpType type, const char* title, const char* what, c10::ArrayRef<at::Tensor> inputs,
         const std::vector<std::vector<at::Tensor>>& outputs,
         std::chrono::milliseconds timeout = c10d::kUnsetTimeout)
        : Call(type, title, what, inputs, {}, timeout) {
      for (const auto& list : outputs) this->outputs.emplace_back(list.begin(), list.end());
    }

    c10d::OpType type = c10d::OpType::UNKNOWN;
    const char* title = nullptr;  // profiler event, a literal: "collie:all_reduce"
    const char* what = nullptr;   // for messages, a literal: "allreduce"
    TensorList inputs;
    TensorLists outputs;
    OpList ops;
    std::function<void()> onSuccess;
    TensorList keepAlive;
    std::function<void()> cleanup;
    std::chrono::milliseconds timeout = c10d::kUnsetTimeout;
    bool collective = true;  // counted in the group's sequence number
    std::vector<c10::intrusive_ptr<CollieWork>> followers;  // complete with this call
    // A call on CUDA tensors: its device and the event after its work on the stream.
    std::vector<c10::Device> devices;
    std::shared_ptr<c10::Event> deviceEvent;
    // Made before the call's operations are issued: its work's duration starts here.
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  };
  // The stream a call on CUDA tensors is enqueued on: the current stream of their device.
  struct DeviceStream {
    c10::Stream stream;
    void* handle = nullptr;  // its cudaStream_t
  };
  // The tag of the sparse all-reduce's exchange: outside the 32-bit tags torch gives.
  static constexpr int64_t kSparseExchangeTag = int64_t{1} << 40;
  // A send or receive held back until endCoalescing.
  struct Deferred {
    collie::PointToPoint op;
    c10::intrusive_ptr<CollieWork> work;
    at::Tensor buffer;
    std::function<void()> copyOut;  // receives into non-contiguous tensors
    bool onDevice = false;          // CUDA tensors: untagged, on the device path
  };

  c10::intrusive_ptr<c10d::Work> submit(Call call);

  // all_gather_into_tensor and reduce_scatter_tensor, one pair or coalesced (CPU).
  c10::intrusive_ptr<c10d::Work> allgatherIntoTensors(c10::ArrayRef<at::Tensor> outputs,
                                                      c10::ArrayRef<at::Tensor> inputs,
                                                      const c10d::AllgatherOptions& opts);
  c10::intrusive_ptr<c10d::Work> reduceScatterTensors(c10::ArrayRef<at::Tensor> outputs,
                                                      c10::ArrayRef<at::Tensor> inputs,
                                                      const c10d::ReduceScatterOptions& opts);

  // CUDA tensors (backend_device.cc). deviceStream checks that every tensor is a dense
  // CUDA tensor on the communicator's device that collie can reach, and returns that
  // device's current stream. submitDevice records the call's event on it, then submits.
  DeviceStream deviceStream(const std::vector<at::Tensor>& tensors, const char* what);
  c10::intrusive_ptr<c10d::Work> submitDevice(Call call, const DeviceStream& ds);
  c10::intrusive_ptr<c10d::Work> allreduceDevice(at::Tensor& tensor,
                                                 const c10d::AllreduceOptions& opts);
  c10::intrusive_ptr<c10d::Work> reduceDevice(at::Tensor& tensor, const c10d::ReduceOptions& opts);
  c10::intrusive_ptr<c10d::Work> broadcastDevice(at::Tensor& tensor,
                                                 const c10d::BroadcastOptions& opts);
  // all_gather_into_tensor (`list` empty) and all_gather into a list of tensors.
  c10::intrusive_ptr<c10d::Work> allgatherDevice(at::Tensor& output, std::vector<at::Tensor> list,
                                                 at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts);
  // reduce_scatter_tensor (`list` empty) and reduce_scatter from a list of tensors.
  c10::intrusive_ptr<c10d::Work> reduceScatterDevice(at::Tensor& output,
                                                     std::vector<at::Tensor> list,
                                                     at::Tensor& input,
                                                     const c10d::ReduceScatterOptions& opts);
  // in and out: the dense tensors the parts are views of (out may be output itself);
  // no parts: equal shares (the all-to-all of one count).
  c10::intrusive_ptr<c10d::Work> alltoallDevice(at::Tensor& output, at::Tensor& in, at::Tensor& out,
                                                const std::vector<at::Tensor>& sendParts,
                                                const std::vector<at::Tensor>& recvParts,
                                                const c10d::AllToAllOptions& opts);
  c10::intrusive_ptr<c10d::Work> pointToPointDevice(std::vector<at::Tensor>& tensors, int peer,
                                                    bool isSend, const char* title);
  // endCoalescing of a batch of device sends and receives.
  c10::intrusive_ptr<c10d::Work> endCoalescingDevice(std::vector<Deferred> batch);
  // Issues `ops` as one group (Communicator::sendRecv); none for an empty list.
  std::vector<collie::Work> sendRecv(const std::vector<collie::PointToPoint>& ops,
                                     const char* what);
  // Issues an all-to-all of the parts: sendParts[p] (a view into the contiguous `in`) to
  // rank p, recvParts[p] (a view into the contiguous `out`) from it, as one
  // Communicator::allToAllV of bytes (the engine's all-to-all schedule).
  std::vector<collie::Work> exchange(const at::Tensor& in, const std::vector<at::Tensor>& sendParts,
                                     const at::Tensor& out,
                                     const std::vector<at::Tensor>& recvParts, const char* what);
  c10::intrusive_ptr<c10d::Work> allreduceDense(std::vector<at::Tensor>& tensors,
                                                const c10d::AllreduceOptions& opts);
  c10::intrusive_ptr<c10d::Work> allreduceSparse(std::vector<at::Tensor>& tensors,
                                                 const c10d::AllreduceOptions& opts);
  // A send or receive matched by (peer, tag) (collie's tagged point-to-point).
  c10::intrusive_ptr<c10d::Work> pointToPoint(std::vector<at::Tensor>& tensors, int peer, int tag,
                                              bool isSend, const char* title);
  // Registers the shared-allocator pool block holding `buf` with the communicator,
  // once per block; false when `buf` is not pool memory or registration failed.
  bool registerPoolBlock(const at::Tensor& buf);

  const c10::intrusive_ptr<c10d::Store> store_;  // the group's (prefixed) c10d store
  c10::intrusive_ptr<Options> options_;
  std::unique_ptr<collie::StoreServer> server_;  // group rank 0 only
  // Shared so that a registration's cleanup can tell whether it still exists.
  std::shared_ptr<collie::Communicator> comm_;
  BackendHooks hooks_;  // before queue_, which refers to it
  CompletionQueue queue_;
  P2pAnnouncer announcer_;
  std::mutex registeredMutex_;
  std::unordered_set<uint64_t> registeredBlocks_;  // pool block ids
  std::atomic<uint64_t> sequence_{0};              // collectives issued on this group
  std::atomic<int64_t> defaultCallTimeoutMs_{0};   // set by setTimeout; 0: none
  uint64_t monitoredRounds_ = 0;                   // monitored barriers entered
  std::atomic<uint64_t> timedBarriers_{0};         // barriers with a timeout issued
  bool coalescing_ = false;
  std::vector<Deferred> deferred_;
};

}  // namespace torch_collie
