// The ucx transport: setup (worker, address exchange through the store, endpoints,
// the secret handshake) and registration. The data path is in ucx_connection.cc.
//
// create() is cheap (UCP is initialised only in connect(), when some peer chose this
// transport). connect() publishes the worker address under <jobKey>/ucx/addr/<rank>,
// reads each peer's, creates the endpoints and then runs the symmetric challenge-
// response of core/net/handshake.h over them, two messages per pair and direction:
// {magic, rank, job-key hash, fresh nonce}, then {magic, peerProof()}, an HMAC of the
// job secret over both nonces, both ranks and the job-key hash. The secret itself never
// crosses the wire, and a recorded proof is worthless against a fresh nonce. A peer
// whose proof does not hold, or whose job differs, is refused (Unauthenticated, naming
// it) before any connection is returned, so no data is accepted from a rank that
// cannot prove the secret. (The store itself admits only clients that prove the
// secret, so only job members can publish addresses in the first place.)
//
// Priority 150: after shm (same host) and ibverbs, before tcp. canConnect() accepts
// only peers on other hosts unless COLLIE_TRANSPORT=ucx forced it, so single-host jobs
// keep shm; UCX itself picks its wire from UCX_TLS (rc/ud/dc, tcp, posix/sysv/cma).
// Unforced, it also takes a peer only when both ranks have an RDMA wire in UCX (rc, ud
// or dc that UCX_TLS allows): where UCX would only run over sockets, collie's own tcp
// transport moves the same all-reduce at least as fast (docs/multihost.md), so those
// pairs fall through to tcp. Each rank publishes its flag under <jobKey>/ucx/rdma/<rank> at
// create() and reads its peers', so both ends of a pair decide alike.
#include <algorithm>
#include <cstring>

#include "core/log/log.h"
#include "core/net/handshake.h"
#include "core/net/net_knobs.h"
#include "core/net/process_sockets.h"
#include "core/transport/transport.h"
#include "transports/ucx/ucx_connection.h"
#include "transports/ucx/ucx_tcp_sockets.h"
#include "transports/ucx/ucx_wires.h"
#include "transports/ucx/ucx_worker.h"

namespace collie {
namespace ucx {
std::string describeUcx();
namespace {

constexpr uint32_t kNonceMagic = 0x4e584355;  // "UCXN": round 0, {magic, rank, hash, nonce}
constexpr uint32_t kProofMagic = 0x50584355;  // "UCXP": round 1, {magic, 0, proof}
constexpr size_t kNonceMessageBytes = 4 + 4 + 8 + net::kNonceBytes;
constexpr size_t kProofMessageBytes = 4 + 4 + net::kMacBytes;
using Message = std::vector<uint8_t>;

Message encodeNonceMessage(int rank, uint64_t jobHash, const net::Nonce& nonce) {
  Message out(kNonceMessageBytes);
  uint32_t magic = kNonceMagic;
  uint32_t r = static_cast<uint32_t>(rank);
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 4, &r, 4);
  std::memcpy(out.data() + 8, &jobHash, 8);
  std::memcpy(out.data() + 16, nonce.data(), net::kNonceBytes);
  return out;
}

Message encodeProofMessage(const Sha256Digest& proof) {
  Message out(kProofMessageBytes);
  uint32_t magic = kProofMagic;
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 8, proof.data(), net::kMacBytes);
  return out;
}

class UcxTransport final : public Transport {
 public:
  UcxTransport(const TransportContext& ctx, const UcxSelection& selection, const NetKnobs& net,
               bool rdma, bool rdmaWire)
      : ctx_(ctx), selection_(selection), net_(net), rdma_(rdma), rdmaWire_(rdmaWire) {}

  const char* name() const override { return "ucx"; }
  TransportCaps caps() const override {
    TransportCaps caps;
    // Without an RDMA wire UCX moves every byte through sockets or shared memory inside
    // the one progress thread's ucp_worker_progress(): a second channel only doubles the
    // messages in flight (2 channels measured 15-20% slower than 1 over tcp,
    // docs/multihost.md "Sixth look").
    caps.usefulChannels = rdmaWire_ ? 0 : 1;
    caps.authenticatesPeers = true;
    return caps;
  }
  bool canConnect(int peer, const std::string& peerHostId) const override;
  Result<std::vector<std::unique_ptr<Connection>>> connect(const std::vector<int>& peers) override;
  void waitForActivity(std::chrono::microseconds maxWait) override {
    if (worker_) worker_->waitForActivity(maxWait);
  }

 private:
  Status handshake(const std::vector<int>& peers, Deadline until);
  // One round of the handshake: sends mine[i] to peers[i] and receives each peer's
  // message of this round (at most `bytes`) into (*theirs)[i], sized to what came.
  Status exchangeRound(const std::vector<int>& peers, uint32_t round,
                       const std::vector<Message>& mine, size_t bytes, std::vector<Message>* theirs,
                       Deadline until);
  void tuneOutgoingTcp(const std::vector<int>& peers, const std::string& congestion,
                       Deadline until) const;

  Deadline setupDeadline() const;

  TransportContext ctx_;
  const UcxSelection selection_;
  const NetKnobs net_;
  bool rdma_;      // unforced and this rank's UCX has an RDMA wire (published for the peers)
  bool rdmaWire_;  // this rank's UCX has an RDMA wire, forced or not
  std::shared_ptr<UcxWorker> worker_;
};

std::string rdmaKey(const std::string& jobKey, int rank) {
  return jobKey + "/ucx/rdma/" + std::to_string(rank);
}

std::string tcpListenersKey(const std::string& jobKey, int rank) {
  return jobKey + "/ucx/tcp/" + std::to_string(rank);
}

Bytes joinListeners(const std::vector<std::string>& listeners) {
  std::string text;
  for (const std::string& listener : listeners) text += (text.empty() ? "" : ",") + listener;
  return Bytes(text.begin(), text.end());
}

// Every connection a peer accepts on its UCX listener inherits the listener's congestion
// control (set in UcxWorker::create); this sets it on this rank's side, the sockets UCX
// opened to the peers' listeners. UCX connected them while the endpoints were created
// and the handshake ran, so they exist by now.
void UcxTransport::tuneOutgoingTcp(const std::vector<int>& peers, const std::string& congestion,
                                   Deadline until) const {
  std::vector<std::string> listeners;
  for (int peer : peers) {
    Result<Bytes> published = ctx_.store->get(tcpListenersKey(ctx_.jobKey, peer), until);
    if (!published.isOk()) continue;  // only tuning: the peer's data still flows
    std::string text(published->begin(), published->end());
    for (size_t start = 0; start < text.size();) {
      size_t comma = std::min(text.find(',', start), text.size());
      listeners.push_back(text.substr(start, comma - start));
      start = comma + 1;
    }
  }
  Result<int> tuned = tuneTcpSocketsTo(listeners, congestion);
  if (!tuned.isOk()) {
    COLLIE_LOG(INFO, NET) << "ucx: rank " << ctx_.rank << ": " << tuned.status().message()
                          << "; outgoing UCX sockets keep the system congestion control";
    return;
  }
  COLLIE_LOG(INFO, NET) << "ucx: rank " << ctx_.rank << " set TCP congestion control '"
                        << congestion << "' on " << *tuned << " outgoing UCX sockets";
}

Deadline UcxTransport::setupDeadline() const {
  const auto timeout = std::chrono::duration_cast<Clock::duration>(ctx_.timeout);
  return Clock::now() + timeout;
}

bool UcxTransport::canConnect(int peer, const std::string& peerHostId) const {
  if (ctx_.forced) return true;
  if (peerHostId == ctx_.hostId || !rdma_) return false;
  // The peer published its flag in create(), before any rank connects.
  Result<Bytes> flag = ctx_.store->get(rdmaKey(ctx_.jobKey, peer), setupDeadline());
  return flag.isOk() && flag->size() == 1 && (*flag)[0] == '1';
}

Result<std::vector<std::unique_ptr<Connection>>> UcxTransport::connect(
    const std::vector<int>& peers) {
  const Deadline until = setupDeadline();
  if (ctx_.nchannels > kMaxChannels) {
    return invalidArgument("ucx: at most " + std::to_string(kMaxChannels) + " channels");
  }
  if (!worker_) {
    Result<std::shared_ptr<UcxWorker>> worker =
        UcxWorker::create(ctx_.rank, ctx_.nranks, net_.tcpCongestion, selection_);
    if (!worker.isOk()) return worker.status();
    worker_ = *worker;
    // Published before the address: a peer that read the address finds these too.
    COLLIE_RETURN_IF_ERROR(ctx_.store->set(tcpListenersKey(ctx_.jobKey, ctx_.rank),
                                           joinListeners(worker_->tcpListeners())));
    const auto& address = worker_->address();
    COLLIE_RETURN_IF_ERROR(ctx_.store->set(ctx_.jobKey + "/ucx/addr/" + std::to_string(ctx_.rank),
                                           Bytes(address.begin(), address.end())));
  }
  for (int peer : peers) {
    Result<Bytes> address =
        ctx_.store->get(ctx_.jobKey + "/ucx/addr/" + std::to_string(peer), until);
    if (!address.isOk()) {
      return timeoutError("ucx: rank " + std::to_string(peer) +
                              " did not publish its worker address before the deadline: " +
                              address.status().message(),
                          peer);
    }
    COLLIE_RETURN_IF_ERROR(
        worker_->connect(peer, address->data(), address->size(), std::min(ctx_.nchannels, 4)));
  }
  COLLIE_RETURN_IF_ERROR(handshake(peers, until));
  if (net::setsCongestionControl(net_.tcpCongestion)) {
    tuneOutgoingTcp(peers, net_.tcpCongestion, until);
  }

  std::vector<std::unique_ptr<Connection>> out;
  for (int peer : peers) {
    for (int ch = 0; ch < ctx_.nchannels; ++ch) {
      out.push_back(std::make_unique<UcxConnection>(worker_, peer, ch));
    }
  }
  COLLIE_LOG(INFO, NET) << "ucx: rank " << ctx_.rank << " connected to " << peers.size()
                        << " peers, " << ctx_.nchannels << " channels";
  if (!peers.empty()) {
    COLLIE_LOG(TRACE, NET) << "ucx: endpoint to rank " << peers[0] << ":\n"
                           << worker_->describe(peers[0]);
  }
  return out;
}

Status UcxTransport::exchangeRound(const std::vector<int>& peers, uint32_t round,
                                   const std::vector<Message>& mine, size_t bytes,
                                   std::vector<Message>* theirs, Deadline until) {
  struct Pending {
    int peer;
    void* send = nullptr;
    void* recv = nullptr;
    ucp_tag_recv_info_t info{};
  };
  std::vector<Pending> pending(peers.size());
  theirs->assign(peers.size(), Message(bytes + 8));  // room to see an overlong message
  for (size_t i = 0; i < peers.size(); ++i) {
    Pending& p = pending[i];
    p.peer = peers[i];
    ucp_request_param_t rparam{};
    rparam.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    rparam.recv_info.tag_info = &p.info;
    p.recv = ucp_tag_recv_nbx(worker_->worker(), (*theirs)[i].data(), (*theirs)[i].size(),
                              makeTag(TagKind::kHandshake, 0, p.peer, round), kFullMask, &rparam);
    ucp_request_param_t sparam{};
    p.send = ucp_tag_send_nbx(worker_->endpoint(p.peer), mine[i].data(), mine[i].size(),
                              makeTag(TagKind::kHandshake, 0, ctx_.rank, round), &sparam);
  }
  for (size_t i = 0; i < peers.size(); ++i) {
    Pending& p = pending[i];
    std::string who = "handshake with rank " + std::to_string(p.peer);
    bool immediate = p.recv == nullptr;
    if (!immediate && !UCS_PTR_IS_ERR(p.recv)) {
      // Keep the request to read the received length before it is freed.
      ucs_status_t st;
      while ((st = ucp_tag_recv_request_test(p.recv, &p.info)) == UCS_INPROGRESS) {
        if (!worker_->peerStatus(p.peer).isOk()) break;
        if (!worker_->progress()) {
          if (Clock::now() > until) break;
          worker_->waitForActivity(std::chrono::milliseconds(10));
        }
      }
    }
    Status received = waitRequest(*worker_, p.recv, Clock::now(), who);
    if (received.isOk()) received = waitRequest(*worker_, p.send, until, who);
    if (!received.isOk()) {
      if (!worker_->peerStatus(p.peer).isOk()) return worker_->peerStatus(p.peer);
      return Status(
          received.code() == StatusCode::kTimeout ? StatusCode::kTimeout : StatusCode::kRemoteError,
          "ucx: rank " + std::to_string(p.peer) + " did not complete the " + who +
              " before the deadline (is it running? see COLLIE_TIMEOUT): " + received.message(),
          p.peer);
    }
    (*theirs)[i].resize(std::min<size_t>(p.info.length, (*theirs)[i].size()));
  }
  return Status();
}

Status UcxTransport::handshake(const std::vector<int>& peers, Deadline until) {
  const uint64_t jobHash = net::hashJobKey(ctx_.jobKey);
  auto refuse = [&](int peer) {
    COLLIE_LOG(WARN, NET) << "ucx: rank " << ctx_.rank << " refused the endpoint of rank " << peer
                          << ": no proof of the job secret, or another communicator";
    return Status(StatusCode::kUnauthenticated,
                  "ucx: rank " + std::to_string(peer) +
                      " did not prove the job secret (another job or an intruder); check "
                      "that every launcher uses the same COLLIE_JOB_SECRET",
                  peer);
  };
  // Round 0: fresh nonces. One per connect() serves every peer: each proof also names
  // its sender and receiver, and every receiver checks it against its own fresh nonce.
  Result<net::Nonce> nonce = net::freshNonce();
  if (!nonce.isOk()) return nonce.status().withContext("ucx handshake");
  std::vector<Message> mine(peers.size(), encodeNonceMessage(ctx_.rank, jobHash, *nonce));
  std::vector<Message> theirs;
  COLLIE_RETURN_IF_ERROR(exchangeRound(peers, 0, mine, kNonceMessageBytes, &theirs, until));
  std::vector<net::Nonce> peerNonces(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    const Message& got = theirs[i];
    uint32_t magic = 0;
    uint32_t rank = 0;
    uint64_t hash = 0;
    if (got.size() == kNonceMessageBytes) {
      std::memcpy(&magic, got.data(), 4);
      std::memcpy(&rank, got.data() + 4, 4);
      std::memcpy(&hash, got.data() + 8, 8);
      std::memcpy(peerNonces[i].data(), got.data() + 16, net::kNonceBytes);
    }
    if (got.size() != kNonceMessageBytes || magic != kNonceMagic ||
        rank != static_cast<uint32_t>(peers[i]) || hash != jobHash) {
      return refuse(peers[i]);
    }
  }
  // Round 1: proofs over both nonces.
  for (size_t i = 0; i < peers.size(); ++i) {
    mine[i] = encodeProofMessage(
        net::peerProof(ctx_.secret, ctx_.rank, peers[i], 0, jobHash, *nonce, peerNonces[i]));
  }
  COLLIE_RETURN_IF_ERROR(exchangeRound(peers, 1, mine, kProofMessageBytes, &theirs, until));
  for (size_t i = 0; i < peers.size(); ++i) {
    const Message& got = theirs[i];
    Sha256Digest expected =
        net::peerProof(ctx_.secret, peers[i], ctx_.rank, 0, jobHash, peerNonces[i], *nonce);
    uint32_t magic = 0;
    if (got.size() == kProofMessageBytes) std::memcpy(&magic, got.data(), 4);
    if (got.size() != kProofMessageBytes || magic != kProofMagic ||
        !net::secretsEqual(got.data() + 8, expected.data(), net::kMacBytes)) {
      return refuse(peers[i]);
    }
  }
  return Status();
}

Result<std::unique_ptr<Transport>> createUcxTransport(const TransportContext& ctx) {
  if (ctx.store == nullptr) return invalidArgument("ucx transport needs a store");
  // Forced, every pair uses ucx whatever its wire; the flag matters only unforced.
  Result<UcxSelection> selection = UcxSelection::parse(ctx.config);
  if (!selection.isOk()) return selection.status().withContext("ucx transport");
  Result<NetKnobs> net = NetKnobs::parse(ctx.config);
  if (!net.isOk()) return net.status().withContext("ucx transport");
  const bool rdmaWire = rdmaWireUsable(*selection);
  const bool rdma = !ctx.forced && rdmaWire;
  COLLIE_RETURN_IF_ERROR(
      ctx.store->set(rdmaKey(ctx.jobKey, ctx.rank), Bytes{static_cast<uint8_t>(rdma ? '1' : '0')}));
  if (!rdma && !ctx.forced) {
    COLLIE_LOG(INFO, NET) << "ucx: no RDMA wire (rc, ud, dc) on this host; peers on other "
                             "hosts use tcp (COLLIE_TRANSPORT=ucx forces ucx)";
  }
  return std::unique_ptr<Transport>(new UcxTransport(ctx, *selection, *net, rdma, rdmaWire));
}

}  // namespace
}  // namespace ucx

void registerUcxTransport(TransportRegistry& registry) {
  registry.add(TransportFactory{"ucx", 150, &ucx::createUcxTransport, &ucx::describeUcx});
}

}  // namespace collie
