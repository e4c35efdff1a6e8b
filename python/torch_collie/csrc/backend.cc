#include "backend.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <optional>

namespace torch_collie {

namespace {

constexpr const char* kUniqueIdKey = "collie_unique_id";
// How long destroy_process_group waits for calls still in flight before aborting.
constexpr std::chrono::seconds kDrainTimeout{30};

std::atomic<uint64_t> gRegisteredAllreduces{0};

[[noreturn]] void fail(const std::string& message) { C10_THROW_ERROR(DistBackendError, message); }

std::string prefix(const char* what, int rank) {
  return std::string("collie: ") + what + " on rank " + std::to_string(rank) + ": ";
}

std::optional<collie::DataType> toCollie(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return collie::DataType::kFloat32;
    case at::kDouble:
      return collie::DataType::kFloat64;
    case at::kHalf:
      return collie::DataType::kFloat16;
    case at::kBFloat16:
      return collie::DataType::kBFloat16;
    case at::kChar:
      return collie::DataType::kInt8;
    case at::kByte:
      return collie::DataType::kUint8;
    case at::kInt:
      return collie::DataType::kInt32;
    case at::kLong:
      return collie::DataType::kInt64;
    default:
      return std::nullopt;
  }
}

// The dtype for a reduction; unsupported dtypes raise.
collie::DataType reduceType(const at::Tensor& t, const char* what, int rank) {
  auto dtype = toCollie(t.scalar_type());
  if (!dtype) {
    fail(prefix(what, rank) + "dtype " + std::string(c10::toString(t.scalar_type())) +
         " is not supported for reductions (use float32/64, float16, bfloat16, int8, "
         "uint8, int32 or int64)");
  }
  return *dtype;
}

collie::ReduceOp reduceOp(const c10d::ReduceOp& op, const char* what, int rank) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return collie::ReduceOp::kSum;
    case c10d::ReduceOp::AVG:
      return collie::ReduceOp::kAvg;
    case c10d::ReduceOp::PRODUCT:
      return collie::ReduceOp::kProd;
    case c10d::ReduceOp::MIN:
      return collie::ReduceOp::kMin;
    case c10d::ReduceOp::MAX:
      return collie::ReduceOp::kMax;
    case c10d::ReduceOp::BAND:
      return collie::ReduceOp::kBand;
    case c10d::ReduceOp::BOR:
      return collie::ReduceOp::kBor;
    case c10d::ReduceOp::BXOR:
      return collie::ReduceOp::kBxor;
    default:
      fail(prefix(what, rank) + "reduce op " + std::to_string(static_cast<int>(op.op_)) +
           " (PREMUL_SUM) is not supported; use SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR or BXOR");
  }
}

void checkCpu(const at::Tensor& t, const char* what, int rank) {
  if (!t.device().is_cpu()) {
    fail(prefix(what, rank) + "tensor is on " + t.device().str() +
         "; the collie backend takes CPU tensors");
  }
  if (t.is_sparse()) fail(prefix(what, rank) + "sparse tensors are not supported");
}

void checkOne(const std::vector<at::Tensor>& tensors, const char* what, int rank) {
  if (tensors.size() != 1) {
    fail(prefix(what, rank) + "expects exactly one tensor, got " + std::to_string(tensors.size()));
  }
  checkCpu(tensors[0], what, rank);
}

collie::Work orFail(collie::Result<collie::Work> result, const char* what, int rank) {
  if (!result.isOk()) fail(prefix(what, rank) + result.status().toString());
  return *result;
}

// A contiguous tensor with t's values: t itself when it already is contiguous.
at::Tensor dense(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

// Copies `from` back into `to` after the operation unless they share storage.
std::function<void()> copyBack(const at::Tensor& to, const at::Tensor& from) {
  if (to.is_same(from)) return {};
  return [to, from]() mutable { to.copy_(from); };
}

std::string advertisedHost() {
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    return addr;
  }
  if (const char* text = std::getenv("COLLIE_UNIQUE_ID"); text != nullptr) {
    auto id = collie::UniqueId::parse(text);
    if (id.isOk()) return id->host;
  }
  return "127.0.0.1";
}

}  // namespace

c10::intrusive_ptr<c10d::Backend> CollieBackend::create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::duration<float> timeout, const std::map<std::string, std::string>& config) {
  std::unique_ptr<collie::StoreServer> server;
  collie::UniqueId id;
  if (rank == 0) {
    std::string host = advertisedHost();
    bool loopback = host == "127.0.0.1" || host == "localhost" || host == "::1";
    auto fresh = collie::UniqueId::generate(host, 0);
    if (!fresh.isOk()) fail(prefix("init", rank) + fresh.status().toString());
    id = *fresh;
    auto started = collie::StoreServer::start(loopback ? "127.0.0.1" : "0.0.0.0", 0, id.secret);
    if (!started.isOk()) {
      fail(prefix("init", rank) +
           "cannot start the rendezvous store: " + started.status().toString());
    }
    server = std::move(started).value();
    id.port = server->port();
    store->set(kUniqueIdKey, id.toString());
  } else {
    std::vector<uint8_t> bytes = store->get(kUniqueIdKey);  // bounded by the store timeout
    auto parsed = collie::UniqueId::parse(std::string(bytes.begin(), bytes.end()));
    if (!parsed.isOk()) {
      fail(prefix("init", rank) +
           "bad unique id from the c10d store: " + parsed.status().toString());
    }
    id = *parsed;
  }
  collie::Options options;
  options.config = config;
  auto comm = collie::Communicator::create(id, rank, size, options);
  if (!comm.isOk()) fail(prefix("init", rank) + comm.status().toString());
  return c10::make_intrusive<CollieBackend>(rank, size, std::move(server), std::move(comm).value());
}

CollieBackend::CollieBackend(int rank, int size, std::unique_ptr<collie::StoreServer> server,
                             std::unique_ptr<collie::Communicator> comm)
    : c10d::Backend(rank, size), server_(std::move(server)), comm_(std::move(comm)), queue_(rank) {}

CollieBackend::~CollieBackend() { shutdown(); }

void CollieBackend::abort() {
  if (comm_) comm_->abort();
}

void CollieBackend::shutdown() {
  if (!comm_) return;
  queue_.drain(kDrainTimeout);
  comm_.reset();  // ends whatever is still pending with Aborted
  queue_.stop();
  server_.reset();
}

c10::intrusive_ptr<c10d::Work> CollieBackend::enqueue(c10d::OpType type, const char* what,
                                                      std::vector<at::Tensor> outputs,
                                                      std::vector<collie::Work> ops,
                                                      std::function<void()> onSuccess,
                                                      std::vector<at::Tensor> keepAlive,
                                                      std::function<void()> cleanup) {
  auto work = c10::make_intrusive<CollieWork>(rank_, type, what, std::move(outputs));
  PendingCall call;
  call.work = work;
  call.ops = std::move(ops);
  call.onSuccess = std::move(onSuccess);
  call.keepAlive = std::move(keepAlive);
  call.cleanup = std::move(cleanup);
  call.what = what;
  queue_.push(std::move(call));
  return work;
}

c10::intrusive_ptr<c10d::Work> CollieBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  checkOne(tensors, "allreduce", rank_);
  const at::Tensor& t = tensors[0];
  collie::DataType dtype = reduceType(t, "allreduce", rank_);
  collie::ReduceOp op = reduceOp(opts.reduceOp, "allreduce", rank_);
  at::Tensor buf = dense(t);
  // Shared memory on every rank alike: collie's shm transport all-reduces it in one
  // pass with no copies. A pool block (shared CPU allocator) is registered once and
  // stays registered; an empty_shared tensor is registered for this call.
  std::function<void()> cleanup;
  if (buf.nbytes() > 0 && registerPoolBlock(buf)) {
    gRegisteredAllreduces.fetch_add(1, std::memory_order_relaxed);
  } else if (buf.is_same(t) && buf.nbytes() > 0 && isShared(buf) &&
             comm_->registerBuffer(buf.data_ptr(), buf.nbytes()).isOk()) {
    gRegisteredAllreduces.fetch_add(1, std::memory_order_relaxed);
    cleanup = [comm = std::weak_ptr<collie::Communicator>(comm_), ptr = buf.data_ptr()] {
      if (auto alive = comm.lock()) (void)alive->deregisterBuffer(ptr);
    };
  }
  auto issued = comm_->allReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), dtype, op);
  if (!issued.isOk() && cleanup) cleanup();
  auto w = orFail(std::move(issued), "allreduce", rank_);
  return enqueue(c10d::OpType::ALLREDUCE, "allreduce", tensors, {w}, copyBack(t, buf), {buf},
                 std::move(cleanup));
}

bool CollieBackend::registerPoolBlock(const at::Tensor& buf) {
  std::optional<SharedBlock> block = SharedPool::instance().find(buf.data_ptr(), buf.nbytes());
  if (!block) return false;
  std::lock_guard<std::mutex> lock(registeredMutex_);
  if (registeredBlocks_.count(block->id) != 0) return true;
  // Ids are never reused, and freeShared drops the registration of a block the pool
  // gives back to the system, so a remembered id is registered for as long as it lives.
  if (!comm_->registerBuffer(block->base, block->bytes).isOk()) return false;
  registeredBlocks_.insert(block->id);
  return true;
}

uint64_t CollieBackend::registeredAllreduces() {
  return gRegisteredAllreduces.load(std::memory_order_relaxed);
}

c10::intrusive_ptr<c10d::Work> CollieBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const char* what = "allreduce_coalesced";
  if (tensors.empty()) fail(prefix(what, rank_) + "no tensors");
  for (const auto& t : tensors) {
    checkCpu(t, what, rank_);
    if (t.scalar_type() != tensors[0].scalar_type()) {
      fail(prefix(what, rank_) + "tensors must share one dtype");
    }
  }
  collie::DataType dtype = reduceType(tensors[0], what, rank_);
  collie::ReduceOp op = reduceOp(opts.reduceOp, what, rank_);
  std::vector<at::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  at::Tensor buf = at::cat(flat);
  auto w =
      orFail(comm_->allReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), dtype, op), what, rank_);
  std::vector<at::Tensor> outs = tensors;
  auto unpack = [outs, buf]() mutable {
    int64_t offset = 0;
    for (auto& t : outs) {
      t.copy_(buf.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  };
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, what, tensors, {w}, unpack, {buf});
}

c10::intrusive_ptr<c10d::Work> CollieBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                        const c10d::BroadcastOptions& opts) {
  checkOne(tensors, "broadcast", rank_);
  const at::Tensor& t = tensors[0];
  at::Tensor buf = dense(t);
  auto w = orFail(comm_->broadcast(buf.data_ptr(), buf.data_ptr(), buf.nbytes(),
                                   collie::DataType::kUint8, static_cast<int>(opts.rootRank)),
                  "broadcast", rank_);
  return enqueue(c10d::OpType::BROADCAST, "broadcast", tensors, {w}, copyBack(t, buf), {buf});
}

c10::intrusive_ptr<c10d::Work> CollieBackend::reduce(std::vector<at::Tensor>& tensors,
                                                     const c10d::ReduceOptions& opts) {
  checkOne(tensors, "reduce", rank_);
  const at::Tensor& t = tensors[0];
  collie::DataType dtype = reduceType(t, "reduce", rank_);
  collie::ReduceOp op = reduceOp(opts.reduceOp, "reduce", rank_);
  at::Tensor buf = dense(t);
  int root = static_cast<int>(opts.rootRank);
  auto w = orFail(comm_->reduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), dtype, op, root),
                  "reduce", rank_);
  return enqueue(c10d::OpType::REDUCE, "reduce", tensors, {w},
                 rank_ == root ? copyBack(t, buf) : std::function<void()>(), {buf});
}

c10::intrusive_ptr<c10d::Work> CollieBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* what = "allgather";
  checkOne(inputs, what, rank_);
  if (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != size_) {
    fail(prefix(what, rank_) + "expects one list of " + std::to_string(size_) + " output tensors");
  }
  at::Tensor in = dense(inputs[0]);
  for (const auto& o : outputs[0]) {
    checkCpu(o, what, rank_);
    if (o.numel() != in.numel() || o.scalar_type() != in.scalar_type()) {
      fail(prefix(what, rank_) + "every output must match the input's size and dtype");
    }
  }
  at::Tensor buf = at::empty({size_ * in.numel()}, in.options());
  auto w =
      orFail(comm_->allGather(in.data_ptr(), buf.data_ptr(), in.nbytes(), collie::DataType::kUint8),
             what, rank_);
  std::vector<at::Tensor> outs = outputs[0];
  int64_t n = in.numel();
  auto unpack = [outs, buf, n]() mutable {
    for (size_t i = 0; i < outs.size(); ++i) {
      outs[i].copy_(buf.narrow(0, static_cast<int64_t>(i) * n, n).view(outs[i].sizes()));
    }
  };
  return enqueue(c10d::OpType::ALLGATHER, what, outputs[0], {w}, unpack, {in, buf});
}

c10::intrusive_ptr<c10d::Work> CollieBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                              const c10d::AllgatherOptions& opts) {
  const char* what = "all_gather_into_tensor";
  checkCpu(output, what, rank_);
  checkCpu(input, what, rank_);
  if (output.numel() != input.numel() * size_ || output.scalar_type() != input.scalar_type()) {
    fail(prefix(what, rank_) +
         "output must hold world_size * input.numel() elements of the "
         "input's dtype");
  }
  at::Tensor in = dense(input);
  at::Tensor out = dense(output);
  auto w =
      orFail(comm_->allGather(in.data_ptr(), out.data_ptr(), in.nbytes(), collie::DataType::kUint8),
             what, rank_);
  return enqueue(c10d::OpType::_ALLGATHER_BASE, what, {output}, {w}, copyBack(output, out),
                 {in, out});
}

c10::intrusive_ptr<c10d::Work> CollieBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* what = "reduce_scatter";
  checkOne(outputs, what, rank_);
  if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != size_) {
    fail(prefix(what, rank_) + "expects one list of " + std::to_string(size_) + " input tensors");
  }
  const at::Tensor& out = outputs[0];
  collie::DataType dtype = reduceType(out, what, rank_);
  collie::ReduceOp op = reduceOp(opts.reduceOp, what, rank_);
  std::vector<at::Tensor> flat;
  for (const auto& t : inputs[0]) {
    checkCpu(t, what, rank_);
    if (t.numel() != out.numel() || t.scalar_type() != out.scalar_type()) {
      fail(prefix(what, rank_) + "every input must match the output's size and dtype");
    }
    flat.push_back(t.reshape({-1}));
  }
  at::Tensor in = at::cat(flat);
  at::Tensor res = dense(out);
  auto w = orFail(comm_->reduceScatter(in.data_ptr(), res.data_ptr(), res.numel(), dtype, op), what,
                  rank_);
  return enqueue(c10d::OpType::REDUCE_SCATTER, what, outputs, {w}, copyBack(out, res), {in, res});
}

c10::intrusive_ptr<c10d::Work> CollieBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const char* what = "reduce_scatter_tensor";
  checkCpu(output, what, rank_);
  checkCpu(input, what, rank_);
  if (input.numel() != output.numel() * size_ || output.scalar_type() != input.scalar_type()) {
    fail(prefix(what, rank_) +
         "input must hold world_size * output.numel() elements of the "
         "output's dtype");
  }
  collie::DataType dtype = reduceType(output, what, rank_);
  collie::ReduceOp op = reduceOp(opts.reduceOp, what, rank_);
  at::Tensor in = dense(input);
  at::Tensor res = dense(output);
  auto w = orFail(comm_->reduceScatter(in.data_ptr(), res.data_ptr(), res.numel(), dtype, op), what,
                  rank_);
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, what, {output}, {w}, copyBack(output, res),
                 {in, res});
}

std::vector<collie::Work> CollieBackend::exchange(const std::vector<at::Tensor>& sendParts,
                                                  const std::vector<at::Tensor>& recvParts) {
  const char* what = "alltoall";
  std::vector<collie::Work> ops;
  if (recvParts[rank_].nbytes() != sendParts[rank_].nbytes()) {
    fail(prefix(what, rank_) +
         "the part this rank keeps differs in size between input and "
         "output");
  }
  if (sendParts[rank_].nbytes() > 0) recvParts[rank_].copy_(sendParts[rank_]);
  // Rounds of a round-robin tournament (circle method): in each round every rank
  // pairs with at most one peer, the lower rank sends first and the higher receives
  // first. collie runs one operation at a time in issue order, so every pair
  // finishes its round before either side moves on: no cycle of waits.
  const int m = size_ % 2 == 0 ? size_ : size_ + 1;
  for (int round = 0; round < m - 1; ++round) {
    int peer;
    if (rank_ == m - 1) {
      peer = -1;
      for (int i = 0; i < m - 1; ++i) {
        if ((2 * i) % (m - 1) == round % (m - 1)) peer = i;
      }
    } else {
      peer = ((round - rank_) % (m - 1) + (m - 1)) % (m - 1);
      if (peer == rank_) peer = m - 1;
    }
    if (peer < 0 || peer >= size_) continue;  // the bye of an odd group
    auto doSend = [&] {
      const at::Tensor& s = sendParts[peer];
      if (s.nbytes() > 0) {
        ops.push_back(orFail(comm_->send(s.data_ptr(), s.nbytes(), collie::DataType::kUint8, peer),
                             what, rank_));
      }
    };
    auto doRecv = [&] {
      const at::Tensor& r = recvParts[peer];
      if (r.nbytes() > 0) {
        ops.push_back(orFail(comm_->recv(r.data_ptr(), r.nbytes(), collie::DataType::kUint8, peer),
                             what, rank_));
      }
    };
    if (rank_ < peer) {
      doSend();
      doRecv();
    } else {
      doRecv();
      doSend();
    }
  }
  return ops;
}

c10::intrusive_ptr<c10d::Work> CollieBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                            std::vector<int64_t>& outputSplits,
                                                            std::vector<int64_t>& inputSplits,
                                                            const c10d::AllToAllOptions& opts) {
  const char* what = "alltoall_base";
  checkCpu(output, what, rank_);
  checkCpu(input, what, rank_);
  if (output.scalar_type() != input.scalar_type()) {
    fail(prefix(what, rank_) + "input and output dtypes differ");
  }
  auto split = [&](const at::Tensor& t, const std::vector<int64_t>& sizes) {
    std::vector<at::Tensor> parts;
    int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    if (sizes.empty()) {
      if (rows % size_ != 0) {
        fail(prefix(what, rank_) + "dim 0 (" + std::to_string(rows) +
             ") is not divisible by the world size");
      }
      for (int p = 0; p < size_; ++p)
        parts.push_back(t.narrow(0, p * (rows / size_), rows / size_));
    } else {
      if (static_cast<int>(sizes.size()) != size_) {
        fail(prefix(what, rank_) + "split sizes must have world_size entries");
      }
      int64_t offset = 0;
      for (int64_t s : sizes) {
        if (s < 0 || offset + s > rows) fail(prefix(what, rank_) + "split sizes exceed dim 0");
        parts.push_back(t.narrow(0, offset, s));
        offset += s;
      }
    }
    return parts;
  };
  at::Tensor in = dense(input);
  at::Tensor out = dense(output);
  std::vector<at::Tensor> sendParts = split(in, inputSplits);
  std::vector<at::Tensor> recvParts = split(out, outputSplits);
  std::vector<collie::Work> ops = exchange(sendParts, recvParts);
  return enqueue(c10d::OpType::ALLTOALL_BASE, what, {output}, std::move(ops), copyBack(output, out),
                 {in, out});
}

c10::intrusive_ptr<c10d::Work> CollieBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::AllToAllOptions& opts) {
  const char* what = "alltoall";
  if (static_cast<int>(outputs.size()) != size_ || static_cast<int>(inputs.size()) != size_) {
    fail(prefix(what, rank_) + "expects world_size input and output tensors");
  }
  std::vector<at::Tensor> sendParts, recvParts, keep;
  std::function<void()> unpack;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;
  for (int p = 0; p < size_; ++p) {
    checkCpu(inputs[p], what, rank_);
    checkCpu(outputs[p], what, rank_);
    sendParts.push_back(dense(inputs[p]));
    at::Tensor r = dense(outputs[p]);
    if (!r.is_same(outputs[p])) copies.emplace_back(outputs[p], r);
    recvParts.push_back(r);
  }
  std::vector<collie::Work> ops = exchange(sendParts, recvParts);
  keep = sendParts;
  keep.insert(keep.end(), recvParts.begin(), recvParts.end());
  if (!copies.empty()) {
    unpack = [copies]() mutable {
      for (auto& [to, from] : copies) to.copy_(from);
    };
  }
  return enqueue(c10d::OpType::ALLTOALL, what, outputs, std::move(ops), unpack, keep);
}

c10::intrusive_ptr<c10d::Work> CollieBackend::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                   int tag) {
  checkOne(tensors, "send", rank_);
  at::Tensor buf = dense(tensors[0]);
  auto w = orFail(comm_->send(buf.data_ptr(), buf.nbytes(), collie::DataType::kUint8, dstRank),
                  "send", rank_);
  return enqueue(c10d::OpType::SEND, "send", tensors, {w}, {}, {buf});
}

c10::intrusive_ptr<c10d::Work> CollieBackend::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                   int tag) {
  checkOne(tensors, "recv", rank_);
  const at::Tensor& t = tensors[0];
  at::Tensor buf = dense(t);
  auto w = orFail(comm_->recv(buf.data_ptr(), buf.nbytes(), collie::DataType::kUint8, srcRank),
                  "recv", rank_);
  return enqueue(c10d::OpType::RECV, "recv", tensors, {w}, copyBack(t, buf), {buf});
}

c10::intrusive_ptr<c10d::Work> CollieBackend::barrier(const c10d::BarrierOptions& opts) {
  auto w = orFail(comm_->barrier(), "barrier", rank_);
  return enqueue(c10d::OpType::BARRIER, "barrier", {}, {w}, {}, {});
}

}  // namespace torch_collie
