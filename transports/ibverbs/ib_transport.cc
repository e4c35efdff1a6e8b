// The ibverbs transport: device selection, queue-pair wiring through the store, the
// secret handshake, registration. The data path is in ib_connection.cc.
//
// create() opens the port chosen by COLLIE_IB_HCA (Unsupported "no InfiniBand device
// found" when there is none, so the transport is simply absent). connect() creates one
// RC queue pair per (peer, channel), publishes {qpn, psn, lid, gid} under
// <jobKey>/ib/qp/<rank>/<peer>/<channel>, moves each pair to RTS against the peer's,
// waits until every peer reached RTS (<jobKey>/ib/rts/<rank>) and then runs the
// symmetric challenge-response of core/net/handshake.h over every queue pair (fresh
// nonces, then HMAC proofs of the job secret; the secret itself is never sent) before
// returning the connections.
//
// Priority 120: after shm, before ucx and tcp. Like ucx it takes only peers on other
// hosts unless COLLIE_TRANSPORT=ibverbs forced it.
#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cstring>

#include "core/config/config.h"
#include "core/log/log.h"
#include "core/net/handshake.h"
#include "core/transport/transport.h"
#include "transports/ibverbs/ib_connection.h"
#include "transports/ibverbs/ib_knobs.h"

namespace collie {
namespace ib {
namespace {

Bytes encodeInfo(const QpInfo& info) {
  Bytes out(sizeof(QpInfo));
  std::memcpy(out.data(), &info, sizeof(QpInfo));
  return out;
}

class IbTransport final : public Transport {
 public:
  IbTransport(const TransportContext& ctx, std::shared_ptr<IbShared> shared)
      : ctx_(ctx), shared_(std::move(shared)) {}

  const char* name() const override { return "ibverbs"; }
  TransportCaps caps() const override {
    TransportCaps caps;
    caps.oneSidedWrite = true;
    caps.authenticatesPeers = true;
    return caps;
  }
  bool canConnect(int, const std::string& peerHostId) const override {
    return ctx_.forced || peerHostId != ctx_.hostId;
  }
  Result<std::vector<std::unique_ptr<Connection>>> connect(const std::vector<int>& peers) override;

  void waitForActivity(std::chrono::microseconds maxWait) override {
    auto ms =
        std::clamp<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(maxWait).count(), 0, 1000);
    pollfd fd{shared_->channel->fd, POLLIN, 0};
    if (::poll(&fd, 1, static_cast<int>(ms)) <= 0) return;
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    while (ibv_get_cq_event(shared_->channel, &cq, &context) == 0) {
      ibv_ack_cq_events(cq, 1);
      ibv_req_notify_cq(cq, 0);
    }
  }

 private:
  TransportContext ctx_;
  std::shared_ptr<IbShared> shared_;
};

Result<std::vector<std::unique_ptr<Connection>>> IbTransport::connect(
    const std::vector<int>& peers) {
  const auto timeout = std::chrono::duration_cast<Clock::duration>(ctx_.timeout);
  const Deadline until = Clock::now() + timeout;
  const std::string prefix = ctx_.jobKey + "/ib/";
  std::vector<std::unique_ptr<IbConnection>> conns;
  for (int peer : peers) {
    for (int ch = 0; ch < ctx_.nchannels; ++ch) {
      Result<std::unique_ptr<IbConnection>> c = IbConnection::create(shared_, peer, ch);
      if (!c.isOk()) return c.status();
      std::string key = prefix + "qp/" + std::to_string(ctx_.rank) + "/" + std::to_string(peer) +
                        "/" + std::to_string(ch);
      COLLIE_RETURN_IF_ERROR(ctx_.store->set(key, encodeInfo((*c)->localInfo())));
      conns.push_back(std::move(*c));
    }
  }
  for (size_t i = 0; i < conns.size(); ++i) {
    int peer = peers[i / ctx_.nchannels];
    int ch = static_cast<int>(i % ctx_.nchannels);
    std::string key = prefix + "qp/" + std::to_string(peer) + "/" + std::to_string(ctx_.rank) +
                      "/" + std::to_string(ch);
    Result<Bytes> info = ctx_.store->get(key, until);
    if (!info.isOk()) {
      return timeoutError("ibverbs: rank " + std::to_string(peer) +
                              " did not publish its queue pair before the deadline",
                          peer);
    }
    if (info->size() != sizeof(QpInfo)) {
      return remoteError("ibverbs: malformed queue-pair info from rank " + std::to_string(peer),
                         peer);
    }
    QpInfo remote;
    std::memcpy(&remote, info->data(), sizeof(QpInfo));
    COLLIE_RETURN_IF_ERROR(conns[i]->connectTo(remote));
  }
  COLLIE_RETURN_IF_ERROR(ctx_.store->set(prefix + "rts/" + std::to_string(ctx_.rank), Bytes{1}));
  for (int peer : peers) {
    if (!ctx_.store->get(prefix + "rts/" + std::to_string(peer), until).isOk()) {
      return timeoutError("ibverbs: rank " + std::to_string(peer) +
                              " did not bring its queue pairs up before the deadline",
                          peer);
    }
  }
  const uint64_t jobHash = net::hashJobKey(ctx_.jobKey);
  // One nonce per connect() serves every queue pair: each proof also names its sender,
  // receiver and channel, and every receiver checks it against its own fresh nonce.
  Result<net::Nonce> nonce = net::freshNonce();
  if (!nonce.isOk()) return nonce.status().withContext("ibverbs handshake");
  for (auto& c : conns) COLLIE_RETURN_IF_ERROR(c->sendHelloNonce(*nonce, jobHash));
  for (auto& c : conns) {
    COLLIE_RETURN_IF_ERROR(c->sendHelloProof(ctx_.secret, ctx_.rank, jobHash, *nonce, until));
  }
  for (auto& c : conns) {
    COLLIE_RETURN_IF_ERROR(c->checkHelloProof(ctx_.secret, ctx_.rank, jobHash, *nonce, until));
  }
  std::vector<std::unique_ptr<Connection>> out;
  for (auto& c : conns) out.push_back(std::move(c));
  COLLIE_LOG(INFO, NET) << "ibverbs: rank " << ctx_.rank << " connected to " << peers.size()
                        << " peers over " << shared_->port->device << ":" << shared_->port->port;
  return out;
}

Result<std::unique_ptr<Transport>> createIbTransport(const TransportContext& ctx) {
  if (ctx.store == nullptr) return invalidArgument("ibverbs transport needs a store");
  auto shared = std::make_shared<IbShared>();
  Result<IbKnobs> knobs = IbKnobs::parse(ctx.config);
  if (!knobs.isOk()) return knobs.status().withContext("ibverbs transport");
  Result<std::unique_ptr<IbPort>> port = openIbPort(knobs->ports, knobs->gidIndex);
  if (!port.isOk()) return port.status();
  shared->port = std::move(*port);
  shared->channel = ibv_create_comp_channel(shared->port->context);
  if (shared->channel == nullptr) return systemError("ibverbs: ibv_create_comp_channel", errno);
  fcntl(shared->channel->fd, F_SETFL, fcntl(shared->channel->fd, F_GETFL) | O_NONBLOCK);
  shared->mrs = std::make_unique<MrCache>(shared->port->pd, knobs->mrCacheSize);
  return std::unique_ptr<Transport>(new IbTransport(ctx, std::move(shared)));
}

std::string describeIb() {
  std::vector<std::string> ports = describeIbPorts();
  if (ports.empty()) return "no InfiniBand device found";
  std::string out;
  for (const std::string& p : ports) out += (out.empty() ? "" : "\n") + p;
  return out;
}

}  // namespace
}  // namespace ib

void registerIbverbsTransport(TransportRegistry& registry) {
  registry.add(TransportFactory{"ibverbs", 120, &ib::createIbTransport, &ib::describeIb});
}

}  // namespace collie
