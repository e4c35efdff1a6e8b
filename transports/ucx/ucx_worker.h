// UcxWorker: one UCP context and worker, the endpoints to the peers, and the tag
// layout of the ucx transport. Shared (shared_ptr) by the transport and its
// connections so that connections may outlive the transport object; the worker is
// destroyed after the last of them.
//
// UCP tag layout (64 bits), unique per message so that matching never depends on
// arrival order: [kind:2][channel:6][sender rank:24][sequence:32]. `kind` is a
// header (collective tag, length and small payloads), the data of a large message,
// the connection handshake, or an abandon record (Connection::abandon; its sequence
// field is the collective tag folded to 32 bits). Every tag is received with the full
// mask.
//
// An endpoint's error handler (peer died, connection reset) marks the peer failed;
// connections check the mark on every progress() and fail with RemoteError naming it.
//
// Thread safety: one thread at a time (UCS_THREAD_MODE_SERIALIZED).
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collie/status.h"
#include "collie/store.h"
#include "transports/ucx/ucx_wires.h"

namespace collie::ucx {

enum class TagKind : uint64_t { kHeader = 0, kData = 1, kHandshake = 2, kAbandon = 3 };

inline constexpr int kMaxChannels = 64;
inline constexpr int kMaxRanks = 1 << 24;

inline uint64_t makeTag(TagKind kind, int channel, int senderRank, uint32_t seq) {
  return (static_cast<uint64_t>(kind) << 62) | (static_cast<uint64_t>(channel & 63) << 56) |
         (static_cast<uint64_t>(senderRank & 0xffffff) << 32) | seq;
}
inline constexpr ucp_tag_t kFullMask = ~ucp_tag_t{0};

class UcxWorker {
 public:
  ~UcxWorker();

  // Initialises UCP (tag matching + wakeup) and a serialized worker, with the UCX
  // transports and devices of `selection` set on its context (InvalidArgument when UCX
  // refuses them). Unsupported when UCX finds no usable transport (see UCX_TLS).
  // `congestion` (TCP_CONGESTION, empty: the system default) is set on the TCP
  // listeners UCX opens for the worker.
  static Result<std::shared_ptr<UcxWorker>> create(int rank, int nranks,
                                                   const std::string& congestion,
                                                   const UcxSelection& selection);

  // This worker's address, to publish through the store.
  const std::vector<uint8_t>& address() const { return address_; }
  // The TCP listeners ("ip:port") UCX opened for this worker (its tcp transport), to
  // publish: the peers' connections to them are UCX's outgoing tcp sockets.
  const std::vector<std::string>& tcpListeners() const { return tcpListeners_; }
  // Creates `lanes` endpoints to `peer` from its published address. Each endpoint is a
  // wire of its own (one TCP connection with UCX_TLS=tcp), so channels that use
  // different lanes do not queue behind each other's large messages.
  Status connect(int peer, const uint8_t* address, size_t length, int lanes = 1);

  ucp_worker_h worker() const { return worker_; }
  // The endpoint that channel `channel` to `peer` sends on.
  ucp_ep_h endpoint(int peer, int channel = 0) const {
    const std::vector<ucp_ep_h>& eps = peers_[peer].eps;
    return eps[static_cast<size_t>(channel) % eps.size()];
  }
  // Why the endpoint to `peer` failed, or OK.
  const Status& peerStatus(int peer) const { return peers_[peer].failure; }

  // Operations to `peer` were abandoned (a connection died with requests in flight): its
  // endpoint is force-closed instead of flushed.
  void markAbandoned(int peer) { peers_[peer].abandoned = true; }
  // One ucp_worker_progress round; true when it did anything.
  bool progress() { return ucp_worker_progress(worker_) != 0; }
  // Blocks on the worker's event fd until something may happen or maxWait passed.
  void waitForActivity(std::chrono::microseconds maxWait);
  int rank() const { return rank_; }
  // The transports UCX chose for the endpoint to `peer` ("tcp/eth0 ..."), for logs.
  std::string describe(int peer) const;
  // Keeps `object` alive until the UCP worker is destroyed: the buffers and callback
  // state of a request that was given up on while UCX may still complete it.
  void keepUntilDestroyed(std::shared_ptr<void> object) { orphans_.push_back(std::move(object)); }

 private:
  struct Peer {
    std::vector<ucp_ep_h> eps;  // lanes
    Status failure;
    bool abandoned = false;
    UcxWorker* owner = nullptr;
    int rank = -1;
  };
  static void onEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  Status connectLane(int peer, const uint8_t* address, bool first);

  UcxWorker(int rank, int nranks) : rank_(rank), peers_(nranks) {}
  void closeEndpoints();

  int rank_;
  bool networkAllowed_ = true;  // networkTransportAllowed() of the worker's selection
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int eventFd_ = -1;
  std::vector<uint8_t> address_;
  std::vector<std::string> tcpListeners_;
  std::vector<Peer> peers_;
  std::vector<std::shared_ptr<void>> orphans_;  // released after ucp_worker_destroy
};

// Waits (progressing the worker) until `request` completes or the deadline; frees it.
// `request` may be a UCS_PTR status (immediate completion or error).
Status waitRequest(UcxWorker& worker, void* request, Deadline deadline, const std::string& what);

}  // namespace collie::ucx
