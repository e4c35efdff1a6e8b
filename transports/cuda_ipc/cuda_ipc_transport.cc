#include "transports/cuda_ipc/cuda_ipc_transport.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/common/hex.h"
#include "core/device/device_runtime.h"
#include "core/log/log.h"
#include "core/transport/device_windows.h"

namespace collie {
namespace {

constexpr char kPeerMagic[] = "collie-cuda-ipc-v2";
constexpr char kWindowMagic[] = "collie-cuda-ipc-window-v2";
constexpr size_t kMaxEntryBytes = 4096;  // an entry longer than this is malformed
constexpr size_t kMaxWindowBytes = size_t{1} << 34;

// Splits an untrusted store entry into exactly `n` space-separated fields.
bool splitEntry(const Bytes& value, size_t n, std::vector<std::string>* fields) {
  if (value.empty() || value.size() > kMaxEntryBytes) return false;
  std::istringstream in(std::string(value.begin(), value.end()));
  fields->clear();
  for (std::string field; in >> field;) fields->push_back(field);
  return fields->size() == n;
}

Bytes toBytes(const std::string& text) { return Bytes(text.begin(), text.end()); }

std::string rankName(int rank) { return "rank " + std::to_string(rank); }

class Windows final : public DeviceWindows {
 public:
  Windows(DeviceRuntime* runtime, int rank, int nranks, size_t bytes)
      : runtime_(runtime), rank_(rank), bytes_(bytes), windows_(nranks, nullptr) {}
  ~Windows() override {
    for (int peer = 0; peer < static_cast<int>(windows_.size()); ++peer) {
      if (peer != rank_ && windows_[peer] != nullptr) runtime_->closeHandle(windows_[peer]);
    }
    if (windows_[rank_] != nullptr) runtime_->free(windows_[rank_]);
  }
  uint8_t* window(int rank) const override { return windows_.at(rank); }
  size_t bytes() const override { return bytes_; }
  std::vector<uint8_t*>& slots() { return windows_; }

 private:
  DeviceRuntime* const runtime_;
  const int rank_;
  const size_t bytes_;
  std::vector<uint8_t*> windows_;
};

class CudaIpcConnection final : public Connection {
 public:
  explicit CudaIpcConnection(int peer) : peer_(peer) {}
  Status postSend(const void*, size_t, uint64_t, Completion*) override { return notHere(peer_); }
  Status postRecv(void*, size_t, uint64_t, Completion*) override { return notHere(peer_); }
  Status progress(bool* progressed) override {
    *progressed = false;
    return Status();
  }
  int peer() const override { return peer_; }

  static Status notHere(int peer) {
    return unsupported("cuda_ipc: no two-sided messages to " + rankName(peer) +
                       ": this transport only maps device memory, through its "
                       "deviceWindows() capability (core's device path uses it); host "
                       "buffers go through shm or tcp");
  }

 private:
  int peer_;
};

class CudaIpcTransport final : public Transport, public DeviceWindowProvider {
 public:
  CudaIpcTransport(const TransportContext& ctx, bool available)
      : ctx_(ctx), available_(available) {}

  const char* name() const override { return "cuda_ipc"; }
  TransportCaps caps() const override {
    TransportCaps caps;
    caps.deviceMemory = true;
    caps.oneSidedWrite = true;
    caps.sameHostOnly = true;
    return caps;
  }
  bool canConnect(int, const std::string&) const override { return false; }
  Result<std::vector<std::unique_ptr<Connection>>> connect(const std::vector<int>& peers) override {
    return CudaIpcConnection::notHere(peers.empty() ? -1 : peers[0]);
  }
  void waitForActivity(std::chrono::microseconds maxWait) override {
    std::this_thread::sleep_for(
        std::min<std::chrono::microseconds>(maxWait, std::chrono::microseconds(100)));
  }
  DeviceWindowProvider* deviceWindows() override { return this; }

  bool available() const override { return available_; }
  Result<std::unique_ptr<DeviceWindows>> open(size_t bytes, uint32_t layout,
                                              Clock::time_point deadline) override;

 private:
  std::string key(const char* what, int rank) const {
    return ctx_.jobKey + "/cuda_ipc/" + what + "/" + std::to_string(rank);
  }
  // Reads and checks `peer`'s window entry; returns its IPC handle.
  Result<std::string> peerHandle(int peer, const std::string& mine, Clock::time_point deadline);

  TransportContext ctx_;
  const bool available_;
};

Result<std::string> CudaIpcTransport::peerHandle(int peer, const std::string& mine,
                                                 Clock::time_point deadline) {
  Result<Bytes> value = ctx_.store->get(key("window", peer), deadline);
  if (!value.isOk()) {
    return timeoutError("cuda_ipc: " + rankName(peer) +
                            " did not publish its device window before the deadline (" +
                            value.status().message() + ")",
                        peer);
  }
  std::vector<std::string> theirs, ours;
  std::string handle;
  if (!splitEntry(*value, 5, &theirs) || theirs[0] != kWindowMagic ||
      !fromHex(theirs[4], &handle)) {
    return remoteError("cuda_ipc: " + rankName(peer) +
                           " published a malformed device window entry (another collie version?)",
                       peer);
  }
  (void)splitEntry(toBytes(mine), 5, &ours);
  const char* field[] = {"", "device runtime", "window layout", "window size"};
  for (int i = 1; i <= 3; ++i) {
    if (theirs[i] != ours[i]) {
      return invalidArgument("cuda_ipc: " + rankName(peer) + " has " + field[i] + " " + theirs[i] +
                             ", " + rankName(ctx_.rank) + " has " + ours[i] +
                             "; every rank must run the same collie build and device runtime");
    }
  }
  return handle;
}

Result<std::unique_ptr<DeviceWindows>> CudaIpcTransport::open(size_t bytes, uint32_t layout,
                                                              Clock::time_point deadline) {
  DeviceRuntime* runtime = ctx_.deviceRuntime;
  const std::string where = "cuda_ipc: " + rankName(ctx_.rank);
  if (!available_ || runtime == nullptr) {
    return unsupported(where +
                       ": device windows are not available (ranks on several "
                       "hosts or without the same device runtime)");
  }
  if (bytes == 0 || bytes > kMaxWindowBytes) {
    return invalidArgument(where + ": device window of " + std::to_string(bytes) + " bytes");
  }
  auto windows = std::make_unique<Windows>(runtime, ctx_.rank, ctx_.nranks, bytes);
  Result<void*> own = runtime->allocate(bytes);
  if (!own.isOk()) return own.status().withContext(where + ": allocating its device window");
  windows->slots()[ctx_.rank] = static_cast<uint8_t*>(*own);
  Result<std::string> handle = runtime->exportHandle(*own);
  if (!handle.isOk()) return handle.status().withContext(where + ": exporting its device window");
  const std::string mine = std::string(kWindowMagic) + " " + runtime->name() + " " +
                           std::to_string(layout) + " " + std::to_string(bytes) + " " +
                           toHex(*handle);
  COLLIE_RETURN_IF_ERROR(ctx_.store->set(key("window", ctx_.rank), toBytes(mine)));

  Status unmapped;
  for (int peer = 0; peer < ctx_.nranks; ++peer) {
    if (peer == ctx_.rank) continue;
    Result<std::string> text = peerHandle(peer, mine, deadline);
    if (!text.isOk()) return text.status();
    if (!unmapped.isOk()) continue;
    Result<void*> mapped = runtime->openHandle(*text);
    if (!mapped.isOk()) {
      unmapped = mapped.status().withContext(where + ": mapping " + rankName(peer) + "'s window");
      continue;
    }
    windows->slots()[peer] = static_cast<uint8_t*>(*mapped);
  }
  // One rank that cannot map every peer (GPUs without P2P, the emulation across
  // processes it cannot reach) turns the windows off on every rank.
  COLLIE_RETURN_IF_ERROR(
      ctx_.store->set(key("mapped", ctx_.rank), toBytes(unmapped.isOk() ? "1" : "0")));
  for (int peer = 0; peer < ctx_.nranks; ++peer) {
    Result<Bytes> mapped = ctx_.store->get(key("mapped", peer), deadline);
    if (!mapped.isOk()) {
      return timeoutError(where + ": " + rankName(peer) +
                              " did not say whether it mapped every "
                              "window (" +
                              mapped.status().message() + ")",
                          peer);
    }
    if (*mapped != toBytes("1")) {
      COLLIE_LOG(INFO, INIT) << where << ": " << rankName(peer)
                             << " cannot map every peer's device window; device buffers will be "
                                "staged through host memory"
                             << (unmapped.isOk() ? "" : " (" + unmapped.toString() + ")");
      return std::unique_ptr<DeviceWindows>();
    }
  }
  COLLIE_LOG(INFO, INIT) << where << ": " << ctx_.nranks << " device windows of " << bytes
                         << " bytes (" << runtime->name() << " runtime)";
  return std::unique_ptr<DeviceWindows>(std::move(windows));
}

Result<std::unique_ptr<Transport>> createCudaIpc(const TransportContext& ctx) {
  if (ctx.rank < 0 || ctx.rank >= ctx.nranks || ctx.jobKey.empty() || !ctx.store) {
    return invalidArgument(
        "cuda_ipc: transport context needs 0 <= rank < nranks, a job key and a store");
  }
  if (ctx.forced) {
    return invalidArgument(
        "cuda_ipc carries no host messages (it maps device memory for the device path, "
        "which uses it by itself); force COLLIE_TRANSPORT=shm or tcp instead");
  }
  // Every rank publishes its runtime and host, so that every rank decides alike
  // whether windows are available.
  const std::string runtime = ctx.deviceRuntime != nullptr ? ctx.deviceRuntime->name() : "none";
  const std::string host = toHex(ctx.hostId.empty() ? "-" : ctx.hostId);
  const std::string mine = std::string(kPeerMagic) + " " + runtime + " " + host;
  const std::string prefix = ctx.jobKey + "/cuda_ipc/peer/";
  COLLIE_RETURN_IF_ERROR(ctx.store->set(prefix + std::to_string(ctx.rank), toBytes(mine)));
  const Clock::time_point deadline = Clock::now() + ctx.timeout;
  bool available = runtime != "none" && !ctx.hostId.empty();
  for (int peer = 0; peer < ctx.nranks; ++peer) {
    Result<Bytes> value = ctx.store->get(prefix + std::to_string(peer), deadline);
    if (!value.isOk()) {
      return timeoutError(
          "cuda_ipc: " + rankName(peer) + " did not publish its device runtime before the deadline",
          peer);
    }
    std::vector<std::string> fields;
    if (!splitEntry(*value, 3, &fields) || fields[0] != kPeerMagic) {
      return remoteError("cuda_ipc: " + rankName(peer) + " published a malformed entry", peer);
    }
    available = available && fields[1] == runtime && fields[2] == host;
  }
  if (!available) {
    COLLIE_LOG(TRACE, INIT) << "cuda_ipc: no device windows for rank " << ctx.rank << " (runtime "
                            << runtime << ", ranks on several hosts or runtimes)";
  }
  return std::unique_ptr<Transport>(new CudaIpcTransport(ctx, available));
}

}  // namespace

Result<std::unique_ptr<Transport>> createCudaIpcTransport(const TransportContext& ctx) {
  return createCudaIpc(ctx);
}

void registerCudaIpcTransport(TransportRegistry& registry) {
  TransportFactory factory{"cuda_ipc", 150, &createCudaIpc};
  factory.offersDeviceWindows = true;
  registry.add(factory);
}

}  // namespace collie
