#include "transports/cuda_ipc/cuda_ipc_transport.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/log/log.h"

namespace collie {
namespace {

constexpr size_t kStagingBytesPerConnection = 1 << 20;
constexpr char kEntryMagic[] = "collie-cuda-ipc-v1";

std::string cudaErrorText(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ")";
}

int localDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::string hex(const void* data, size_t bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  return out;
}

bool unhex(const std::string& text, void* out, size_t bytes) {
  if (text.size() != 2 * bytes) return false;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  auto* p = static_cast<unsigned char*>(out);
  for (size_t i = 0; i < bytes; ++i) {
    int hi = digit(text[2 * i]), lo = digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    p[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

class CudaIpcConnection final : public Connection {
 public:
  explicit CudaIpcConnection(int peer) : peer_(peer) {}
  Status postSend(const void*, size_t, uint64_t, Completion*) override { return notHere(); }
  Status postRecv(void*, size_t, uint64_t, Completion*) override { return notHere(); }
  Status progress(bool* progressed) override {
    *progressed = false;
    return Status();
  }
  int peer() const override { return peer_; }

 private:
  Status notHere() const {
    return unsupported("cuda_ipc: two-sided messages to rank " + std::to_string(peer_) +
                       " are not implemented; device collectives run as kernels over mapped "
                       "memory, which the engine does not drive yet (docs/cuda.md). Use "
                       "COLLIE_TRANSPORT=shm or tcp for host buffers");
  }
  int peer_;
};

class CudaIpcTransport final : public Transport {
 public:
  CudaIpcTransport(const TransportContext& ctx, std::vector<int> peerDevices)
      : ctx_(ctx), peerDevices_(std::move(peerDevices)) {}
  ~CudaIpcTransport() override {
    for (void* p : peerRegions_) {
      if (p != nullptr) (void)cudaIpcCloseMemHandle(p);
    }
    if (region_ != nullptr) (void)cudaFree(region_);
  }

  const char* name() const override { return "cuda_ipc"; }
  TransportCaps caps() const override {
    TransportCaps caps;
    caps.deviceMemory = true;
    caps.oneSidedWrite = true;
    caps.sameHostOnly = true;
    return caps;
  }
  bool canConnect(int peer, const std::string& peerHostId) const override {
    return peer != ctx_.rank && peer >= 0 && peer < ctx_.nranks && !ctx_.hostId.empty() &&
           peerHostId == ctx_.hostId && peerDevices_[ctx_.rank] > 0 && peerDevices_[peer] > 0;
  }
  Result<std::vector<std::unique_ptr<Connection>>> connect(const std::vector<int>& peers) override;
  void waitForActivity(std::chrono::microseconds maxWait) override {
    std::this_thread::sleep_for(
        std::min<std::chrono::microseconds>(maxWait, std::chrono::microseconds(100)));
  }

 private:
  std::string key(const char* what, int rank) const {
    return ctx_.jobKey + "/cuda_ipc/" + what + "/" + std::to_string(rank);
  }

  TransportContext ctx_;
  std::vector<int> peerDevices_;  // CUDA device count of every rank
  void* region_ = nullptr;
  std::vector<void*> peerRegions_;
};

Result<std::vector<std::unique_ptr<Connection>>> CudaIpcTransport::connect(
    const std::vector<int>& peers) {
  const size_t flagBytes = static_cast<size_t>(ctx_.nranks) * ctx_.nchannels * sizeof(uint64_t);
  const size_t bytes =
      flagBytes + static_cast<size_t>(ctx_.nranks) * ctx_.nchannels * kStagingBytesPerConnection;
  cudaError_t err = cudaMalloc(&region_, bytes);
  if (err == cudaSuccess) err = cudaMemset(region_, 0, flagBytes);
  if (err != cudaSuccess) {
    return unsupported("cuda_ipc: rank " + std::to_string(ctx_.rank) + " could not allocate " +
                       std::to_string(bytes) + " bytes of device memory: " + cudaErrorText(err));
  }
  cudaIpcMemHandle_t handle;
  err = cudaIpcGetMemHandle(&handle, region_);
  if (err != cudaSuccess) {
    return unsupported("cuda_ipc: cudaIpcGetMemHandle on rank " + std::to_string(ctx_.rank) +
                       " failed: " + cudaErrorText(err));
  }
  const std::string entry = std::string(kEntryMagic) + " " + hex(&handle, sizeof(handle));
  COLLIE_RETURN_IF_ERROR(
      ctx_.store->set(key("handle", ctx_.rank), Bytes(entry.begin(), entry.end())));
  const Deadline deadline = Clock::now() + ctx_.timeout;
  peerRegions_.assign(ctx_.nranks, nullptr);
  std::vector<std::unique_ptr<Connection>> connections;
  for (int peer : peers) {
    Result<Bytes> value = ctx_.store->get(key("handle", peer), deadline);
    if (!value.isOk()) {
      return timeoutError("cuda_ipc: rank " + std::to_string(peer) +
                              " did not publish its memory handle before the deadline",
                          peer);
    }
    std::string text(value->begin(), value->end());
    const std::string prefix = std::string(kEntryMagic) + " ";
    cudaIpcMemHandle_t peerHandle;
    if (text.compare(0, prefix.size(), prefix) != 0 ||
        !unhex(text.substr(prefix.size()), &peerHandle, sizeof(peerHandle))) {
      return remoteError("cuda_ipc: rank " + std::to_string(peer) + " published a malformed handle",
                         peer);
    }
    err = cudaIpcOpenMemHandle(&peerRegions_[peer], peerHandle, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      return unsupported("cuda_ipc: rank " + std::to_string(ctx_.rank) + " could not map rank " +
                         std::to_string(peer) + "'s memory: " + cudaErrorText(err) +
                         " (GPUs without P2P access? force COLLIE_TRANSPORT=shm)");
    }
    for (int c = 0; c < ctx_.nchannels; ++c) {
      connections.push_back(std::make_unique<CudaIpcConnection>(peer));
    }
  }
  return connections;
}

Result<std::unique_ptr<Transport>> createCudaIpc(const TransportContext& ctx) {
  if (ctx.rank < 0 || ctx.rank >= ctx.nranks || ctx.jobKey.empty() || !ctx.store) {
    return invalidArgument(
        "cuda_ipc: transport context needs 0 <= rank < nranks, a job key and a store");
  }
  // Every rank publishes its device count (0 without a driver), so both sides of a
  // pair agree on canConnect.
  const std::string mine = std::to_string(localDeviceCount());
  const std::string prefix = ctx.jobKey + "/cuda_ipc/devices/";
  COLLIE_RETURN_IF_ERROR(
      ctx.store->set(prefix + std::to_string(ctx.rank), Bytes(mine.begin(), mine.end())));
  const Deadline deadline = Clock::now() + ctx.timeout;
  std::vector<int> devices(ctx.nranks, 0);
  for (int peer = 0; peer < ctx.nranks; ++peer) {
    Result<Bytes> value = ctx.store->get(prefix + std::to_string(peer), deadline);
    if (!value.isOk()) {
      return timeoutError("cuda_ipc: rank " + std::to_string(peer) +
                              " did not publish its CUDA device count before the deadline",
                          peer);
    }
    std::string text(value->begin(), value->end());
    if (text.empty() || text.size() > 6 ||
        text.find_first_not_of("0123456789") != std::string::npos) {
      return remoteError(
          "cuda_ipc: rank " + std::to_string(peer) + " published a malformed device count", peer);
    }
    devices[peer] = std::stoi(text);
  }
  if (devices[ctx.rank] == 0) {
    COLLIE_LOG(TRACE, INIT) << "cuda_ipc: no CUDA device on rank " << ctx.rank;
  }
  return std::unique_ptr<Transport>(new CudaIpcTransport(ctx, std::move(devices)));
}

}  // namespace

Result<std::unique_ptr<Transport>> createCudaIpcTransport(const TransportContext& ctx) {
  return createCudaIpc(ctx);
}

void registerCudaIpcTransport(TransportRegistry& registry) {
  registry.add(TransportFactory{"cuda_ipc", 150, &createCudaIpc});
}

}  // namespace collie
