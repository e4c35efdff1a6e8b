// The TCP store server: one thread, poll() over the listening socket, every client
// and a wake-up pipe. Clients are state machines (handshake: the server's Challenge
// goes out right after accept, then the client's Hello is read and checked, see
// core/net/handshake.h; then requests); a get
// for a missing key parks its client (no further requests of that client are read)
// until the key is set or the get's wait expires. A client that fails the handshake,
// breaks a protocol limit or sends an unknown op is logged and dropped alone.
//
// Strangers cannot deny the store to the job: unauthenticated connections are capped
// (COLLIE_STORE_MAX_PENDING, COLLIE_STORE_MAX_PENDING_PER_HOST; the oldest make room,
// see pending_connections.h) and dropped after COLLIE_STORE_HANDSHAKE_TIMEOUT. When
// accept() fails because the process is out of descriptors (EMFILE), the oldest
// unauthenticated connection is closed to make room (once it has been pending for
// kEvictableAge), else a reserve descriptor kept open for this moment; with neither,
// accepting pauses until the oldest becomes evictable or for kAcceptPause (the waiting
// connections stay in the kernel's backlog) instead of polling a listener that stays
// readable, which would spin.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "collie/store.h"
#include "core/bootstrap/pending_connections.h"
#include "core/bootstrap/store_knobs.h"
#include "core/bootstrap/store_protocol.h"
#include "core/bootstrap/store_server.h"
#include "core/config/config.h"
#include "core/log/log.h"
#include "core/net/fd_limit.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"

namespace collie {
namespace {

using namespace store_protocol;  // NOLINT(build/namespaces)

constexpr size_t kReadChunk = 64 * 1024;
constexpr int kAcceptBurst = 256;  // accepts per poll round, so that clients are served too
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
// At the descriptor limit only connections pending this long are closed to make room:
// a rank answers the Challenge sent at accept within one round trip, so a younger one
// may be a rank whose Hello is on its way (with `ulimit -n 10`, rank 1 was evicted by
// rank 0 otherwise). Short, so that a backlog of strangers drains quickly (one
// descriptor's worth of them per kEvictableAge at worst).
constexpr auto kEvictableAge = std::chrono::milliseconds(50);
// Past the pending caps only connections pending this long are evicted; a newer
// connection is refused instead (closed before its Challenge; collie's store client
// retries). Long enough for a rank on a host busy starting dozens of ranks to answer
// its Challenge; short enough that a stranger's idle connections soon make room.
constexpr auto kCapEvictionGrace = std::chrono::milliseconds(500);
constexpr auto kDropLogInterval = std::chrono::seconds(1);

// "1.2.3.4:80" -> "1.2.3.4", "[::1]:80" -> "[::1]".
std::string hostOf(const std::string& address) {
  size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

// A descriptor that accept() may have when the process has no other left.
net::Socket openReserve() { return net::Socket(::open("/dev/null", O_RDONLY | O_CLOEXEC)); }

struct Client {
  net::Socket sock;
  std::string address;
  bool authenticated = false;
  net::Nonce nonce{};  // of the Challenge this client must answer
  Deadline handshakeDeadline;
  std::vector<uint8_t> in;  // unparsed bytes start at inPos
  size_t inPos = 0;
  std::vector<uint8_t> out;  // unsent bytes start at outPos
  size_t outPos = 0;
  std::optional<std::string> parkedKey;
  Deadline parkedDeadline;
};

class TcpStoreServer final : public StoreServer {
 public:
  TcpStoreServer(net::Socket listener, uint16_t port, const JobSecret& secret, int wakeRead,
                 int wakeWrite, const StoreKnobs& knobs)
      : listener_(std::move(listener)),
        port_(port),
        secret_(secret),
        wakeRead_(wakeRead),
        wakeWrite_(wakeWrite),
        handshakeTimeout_(knobs.handshakeTimeout),
        pending_(knobs.maxPending, knobs.maxPendingPerHost, kCapEvictionGrace),
        reserve_(openReserve()) {
    thread_ = std::thread([this] { run(); });
  }

  ~TcpStoreServer() override {
    stop_.store(true);
    char byte = 1;
    [[maybe_unused]] ssize_t rc = ::write(wakeWrite_.fd(), &byte, 1);
    thread_.join();
  }

  uint16_t port() const override { return port_; }

 private:
  void run() {
    pthread_setname_np(pthread_self(), "collie-store");
    std::vector<pollfd> fds;
    std::vector<uint64_t> ids;
    while (!stop_.load()) {
      fds.clear();
      ids.clear();
      if (!reserve_.valid()) reserve_ = openReserve();
      Deadline next = Clock::now() + std::chrono::seconds(1);
      const bool accepting = Clock::now() >= acceptPausedUntil_;
      if (!accepting) next = std::min(next, acceptPausedUntil_);
      fds.push_back({wakeRead_.fd(), POLLIN, 0});
      fds.push_back({accepting ? listener_.fd() : -1, POLLIN, 0});
      for (auto& [id, c] : clients_) {
        short events = c.parkedKey ? 0 : POLLIN;
        if (c.outPos < c.out.size()) events |= POLLOUT;
        fds.push_back({c.sock.fd(), events, 0});
        ids.push_back(id);
        if (!c.authenticated) next = std::min(next, c.handshakeDeadline);
        if (c.parkedKey) next = std::min(next, c.parkedDeadline);
      }
      auto wait = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
      int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait, 0)));
      if (rc < 0 && errno != EINTR) {
        COLLIE_LOG(WARN, BOOTSTRAP) << "store server poll failed: " << std::strerror(errno);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      if (rc > 0 && (fds[1].revents & POLLIN)) acceptClients();
      for (size_t i = 0; rc > 0 && i < ids.size(); ++i) {
        short revents = fds[i + 2].revents;
        if (revents == 0) continue;
        auto it = clients_.find(ids[i]);
        if (it == clients_.end()) continue;
        if ((revents & (POLLIN | POLLHUP | POLLERR)) && !readFrom(ids[i], it->second)) continue;
        if (revents & POLLOUT) flush(ids[i], it->second);
      }
      expire();
    }
  }

  void acceptClients() {
    for (int i = 0; i < kAcceptBurst; ++i) {
      net::SockAddr addr;
      addr.length = sizeof(addr.storage);
      int fd = ::accept4(listener_.fd(), reinterpret_cast<sockaddr*>(&addr.storage), &addr.length,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        addClient(fd, addr.toString());
        continue;
      }
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      resumeAcceptAt_ = Clock::now() + kAcceptPause;
      if (net::isDescriptorLimit(err) && makeRoom()) continue;
      if (net::isDescriptorLimit(err) || err == ENOBUFS || err == ENOMEM) {
        pauseAccepting(err);
        return;
      }
      // EINTR, ECONNABORTED or a network error on the new connection: try the next.
    }
  }

  void addClient(int fd, const std::string& address) {
    const uint64_t id = nextId_++;
    Client& c = clients_[id];
    c.sock.reset(fd);
    net::tuneDataSocket(fd, 0, "");  // TCP_NODELAY: replies are small and latency-bound
    c.address = address;
    c.handshakeDeadline = Clock::now() + handshakeTimeout_;
    PendingConnections::Admission admission = pending_.admit(id, hostOf(address), Clock::now());
    for (uint64_t old : admission.evict) {
      drop(old,
           "too many unauthenticated connections (COLLIE_STORE_MAX_PENDING, "
           "COLLIE_STORE_MAX_PENDING_PER_HOST); closed the oldest");
    }
    if (!admission.admitted) {
      drop(id,
           "too many unauthenticated connections (COLLIE_STORE_MAX_PENDING, "
           "COLLIE_STORE_MAX_PENDING_PER_HOST), all pending for less than their grace period; "
           "refused the newest (a collie client retries)");
      return;
    }
    // The Challenge goes out now: a rank answers it within a round trip, so that it is
    // authenticated before any later connection can evict it.
    Result<net::Nonce> nonce = net::freshNonce();
    if (!nonce.isOk()) {
      drop(id, nonce.status().message());
      return;
    }
    c.nonce = *nonce;
    auto challenge = net::encodeChallenge(c.nonce);
    c.out.insert(c.out.end(), challenge.begin(), challenge.end());
    flush(id, c);
  }

  // accept() failed for want of a descriptor: frees one. False when none can be freed
  // now (the caller pauses accepting and tries again).
  bool makeRoom() {
    if (std::optional<uint64_t> oldest = pending_.oldest()) {
      const Client& c = clients_.at(*oldest);
      const Deadline evictable = c.handshakeDeadline - handshakeTimeout_ + kEvictableAge;
      if (Clock::now() >= evictable) {
        drop(*oldest, "unauthenticated connection closed: the process is at its descriptor limit");
        return true;
      }
      resumeAcceptAt_ = evictable;
    }
    if (reserve_.valid()) {
      reserve_.reset();  // reopened once descriptors are free again
      return true;
    }
    return false;
  }

  void pauseAccepting(int err) {
    acceptPausedUntil_ = resumeAcceptAt_;
    if (Clock::now() < nextPauseLog_) return;
    nextPauseLog_ = Clock::now() + std::chrono::seconds(10);
    COLLIE_LOG(WARN, BOOTSTRAP) << "store server cannot accept connections: "
                                << (net::isDescriptorLimit(err) ? net::descriptorLimitText(err)
                                                                : std::strerror(err))
                                << "; they wait in the backlog until descriptors are free";
  }

  // Closes a client. Unauthenticated ones are logged at most once per kDropLogInterval
  // (a flood of strangers must not flood the log), with a count of the others.
  void drop(uint64_t id, const std::string& why) {
    auto it = clients_.find(id);
    if (it == clients_.end()) return;
    if (!why.empty() && it->second.authenticated) {
      COLLIE_LOG(WARN, BOOTSTRAP) << "store server dropped client " << it->second.address << ": "
                                  << why;
    } else if (!why.empty() && Clock::now() < nextDropLog_) {
      ++unloggedDrops_;
    } else if (!why.empty()) {
      COLLIE_LOG(WARN, BOOTSTRAP)
          << "store server dropped client " << it->second.address << ": " << why
          << (unloggedDrops_ > 0 ? " (and " + std::to_string(unloggedDrops_) +
                                       " other unauthenticated connections since the last report)"
                                 : std::string());
      unloggedDrops_ = 0;
      nextDropLog_ = Clock::now() + kDropLogInterval;
    }
    pending_.remove(id);
    if (it->second.parkedKey) waiters_[*it->second.parkedKey].erase(id);
    clients_.erase(it);
  }

  // Reads what is available and handles complete messages. False if the client is gone.
  bool readFrom(uint64_t id, Client& c) {
    uint8_t buf[kReadChunk];
    for (;;) {
      ssize_t n = ::recv(c.sock.fd(), buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        c.in.insert(c.in.end(), buf, buf + n);
        if (static_cast<size_t>(n) < sizeof(buf)) break;
        continue;
      }
      if (n == 0) {
        drop(id, "");  // orderly close
        return false;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      drop(id, std::string("recv failed: ") + std::strerror(errno));
      return false;
    }
    return handleInput(id, c);
  }

  bool handleInput(uint64_t id, Client& c) {
    while (!c.parkedKey) {
      const uint8_t* p = c.in.data() + c.inPos;
      size_t avail = c.in.size() - c.inPos;
      if (!c.authenticated) {
        if (avail < net::kHelloBytes) break;
        Result<net::Hello> hello = net::decodeHello(p, secret_, c.nonce);
        if (hello.isOk() && hello->purpose != net::Purpose::kStore) {
          hello = unauthenticated("connection is not for the store");
        }
        if (!hello.isOk()) {
          drop(id, "handshake failed: " + hello.status().message());
          return false;
        }
        auto accept = net::encodeAccept(p, secret_, c.nonce);
        c.inPos += net::kHelloBytes;
        c.authenticated = true;
        pending_.remove(id);
        c.out.insert(c.out.end(), accept.begin(), accept.end());
        continue;
      }
      Request request;
      std::string why;
      Parse parsed = parseRequest(p, avail, &request, &why);
      if (parsed == Parse::kNeedMore) break;
      if (parsed == Parse::kBad) {
        drop(id, why);
        return false;
      }
      const uint8_t op = request.op;
      const uint64_t arg = request.arg;
      std::string key(request.key);
      const uint8_t* value = request.value;
      c.inPos += request.consumed;
      if (op == kSet) {
        values_[key] = Bytes(value, value + arg);
        respond(c, kOk, nullptr, 0);
        wake(key);
      } else if (op == kAdd) {
        int64_t result = (counters_[key] += static_cast<int64_t>(arg));
        Bytes text(8);
        put64(text.data(), static_cast<uint64_t>(result));
        values_[key] = text;
        respond(c, kOk, text.data(), text.size());
        wake(key);
      } else {
        auto it = values_.find(key);
        if (it != values_.end()) {
          respond(c, kOk, it->second.data(), it->second.size());
        } else {
          c.parkedKey = key;
          c.parkedDeadline =
              Clock::now() + std::chrono::milliseconds(std::min<uint64_t>(arg, uint64_t{1} << 40));
          waiters_[key].insert(id);
        }
      }
    }
    if (c.inPos == c.in.size()) {
      c.in.clear();
      c.inPos = 0;
    } else if (c.inPos > (1u << 20) && c.inPos * 2 > c.in.size()) {
      c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(c.inPos));
      c.inPos = 0;
    }
    return flush(id, c);
  }

  void respond(Client& c, uint8_t status, const uint8_t* payload, size_t n) {
    uint8_t header[kResponseHeaderBytes] = {0};
    header[0] = status;
    put64(header + 8, n);
    c.out.insert(c.out.end(), header, header + sizeof(header));
    if (n > 0) c.out.insert(c.out.end(), payload, payload + n);
  }

  // Answers the clients parked on `key` and lets them continue with their next request.
  void wake(const std::string& key) {
    auto it = waiters_.find(key);
    if (it == waiters_.end()) return;
    std::set<uint64_t> ids = std::move(it->second);
    waiters_.erase(it);
    const Bytes& value = values_[key];
    for (uint64_t id : ids) {
      auto cit = clients_.find(id);
      if (cit == clients_.end()) continue;
      cit->second.parkedKey.reset();
      respond(cit->second, kOk, value.data(), value.size());
      pendingInput_.push_back(id);
    }
  }

  // Expires handshakes and parked gets, and resumes clients woken by a set.
  void expire() {
    Deadline now = Clock::now();
    std::vector<uint64_t> late;
    for (auto& [id, c] : clients_) {
      if (!c.authenticated && now >= c.handshakeDeadline) late.push_back(id);
      if (c.parkedKey && now >= c.parkedDeadline) {
        waiters_[*c.parkedKey].erase(id);
        c.parkedKey.reset();
        respond(c, kTimedOut, nullptr, 0);
        pendingInput_.push_back(id);
      }
    }
    for (uint64_t id : late) {
      drop(id, "no handshake within " + std::to_string(handshakeTimeout_.count() / 1000) +
                   " ms (COLLIE_STORE_HANDSHAKE_TIMEOUT)");
    }
    while (!pendingInput_.empty()) {
      uint64_t id = pendingInput_.back();
      pendingInput_.pop_back();
      auto it = clients_.find(id);
      if (it != clients_.end()) handleInput(id, it->second);
    }
  }

  // Sends queued output. False if the client is gone.
  bool flush(uint64_t id, Client& c) {
    while (c.outPos < c.out.size()) {
      ssize_t n = ::send(c.sock.fd(), c.out.data() + c.outPos, c.out.size() - c.outPos,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        c.outPos += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      drop(id, std::string("send failed: ") + std::strerror(errno));
      return false;
    }
    c.out.clear();
    c.outPos = 0;
    return true;
  }

  net::Socket listener_;
  uint16_t port_;
  JobSecret secret_;
  net::Socket wakeRead_;
  net::Socket wakeWrite_;
  std::atomic<bool> stop_{false};
  std::chrono::microseconds handshakeTimeout_;
  PendingConnections pending_;
  net::Socket reserve_;
  Deadline acceptPausedUntil_{};
  Deadline resumeAcceptAt_{};  // set by makeRoom when it cannot free a descriptor
  Deadline nextPauseLog_{};
  Deadline nextDropLog_{};
  uint64_t unloggedDrops_ = 0;
  std::map<uint64_t, Client> clients_;
  uint64_t nextId_ = 1;
  std::map<std::string, Bytes> values_;
  std::map<std::string, int64_t> counters_;
  std::map<std::string, std::set<uint64_t>> waiters_;
  std::vector<uint64_t> pendingInput_;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<StoreServer>> StoreServer::start(const std::string& bindHost, uint16_t port,
                                                        const JobSecret& secret) {
  return startStoreServer(bindHost, port, secret, Config::fromEnvironment());
}

Result<std::unique_ptr<StoreServer>> startStoreServer(const std::string& bindHost, uint16_t port,
                                                      const JobSecret& secret,
                                                      const Config& config) {
  Result<StoreKnobs> knobs = StoreKnobs::parse(config);
  if (!knobs.isOk()) return knobs.status().withContext("store server");
  Result<net::Socket> listener = net::listen(bindHost, port);
  if (!listener.isOk()) return listener.status().withContext("store server");
  COLLIE_RETURN_IF_ERROR(net::setNonBlocking(listener->fd(), true));
  Result<uint16_t> bound = net::localPort(listener->fd());
  if (!bound.isOk()) return bound.status();
  int pipeFds[2];
  if (::pipe2(pipeFds, O_CLOEXEC | O_NONBLOCK) != 0) return systemError("pipe2", errno);
  COLLIE_LOG(INFO, BOOTSTRAP) << "store server listening on "
                              << net::joinHostPort(bindHost, *bound);
  return std::unique_ptr<StoreServer>(
      new TcpStoreServer(std::move(*listener), *bound, secret, pipeFds[0], pipeFds[1], *knobs));
}

}  // namespace collie
