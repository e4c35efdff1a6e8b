// The tcp transport: setup (listen, publish, connect/accept with the secret
// handshake) and registration. The data path is in tcp_connection.cc.
//
// Each rank listens on one port of the interface chosen by COLLIE_SOCKET_IFNAME and
// publishes "host:port" under <jobKey>/tcp/addr/<rank> when it is created. For each
// pair the lower rank connects COLLIE_NSOCKS_PERPEER sockets per channel; the higher
// accepts them, challenges each (core/net/handshake.h), and accepts only those whose
// Hello proves the job secret over its challenge and carries this communicator's job
// key and a (rank, channel, socket index) it still expects. The lower rank in turn
// checks the higher one's proof in its Accept.
//
// Both sides of every rank's handshakes run in one poll loop (handshakeAll): a rank
// answers the challenges of the higher ranks while it challenges the lower ones, so
// no rank waits for a peer that is itself still connecting.
#include <poll.h>
#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/config/config.h"
#include "core/log/log.h"
#include "core/net/fd_limit.h"
#include "core/net/handshake.h"
#include "core/net/net_knobs.h"
#include "core/net/socket.h"
#include "core/transport/transport.h"
#include "transports/tcp/tcp_connection.h"
#include "transports/tcp/tcp_knobs.h"

namespace collie {
namespace tcp {
namespace {

// A connection this rank accepted, until its Hello is in.
struct PendingAccept {
  net::Socket sock;
  std::string address;
  net::Nonce nonce{};  // of the Challenge sent at accept
  uint8_t hello[net::kHelloBytes];
  size_t got = 0;
};

// A connection this rank made, until its Hello is out (the Accept is read after).
struct PendingConnect {
  size_t slot = 0;
  int peer = -1;
  net::Hello hello;
  uint8_t challenge[net::kChallengeBytes];
  size_t got = 0;
  bool answered = false;
};

class TcpTransport final : public Transport {
 public:
  TcpTransport(const TransportContext& ctx, const TcpKnobs& knobs, const NetKnobs& net,
               net::Socket listener, std::string address, std::shared_ptr<EpollHandle> epoll)
      : ctx_(ctx),
        listener_(std::move(listener)),
        address_(std::move(address)),
        epoll_(epoll),
        nsocks_(std::clamp(knobs.socketsPerPeer, 1, kMaxSockets)),
        bufBytes_(knobs.socketBufferBytes),
        congestion_(net.tcpCongestion) {}

  const char* name() const override { return "tcp"; }
  TransportCaps caps() const override {
    TransportCaps caps;
    caps.authenticatesPeers = true;
    return caps;
  }
  bool canConnect(int, const std::string&) const override { return true; }

  Result<std::vector<std::unique_ptr<Connection>>> connect(const std::vector<int>& peers) override;

  void waitForActivity(std::chrono::microseconds maxWait) override {
    epoll_event events[64];
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(maxWait).count();
    ::epoll_wait(epoll_->fd.fd(), events, 64, static_cast<int>(std::clamp<int64_t>(ms, 0, 1000)));
  }

 private:
  Deadline deadline() const {
    const auto timeout = std::chrono::duration_cast<Clock::duration>(ctx_.timeout);
    return Clock::now() + timeout;
  }
  size_t slot(size_t peerIndex, uint32_t channel, uint32_t index) const {
    return (peerIndex * static_cast<size_t>(ctx_.nchannels) + channel) * nsocks_ + index;
  }
  Status handshakeAll(const std::vector<int>& peers, std::vector<net::Socket>* slots,
                      std::vector<PendingConnect>* connects, std::vector<net::SentHello>* sent,
                      Deadline deadline);
  // Reads what has come of one outgoing connection's Challenge and answers it once
  // whole. Non-OK fails the setup (a higher rank that cannot prove itself is fatal).
  Status answerChallenge(PendingConnect& c, net::Socket& sock, net::SentHello* sent,
                         Deadline deadline);
  // Reads what has come of one accepted connection's Hello; once whole, checks it and
  // answers, or closes it (logged). `expected` counts down per accepted connection.
  Status checkHello(PendingAccept& p, const std::vector<int>& peers,
                    std::vector<net::Socket>* slots, size_t* expected, Deadline deadline);
  void tune(int fd) const { net::tuneDataSocket(fd, bufBytes_, congestion_); }

  TransportContext ctx_;
  net::Socket listener_;
  std::string address_;
  std::shared_ptr<EpollHandle> epoll_;
  int nsocks_ = 2;
  int64_t bufBytes_ = 0;
  std::string congestion_;
};

Result<std::vector<std::unique_ptr<Connection>>> TcpTransport::connect(
    const std::vector<int>& peers) {
  const Deadline until = deadline();
  const uint64_t jobHash = net::hashJobKey(ctx_.jobKey);
  std::vector<net::Socket> slots(peers.size() * ctx_.nchannels * nsocks_);

  // 1. Connect to the higher ranks; their challenges are answered in 2, the Accepts
  //    collected in 3, so no rank waits for a peer that is itself still connecting.
  std::vector<PendingConnect> connects;
  std::vector<net::SentHello> sent(slots.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    int peer = peers[i];
    if (peer < ctx_.rank) continue;
    std::string key = ctx_.jobKey + "/tcp/addr/" + std::to_string(peer);
    Result<Bytes> addr = ctx_.store->get(key, until);
    if (!addr.isOk()) {
      return timeoutError(
          "tcp: rank " + std::to_string(peer) +
              " did not publish its address before the deadline: " + addr.status().message(),
          peer);
    }
    std::string host;
    uint16_t port = 0;
    COLLIE_RETURN_IF_ERROR(
        net::splitHostPort(std::string(addr->begin(), addr->end()), &host, &port));
    for (uint32_t ch = 0; ch < static_cast<uint32_t>(ctx_.nchannels); ++ch) {
      for (uint32_t k = 0; k < static_cast<uint32_t>(nsocks_); ++k) {
        Result<net::Socket> sock =
            net::connectWithDeadline(host, port, until, [this](int fd) { tune(fd); });
        if (!sock.isOk()) {
          return remoteError("tcp: cannot connect to rank " + std::to_string(peer) + " at " +
                                 net::joinHostPort(host, port) + ": " + sock.status().message(),
                             peer);
        }
        PendingConnect c;
        c.slot = slot(i, ch, k);
        c.peer = peer;
        c.hello = net::Hello{net::Purpose::kTcpData, ctx_.rank, ch, k, jobHash};
        connects.push_back(c);
        slots[c.slot] = std::move(*sock);
      }
    }
  }

  // 2. Answer the higher ranks' challenges; challenge and accept the lower ranks.
  COLLIE_RETURN_IF_ERROR(handshakeAll(peers, &slots, &connects, &sent, until));

  // Every peer is in: stop listening, so that no stranger's connection waits unserved
  // in the backlog (it is refused instead).
  listener_.reset();

  // 3. Collect the answers to our Hellos.
  for (size_t i = 0; i < peers.size(); ++i) {
    if (peers[i] < ctx_.rank) continue;
    for (size_t s = slot(i, 0, 0); s < slot(i + 1, 0, 0); ++s) {
      Status st = net::receiveAccept(slots[s].fd(), sent[s], ctx_.secret, until);
      if (!st.isOk()) {
        return Status(st.code(),
                      "tcp: rank " + std::to_string(peers[i]) +
                          " did not accept our connection: " + st.message(),
                      peers[i]);
      }
    }
  }

  // 4. Make the sockets non-blocking, watch them, build the connections.
  std::vector<std::unique_ptr<Connection>> out;
  for (size_t i = 0; i < peers.size(); ++i) {
    for (int ch = 0; ch < ctx_.nchannels; ++ch) {
      std::vector<net::Socket> socks;
      for (int k = 0; k < nsocks_; ++k) {
        net::Socket& sock = slots[slot(i, ch, k)];
        COLLIE_RETURN_IF_ERROR(net::setNonBlocking(sock.fd(), true));
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
        ev.data.fd = sock.fd();
        if (::epoll_ctl(epoll_->fd.fd(), EPOLL_CTL_ADD, sock.fd(), &ev) != 0) {
          return systemError("tcp: epoll_ctl", errno);
        }
        socks.push_back(std::move(sock));
      }
      out.push_back(std::make_unique<TcpConnection>(peers[i], ch, std::move(socks), epoll_));
    }
  }
  COLLIE_LOG(INFO, NET) << "tcp: rank " << ctx_.rank << " connected to " << peers.size()
                        << " peers, " << ctx_.nchannels << " channels x " << nsocks_
                        << " sockets, listening on " << address_;
  return out;
}

Status TcpTransport::handshakeAll(const std::vector<int>& peers, std::vector<net::Socket>* slots,
                                  std::vector<PendingConnect>* connects,
                                  std::vector<net::SentHello>* sent, Deadline until) {
  size_t expected = 0;
  for (int peer : peers) {
    if (peer < ctx_.rank) expected += static_cast<size_t>(ctx_.nchannels * nsocks_);
  }
  size_t unanswered = connects->size();
  std::vector<PendingAccept> pending;
  std::vector<pollfd> fds;
  std::vector<PendingConnect*> polled;  // fds[1 + polledAccepts + j] is polled[j]
  while (expected > 0 || unanswered > 0) {
    fds.clear();
    polled.clear();
    fds.push_back({expected > 0 ? listener_.fd() : -1, POLLIN, 0});
    for (const PendingAccept& p : pending) fds.push_back({p.sock.fd(), POLLIN, 0});
    for (PendingConnect& c : *connects) {
      if (c.answered) continue;
      fds.push_back({(*slots)[c.slot].fd(), POLLIN, 0});
      polled.push_back(&c);
    }
    auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) {
      for (size_t i = 0; i < peers.size(); ++i) {
        if (peers[i] >= ctx_.rank) continue;
        for (size_t s = slot(i, 0, 0); s < slot(i + 1, 0, 0); ++s) {
          if (!(*slots)[s].valid()) {
            return timeoutError("tcp: rank " + std::to_string(peers[i]) +
                                    " did not connect to rank " + std::to_string(ctx_.rank) +
                                    " before the deadline (is it running? see COLLIE_TIMEOUT)",
                                peers[i]);
          }
        }
      }
      if (!polled.empty()) {
        return timeoutError("tcp: rank " + std::to_string(polled[0]->peer) +
                                " did not send its handshake challenge to rank " +
                                std::to_string(ctx_.rank) + " before the deadline",
                            polled[0]->peer);
      }
      return timeoutError("tcp: connection setup timed out");
    }
    int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 1000)));
    if (rc < 0 && errno != EINTR) return systemError("tcp: poll during connection setup", errno);
    if (rc <= 0) continue;
    // fds holds the pending accepts polled this round; one accepted below is polled from
    // the next round on (indexing fds by the grown list read past its end).
    const size_t polledAccepts = pending.size();
    if (fds[0].revents & POLLIN) {
      net::SockAddr addr;
      addr.length = sizeof(addr.storage);
      int fd = ::accept4(listener_.fd(), reinterpret_cast<sockaddr*>(&addr.storage), &addr.length,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        PendingAccept p;
        p.sock.reset(fd);
        p.address = addr.toString();
        tune(fd);
        Result<net::Nonce> nonce = net::freshNonce();
        if (!nonce.isOk()) return nonce.status().withContext("tcp handshake");
        p.nonce = *nonce;
        // 24 bytes into a new socket's empty send buffer: written at once.
        auto challenge = net::encodeChallenge(p.nonce);
        if (net::writeFull(fd, challenge.data(), challenge.size(), until).isOk()) {
          pending.push_back(std::move(p));
        }
      } else if (net::isDescriptorLimit(errno) || errno == ENOBUFS || errno == ENOMEM) {
        // The connection stays in the backlog and the listener stays readable: polling
        // again would spin until the deadline. Fail now; closing the listener resets
        // the waiting peers, so they fail too instead of waiting for our Accept.
        const std::string what = "tcp: rank " + std::to_string(ctx_.rank) +
                                 " cannot accept the connections of its peers (" +
                                 std::to_string(expected) + " still expected): accept";
        return net::isDescriptorLimit(errno) ? net::descriptorLimitError(what, errno)
                                             : systemError(what, errno);
      }
      // Anything else (EAGAIN, ECONNABORTED, a network error on the new socket) is
      // transient: poll again.
    }
    for (size_t i = 1; i <= polledAccepts; ++i) {
      if (fds[i].revents == 0) continue;
      COLLIE_RETURN_IF_ERROR(checkHello(pending[i - 1], peers, slots, &expected, until));
    }
    for (size_t j = 0; j < polled.size(); ++j) {
      if (fds[1 + polledAccepts + j].revents == 0) continue;
      PendingConnect& c = *polled[j];
      COLLIE_RETURN_IF_ERROR(answerChallenge(c, (*slots)[c.slot], &(*sent)[c.slot], until));
      if (c.answered) --unanswered;
    }
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [](const PendingAccept& p) { return !p.sock.valid(); }),
                  pending.end());
  }
  return Status();
}

Status TcpTransport::answerChallenge(PendingConnect& c, net::Socket& sock, net::SentHello* sent,
                                     Deadline until) {
  ssize_t n = ::recv(sock.fd(), c.challenge + c.got, net::kChallengeBytes - c.got, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return Status();
  if (n <= 0) {
    return remoteError("tcp: rank " + std::to_string(c.peer) +
                           " closed our connection before its handshake challenge" +
                           (n < 0 ? std::string(": ") + std::strerror(errno) : std::string()),
                       c.peer);
  }
  c.got += static_cast<size_t>(n);
  if (c.got < net::kChallengeBytes) return Status();
  Result<net::Nonce> serverNonce = net::decodeChallenge(c.challenge);
  if (!serverNonce.isOk()) {
    return Status(serverNonce.status().code(),
                  "tcp: rank " + std::to_string(c.peer) + ": " + serverNonce.status().message(),
                  c.peer);
  }
  Result<net::Nonce> clientNonce = net::freshNonce();
  if (!clientNonce.isOk()) return clientNonce.status().withContext("tcp handshake");
  sent->serverNonce = *serverNonce;
  sent->bytes = net::encodeHello(c.hello, ctx_.secret, *serverNonce, *clientNonce);
  COLLIE_RETURN_IF_ERROR(net::writeFull(sock.fd(), sent->bytes.data(), sent->bytes.size(), until));
  c.answered = true;
  return Status();
}

Status TcpTransport::checkHello(PendingAccept& p, const std::vector<int>& peers,
                                std::vector<net::Socket>* slots, size_t* expected, Deadline until) {
  ssize_t n = ::recv(p.sock.fd(), p.hello + p.got, net::kHelloBytes - p.got, 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return Status();
  if (n <= 0) {
    COLLIE_LOG(WARN, NET) << "tcp: connection from " << p.address << " closed during the handshake";
    p.sock.reset();
    return Status();
  }
  p.got += static_cast<size_t>(n);
  if (p.got < net::kHelloBytes) return Status();
  Result<net::Hello> hello = net::decodeHello(p.hello, ctx_.secret, p.nonce);
  std::string why;
  size_t s = 0;
  if (!hello.isOk()) {
    why = hello.status().message();
  } else if (hello->purpose != net::Purpose::kTcpData ||
             hello->jobHash != net::hashJobKey(ctx_.jobKey)) {
    why = "connection for another purpose or communicator";
  } else {
    auto it = std::lower_bound(peers.begin(), peers.end(), hello->rank);
    if (it == peers.end() || *it != hello->rank || hello->rank >= ctx_.rank ||
        hello->channel >= static_cast<uint32_t>(ctx_.nchannels) ||
        hello->socketIndex >= static_cast<uint32_t>(nsocks_)) {
      why = "unexpected rank " + std::to_string(hello->rank) + " channel " +
            std::to_string(hello->channel) + " socket " + std::to_string(hello->socketIndex);
    } else {
      s = slot(static_cast<size_t>(it - peers.begin()), hello->channel, hello->socketIndex);
      if ((*slots)[s].valid()) why = "duplicate connection from rank " + std::to_string(*it);
    }
  }
  if (!why.empty()) {
    COLLIE_LOG(WARN, NET) << "tcp: rank " << ctx_.rank << " rejected connection from " << p.address
                          << ": " << why;
    p.sock.reset();
    return Status();
  }
  auto accept = net::encodeAccept(p.hello, ctx_.secret, p.nonce);
  Status st = net::writeFull(p.sock.fd(), accept.data(), accept.size(), until);
  if (!st.isOk()) {
    p.sock.reset();
    return Status();
  }
  COLLIE_RETURN_IF_ERROR(net::setNonBlocking(p.sock.fd(), false));
  (*slots)[s] = std::move(p.sock);
  --*expected;
  return Status();
}

Result<std::unique_ptr<Transport>> createTcpTransport(const TransportContext& ctx) {
  if (ctx.store == nullptr) return invalidArgument("tcp transport needs a store");
  Result<TcpKnobs> knobs = TcpKnobs::parse(ctx.config);
  if (!knobs.isOk()) return knobs.status().withContext("tcp transport");
  Result<NetKnobs> netKnobs = NetKnobs::parse(ctx.config);
  if (!netKnobs.isOk()) return netKnobs.status().withContext("tcp transport");
  Result<net::InterfaceAddress> ifc = net::selectInterface(netKnobs->socketInterfaces);
  if (!ifc.isOk()) return ifc.status().withContext("tcp transport");
  const int64_t bufBytes = knobs->socketBufferBytes;
  Result<net::Socket> listener =
      net::listen(ifc->address, 0, [bufBytes](int fd) { net::tuneDataSocket(fd, bufBytes, ""); });
  if (!listener.isOk()) return listener.status().withContext("tcp transport");
  Result<uint16_t> port = net::localPort(listener->fd());
  if (!port.isOk()) return port.status();
  COLLIE_RETURN_IF_ERROR(net::setNonBlocking(listener->fd(), true));
  auto epoll = std::make_shared<EpollHandle>();
  epoll->fd.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll->fd.valid()) return systemError("tcp: epoll_create1", errno);
  std::string address = net::joinHostPort(ifc->address, *port);
  std::string key = ctx.jobKey + "/tcp/addr/" + std::to_string(ctx.rank);
  COLLIE_RETURN_IF_ERROR(ctx.store->set(key, Bytes(address.begin(), address.end())));
  COLLIE_LOG(INFO, NET) << "tcp: rank " << ctx.rank << " listens on " << address << " ("
                        << ifc->name << ")";
  return std::unique_ptr<Transport>(
      new TcpTransport(ctx, *knobs, *netKnobs, std::move(*listener), address, std::move(epoll)));
}

}  // namespace
}  // namespace tcp

void registerTcpTransport(TransportRegistry& registry) {
  registry.add(TransportFactory{"tcp", 200, &tcp::createTcpTransport});
}

}  // namespace collie
