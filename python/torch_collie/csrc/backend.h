// CollieBackend: the c10d::Backend that torch.distributed uses for
// init_process_group("collie") (registered by torch_collie/__init__.py).
//
// Each backend owns one collie::Communicator over the group's ranks, created from a
// collie UniqueId that group rank 0 publishes through the c10d store torch hands to
// the backend (rank 0 also runs the collie store server named in the id). Every call
// validates its tensors (CPU, supported dtype and op), makes contiguous copies where
// needed, issues collie operations and returns a CollieWork at once; the work
// completes on the backend's CompletionQueue thread, or before the call returns when
// collie already ran it on the caller's thread. An all-reduce of an emptyShared tensor
// (shared_tensor.h) registers it for the call, one of a tensor in the shared CPU
// allocator's pool (shared_allocator.h) registers its block once: zero-copy over shm
// when every rank's buffer is registered (collie agrees on that across ranks).
//
// Supported: allreduce (SUM, AVG, PRODUCT, MIN, MAX), allreduce_coalesced,
// broadcast, allgather, _allgather_base, reduce_scatter, _reduce_scatter_base,
// reduce, barrier, send, recv, alltoall, alltoall_base. Data movement (broadcast,
// gathers, send/recv, alltoall) accepts every dtype (moved as bytes); reductions
// accept float32/64, float16, bfloat16, int8, uint8, int32, int64.
//
// Thread safety: as for collie::Communicator: calls may come from any thread, and
// their issue order is the execution order, which all ranks must agree on.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <unordered_set>

#include "collie/communicator.h"
#include "collie/store.h"
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

  CollieBackend(int rank, int size, std::unique_ptr<collie::StoreServer> server,
                std::unique_ptr<collie::Communicator> comm);
  ~CollieBackend() override;

  const std::string getBackendName() const override { return "collie"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
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
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
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
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  void abort() override;
  void shutdown() override;

  // All-reduces this process issued with registered buffers (pool blocks or
  // empty_shared tensors): offered to the zero-copy path, which collie takes when every
  // rank of a one-host group offers (and above the one-shot board's size).
  static uint64_t registeredAllreduces();

 private:
  // Issues send/recv pairs for an all-to-all: sendParts[p] goes to rank p and
  // recvParts[p] comes from it (byte views; the own part is copied here).
  // Registers the shared-allocator pool block holding `buf` with the communicator,
  // once per block; false when `buf` is not pool memory or registration failed.
  bool registerPoolBlock(const at::Tensor& buf);
  std::vector<collie::Work> exchange(const std::vector<at::Tensor>& sendParts,
                                     const std::vector<at::Tensor>& recvParts);
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* what,
                                         std::vector<at::Tensor> outputs,
                                         std::vector<collie::Work> ops,
                                         std::function<void()> onSuccess,
                                         std::vector<at::Tensor> keepAlive,
                                         std::function<void()> cleanup = {});

  std::unique_ptr<collie::StoreServer> server_;  // group rank 0 only
  // Shared so that a registration's cleanup can tell whether it still exists.
  std::shared_ptr<collie::Communicator> comm_;
  CompletionQueue queue_;
  std::mutex registeredMutex_;
  std::unordered_set<uint64_t> registeredBlocks_;  // pool block ids
};

}  // namespace torch_collie
