// CollieBackend: creation, lifetime, the submit path shared by every call, coalescing,
// sequence numbers and the barriers. The calls themselves live in backend_reduce.cc
// (reductions), backend_gather.cc (broadcast, gathers, scatter) and backend_p2p.cc
// (send/recv, all-to-all).
#include "backend.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <thread>

#include "tensor_args.h"

namespace torch_collie {

namespace {

constexpr const char* kUniqueIdKey = "collie_unique_id";
// How long destroy_process_group waits for calls still in flight before aborting.
constexpr std::chrono::seconds kDrainTimeout{30};
// init_process_group's default for backends other than NCCL: "not set" for collie,
// whose COLLIE_TIMEOUT then applies.
constexpr std::chrono::milliseconds kTorchDefaultTimeout{30 * 60 * 1000};
// Polling interval of the barriers that wait in the c10d store.
constexpr std::chrono::milliseconds kStorePoll{5};

[[noreturn]] void fail(const std::string& message) { C10_THROW_ERROR(DistBackendError, message); }

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

std::string joinRanks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

c10::intrusive_ptr<c10d::Backend> CollieBackend::create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::duration<float> timeout, const std::map<std::string, std::string>& config) {
  auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  collie::Options options;
  options.config = config;
  if (millis.count() > 0 && millis != kTorchDefaultTimeout) options.timeout = millis;
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
  auto comm = collie::Communicator::create(id, rank, size, options);
  if (!comm.isOk()) fail(prefix("init", rank) + comm.status().toString());
  return c10::make_intrusive<CollieBackend>(rank, size, store, millis, std::move(server),
                                            std::move(comm).value());
}

CollieBackend::CollieBackend(int rank, int size, c10::intrusive_ptr<c10d::Store> store,
                             std::chrono::milliseconds timeout,
                             std::unique_ptr<collie::StoreServer> server,
                             std::unique_ptr<collie::Communicator> comm)
    : c10d::Backend(rank, size),
      store_(store),
      options_(c10::make_intrusive<Options>("collie", timeout)),
      server_(std::move(server)),
      comm_(std::move(comm)),
      queue_(rank, hooks_),
      announcer_(store, rank, size) {}

CollieBackend::~CollieBackend() { shutdown(); }

void CollieBackend::abort() {
  if (comm_) comm_->abort();
}

void CollieBackend::shutdown() {
  if (!comm_) return;
  queue_.drain(kDrainTimeout);
  comm_.reset();  // ends whatever is still pending with Aborted
  queue_.stop();
  announcer_.stop();
  server_.reset();
}

void CollieBackend::setTimeout(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) {
    invalid("setTimeout", rank_,
            "timeout must be positive, got " + std::to_string(timeout.count()) + " ms");
  }
  options_->timeout = timeout;
  defaultCallTimeoutMs_.store(timeout.count());
}

c10::intrusive_ptr<c10d::Work> CollieBackend::submit(Call call) {
  if (call.timeout.count() <= 0) {
    if (const int64_t ms = defaultCallTimeoutMs_.load(); ms > 0) {
      call.timeout = std::chrono::milliseconds(ms);
    }
  }
  uint64_t sequence = call.collective ? sequence_.fetch_add(1) + 1 : sequence_.load();
  auto work = c10::make_intrusive<CollieWork>(rank_, call.type, call.title, call.inputs,
                                              std::move(call.outputs), sequence,
                                              std::move(call.devices), call.started);
  if (call.deviceEvent) work->setDeviceEvent(std::move(call.deviceEvent));
  PendingCall pending;
  pending.work = work;
  pending.ops = std::move(call.ops);
  pending.onSuccess = std::move(call.onSuccess);
  pending.keepAlive = std::move(call.keepAlive);
  pending.cleanup = std::move(call.cleanup);
  pending.what = call.what;
  pending.followers = std::move(call.followers);
  if (call.timeout.count() > 0) {
    pending.timeout = call.timeout;
    pending.deadline = std::chrono::steady_clock::now() + call.timeout;
    pending.abortOnTimeout = comm_;
  }
  queue_.push(std::move(pending));
  return work;
}

uint64_t CollieBackend::getSequenceNumberForGroup() { return sequence_.load(); }

void CollieBackend::startCoalescing() {
  if (coalescing_) invalid("startCoalescing", rank_, "coalescing already started");
  coalescing_ = true;
}

c10::intrusive_ptr<c10d::Work> CollieBackend::endCoalescing() {
  if (!coalescing_) invalid("endCoalescing", rank_, "coalescing was not started");
  coalescing_ = false;
  std::vector<Deferred> batch;
  batch.swap(deferred_);
  if (!batch.empty() && batch[0].onDevice) return endCoalescingDevice(std::move(batch));
  std::vector<collie::PointToPoint> ops;
  std::vector<at::Tensor> keep;
  std::vector<std::function<void()>> copies;
  std::vector<c10::intrusive_ptr<CollieWork>> followers;
  for (auto& d : batch) {
    ops.push_back(d.op);
    keep.push_back(d.buffer);
    if (d.copyOut) copies.push_back(std::move(d.copyOut));
    followers.push_back(d.work);
  }
  Call call(c10d::OpType::COALESCED, "collie:coalesced", "coalesced send/recv", {}, {});
  call.ops = sendRecv(ops, call.what);
  call.keepAlive = keep;
  call.collective = false;
  call.onSuccess = inOrder(std::move(copies));
  call.followers = std::move(followers);  // the batch's own works complete with it
  return submit(std::move(call));
}

c10::intrusive_ptr<c10d::Work> CollieBackend::barrier(const c10d::BarrierOptions& opts) {
  Call call(c10d::OpType::BARRIER, "collie:barrier", "barrier", {}, {});
  if (opts.timeout == c10d::kUnsetTimeout) {
    call.ops = {orFail(comm_->barrier(), "barrier", rank_)};
    return submit(std::move(call));
  }
  // With a timeout of its own: through the c10d store, once every call issued before it
  // completed (the completion thread gets to it in order). collie runs small collectives
  // inline on the calling thread, bounded only by the communicator's deadline, and a
  // rank that never arrives must leave nothing pending in the communicator.
  call.onSuccess = [store = store_, rank = rank_, size = size_, timeout = opts.timeout,
                    prefix = "collie_barrier/" + std::to_string(timedBarriers_++) + "/"] {
    store->set(prefix + std::to_string(rank), std::vector<uint8_t>{1});
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<int> missing;
    for (int r = 0; r < size; ++r) {
      const std::string key = prefix + std::to_string(r);
      while (!store->check({key}) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(kStorePoll);
      }
      if (!store->check({key})) missing.push_back(r);
    }
    if (!missing.empty()) {
      fail(torch_collie::prefix("barrier", rank) + "timed out after " +
           std::to_string(timeout.count()) + " ms: rank(s) " + joinRanks(missing) +
           " did not arrive");
    }
  };
  return submit(std::move(call));
}

// Through the c10d store, not collie: a rank that never arrives leaves nothing
// pending in the communicator. Round k: rank r > 0 sets "arrived/r" and waits for
// "released"; rank 0 waits for every arrival (within the timeout), then releases.
void CollieBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  const auto timeout = opts.timeout == c10d::kUnsetTimeout ? options_->timeout : opts.timeout;
  const std::string round = "collie_monitored/" + std::to_string(monitoredRounds_++) + "/";
  if (rank_ != 0) {
    store_->set(round + "arrived/" + std::to_string(rank_), std::vector<uint8_t>{1});
    try {
      store_->wait({round + "released"}, options_->timeout);
    } catch (const std::exception& e) {
      fail("Rank " + std::to_string(rank_) +
           " successfully reached monitoredBarrier, but rank 0 did not release it: " + e.what() +
           ". Check rank 0's logs for the rank that failed.");
    }
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> missing;
  for (int r = 1; r < size_; ++r) {
    const std::string key = round + "arrived/" + std::to_string(r);
    // With waitAllRanks every rank gets the whole timeout (gloo does the same).
    const auto deadline = (waitAllRanks ? std::chrono::steady_clock::now() : start) + timeout;
    while (!store_->check({key})) {
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(kStorePoll);
    }
    if (!store_->check({key})) {
      if (!waitAllRanks) {
        fail("[Rank 0]: Rank " + std::to_string(r) + " failed to pass monitoredBarrier in " +
             std::to_string(timeout.count()) + " ms");
      }
      missing.push_back(r);
    }
  }
  if (!missing.empty()) {
    fail("[Rank 0]: Ranks " + joinRanks(missing) + " failed to pass monitoredBarrier in " +
         std::to_string(timeout.count()) + " ms");
  }
  store_->set(round + "released", std::vector<uint8_t>{1});
  for (int r = 1; r < size_; ++r) store_->deleteKey(round + "arrived/" + std::to_string(r));
}

}  // namespace torch_collie
