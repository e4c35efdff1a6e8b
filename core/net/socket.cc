#include "core/net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/log/log.h"
#include "core/net/fd_limit.h"
#include "core/net/process_sockets.h"

namespace collie::net {
namespace {

std::string stripBrackets(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

// Milliseconds until the deadline, rounded up, clamped to [0, INT_MAX].
int msUntil(Deadline deadline) {
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, INT32_MAX));
}

// Waits for `events` on fd. OK when ready, Timeout at the deadline.
Status waitFor(int fd, short events, Deadline deadline, const char* what) {
  for (;;) {
    pollfd pfd{fd, events, 0};
    int timeout = msUntil(deadline);
    int rc = ::poll(&pfd, 1, timeout);
    if (rc > 0) return Status();
    if (rc == 0) {
      if (Clock::now() >= deadline) {
        return timeoutError(std::string("socket ") + what + " with " + peerAddressOf(fd) +
                            " did not complete before the deadline");
      }
      continue;
    }
    if (errno == EINTR) continue;
    return systemError(std::string("poll during socket ") + what, errno);
  }
}

// socket()/accept() failures; running out of descriptors names the limit.
Status descriptorError(const std::string& what, int err) {
  return isDescriptorLimit(err) ? descriptorLimitError(what, err) : systemError(what, err);
}

bool isRetryableConnectError(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == ENETUNREACH || err == EHOSTUNREACH ||
         err == ECONNRESET || err == EAGAIN || err == ECONNABORTED;
}

}  // namespace

void Socket::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string SockAddr::toString() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (storage.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&storage);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    return std::string(buf) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (storage.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    return "[" + std::string(buf) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "?";
}

Result<std::vector<SockAddr>> resolve(const std::string& hostIn, uint16_t port) {
  std::string host = stripBrackets(hostIn);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (host.empty() ? AI_PASSIVE : 0);
  addrinfo* list = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
  if (rc != 0) {
    return invalidArgument("cannot resolve host '" + hostIn + "': " + gai_strerror(rc) +
                           " (use a numeric address or a resolvable name)");
  }
  std::vector<SockAddr> out;
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
    SockAddr addr;
    std::memcpy(&addr.storage, ai->ai_addr, ai->ai_addrlen);
    addr.length = ai->ai_addrlen;
    out.push_back(addr);
  }
  ::freeaddrinfo(list);
  if (out.empty()) return invalidArgument("host '" + hostIn + "' has no TCP address");
  return out;
}

std::string joinHostPort(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos && host.front() != '[') {
    return "[" + host + "]:" + std::to_string(port);
  }
  return host + ":" + std::to_string(port);
}

Status splitHostPort(const std::string& text, std::string* host, uint16_t* port) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return invalidArgument("'" + text + "' is not host:port");
  }
  std::string h = text.substr(0, colon);
  if (h.front() == '[') {
    if (h.back() != ']' || h.size() < 3) return invalidArgument("'" + text + "' is not host:port");
    h = h.substr(1, h.size() - 2);
  } else if (h.find(':') != std::string::npos) {
    return invalidArgument("'" + text + "': IPv6 hosts must be in brackets");
  }
  std::string p = text.substr(colon + 1);
  if (p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) {
    return invalidArgument("'" + text + "' has a bad port");
  }
  unsigned long value = std::stoul(p);
  if (value > 65535) return invalidArgument("'" + text + "' has a port above 65535");
  *host = h;
  *port = static_cast<uint16_t>(value);
  return Status();
}

Result<Socket> listen(const std::string& host, uint16_t port, const SocketSetup& setup) {
  Result<std::vector<SockAddr>> addrs = resolve(host, port);
  if (!addrs.isOk()) return addrs.status();
  Status last;
  for (const SockAddr& addr : *addrs) {
    Socket sock(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!sock.valid()) {
      last = descriptorError("socket()", errno);
      continue;
    }
    int one = 1;
    ::setsockopt(sock.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (setup) setup(sock.fd());
    if (::bind(sock.fd(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.length) != 0) {
      last = systemError("bind to " + addr.toString(), errno);
      continue;
    }
    if (::listen(sock.fd(), 1024) != 0) {
      last = systemError("listen on " + addr.toString(), errno);
      continue;
    }
    return sock;
  }
  return last.withContext("cannot listen on " + joinHostPort(host, port));
}

Result<uint16_t> localPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return systemError("getsockname", errno);
  }
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return internalError("socket has no IP address");
}

std::string peerAddressOf(int fd) {
  SockAddr addr;
  addr.length = sizeof(addr.storage);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr.storage), &addr.length) != 0) {
    return "?";
  }
  return addr.toString();
}

Result<Socket> connectWithDeadline(const std::string& host, uint16_t port, Deadline deadline,
                                   const SocketSetup& setup) {
  auto backoff = std::chrono::milliseconds(10);
  Status last = timeoutError("connect to " + joinHostPort(host, port) + " did not start");
  for (;;) {
    Result<std::vector<SockAddr>> addrs = resolve(host, port);
    if (!addrs.isOk()) return addrs.status();
    for (const SockAddr& addr : *addrs) {
      Socket sock(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (!sock.valid()) return descriptorError("socket()", errno);
      if (setup) setup(sock.fd());
      COLLIE_RETURN_IF_ERROR(setNonBlocking(sock.fd(), true));
      int rc = ::connect(sock.fd(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.length);
      int err = rc == 0 ? 0 : errno;
      if (err == EINPROGRESS) {
        Status ready = waitFor(sock.fd(), POLLOUT, deadline, "connect");
        if (!ready.isOk()) {
          return timeoutError("could not connect to " + addr.toString() +
                              " before the deadline: " + last.message());
        }
        socklen_t len = sizeof(err);
        ::getsockopt(sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      }
      if (err == 0) {
        COLLIE_RETURN_IF_ERROR(setNonBlocking(sock.fd(), false));
        return sock;
      }
      last = systemError("connect to " + addr.toString(), err);
      if (!isRetryableConnectError(err)) return last;
    }
    if (Clock::now() + backoff >= deadline) {
      return timeoutError("could not connect to " + joinHostPort(host, port) +
                          " before the deadline (is the peer running?): " + last.message());
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

Result<Socket> acceptWithDeadline(int listenFd, Deadline deadline, std::string* peerAddress) {
  for (;;) {
    COLLIE_RETURN_IF_ERROR(waitFor(listenFd, POLLIN, deadline, "accept"));
    SockAddr addr;
    addr.length = sizeof(addr.storage);
    int fd =
        ::accept4(listenFd, reinterpret_cast<sockaddr*>(&addr.storage), &addr.length, SOCK_CLOEXEC);
    if (fd >= 0) {
      if (peerAddress != nullptr) *peerAddress = addr.toString();
      return Socket(fd);
    }
    if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
    return descriptorError("accept", errno);
  }
}

Status readFull(int fd, void* buf, size_t n, Deadline deadline) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    ssize_t rc = ::recv(fd, p + done, n - done, MSG_DONTWAIT);
    if (rc > 0) {
      done += static_cast<size_t>(rc);
      continue;
    }
    if (rc == 0) {
      return remoteError("connection to " + peerAddressOf(fd) + " closed by the peer after " +
                         std::to_string(done) + " of " + std::to_string(n) + " bytes");
    }
    if (errno == EINTR) continue;
    // A reset is the peer closing too (abortively: it closed with our bytes unread), as
    // writeFull() reads EPIPE and ECONNRESET; callers tell a closed peer by kRemoteError.
    if (errno == ECONNRESET) {
      return remoteError("connection to " + peerAddressOf(fd) + " reset by the peer after " +
                         std::to_string(done) + " of " + std::to_string(n) + " bytes");
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return systemError("recv from " + peerAddressOf(fd), errno);
    }
    COLLIE_RETURN_IF_ERROR(waitFor(fd, POLLIN, deadline, "read"));
  }
  return Status();
}

Status writeFull(int fd, const void* buf, size_t n, Deadline deadline) {
  const auto* p = static_cast<const uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    ssize_t rc = ::send(fd, p + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (rc >= 0) {
      done += static_cast<size_t>(rc);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET) {
      return remoteError("connection to " + peerAddressOf(fd) + " closed by the peer");
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return systemError("send to " + peerAddressOf(fd), errno);
    }
    COLLIE_RETURN_IF_ERROR(waitFor(fd, POLLOUT, deadline, "write"));
  }
  return Status();
}

Status setNonBlocking(int fd, bool nonBlocking) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0) return systemError("fcntl(F_GETFL)", errno);
  flags = nonBlocking ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (::fcntl(fd, F_SETFL, flags) != 0) return systemError("fcntl(F_SETFL)", errno);
  return Status();
}

void tuneDataSocket(int fd, int64_t bufBytes, const std::string& congestion) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (bufBytes > 0) {
    int size = static_cast<int>(std::min<int64_t>(bufBytes, INT32_MAX));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  }
  if (setsCongestionControl(congestion)) {
    int err = 0;
    if (!setCongestionControl(fd, congestion, &err)) {
      static std::once_flag logged;
      std::call_once(logged, [&] {
        COLLIE_LOG(INFO, NET) << "TCP congestion control '" << congestion << "' not available ("
                              << std::strerror(err) << "); keeping the system default";
      });
    }
  }
}

}  // namespace collie::net
