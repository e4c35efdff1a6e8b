// Socket utilities shared by the bootstrap store and the tcp transport.
//
// Socket owns one file descriptor (closed on destruction, movable, not copyable).
// The free functions resolve numeric IPv4/IPv6 addresses and host names, listen,
// connect with a deadline (retrying while the peer is not listening yet), and read or
// write an exact number of bytes with a deadline (poll-based; they work on blocking
// and non-blocking descriptors). Every failure is a Status that says what was being
// done and with which address; none of them throws or raises SIGPIPE.
//
// Interface selection follows COLLIE_SOCKET_IFNAME (NCCL_SOCKET_IFNAME syntax):
// a comma list of name prefixes; a leading '=' requires exact names; a leading '^'
// excludes the listed names instead (the two combine as "^=eth0"). With no spec, the
// first up, non-loopback interface is used, else loopback.
//
// Thread safety: all functions are reentrant; a Socket object is not synchronised.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collie/status.h"
#include "collie/store.h"

namespace collie::net {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { reset(); }
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t length = 0;

  int family() const { return storage.ss_family; }
  // "1.2.3.4:80" or "[::1]:80".
  std::string toString() const;
};

// Resolves `host` (numeric IPv4/IPv6, with or without brackets, or a name) and `port`
// to one or more addresses, numeric forms first. Empty host means the wildcard.
Result<std::vector<SockAddr>> resolve(const std::string& host, uint16_t port);

// Formats host and port as "host:port", with IPv6 hosts in brackets.
std::string joinHostPort(const std::string& host, uint16_t port);
// Splits "host:port" / "[v6]:port"; InvalidArgument on anything else.
Status splitHostPort(const std::string& text, std::string* host, uint16_t* port);

// Called on a fresh socket before bind/connect, e.g. to set buffer sizes.
using SocketSetup = std::function<void(int fd)>;

// A listening TCP socket on host:port (port 0 picks a free port; SO_REUSEADDR set).
Result<Socket> listen(const std::string& host, uint16_t port, const SocketSetup& setup = {});
// The local port a socket is bound to.
Result<uint16_t> localPort(int fd);

// Connects to host:port, retrying ECONNREFUSED/ETIMEDOUT/... with backoff until the
// deadline (the peer may not listen yet). The returned socket is blocking.
Result<Socket> connectWithDeadline(const std::string& host, uint16_t port, Deadline deadline,
                                   const SocketSetup& setup = {});

// Accepts one connection, waiting at most until the deadline. The returned socket is
// blocking. `peerAddress` (optional) receives the peer's "ip:port".
Result<Socket> acceptWithDeadline(int listenFd, Deadline deadline,
                                  std::string* peerAddress = nullptr);

// Reads / writes exactly n bytes or fails: Timeout at the deadline, RemoteError when the
// peer closed the connection (orderly or by a reset), SystemError for other OS errors.
Status readFull(int fd, void* buf, size_t n, Deadline deadline);
Status writeFull(int fd, const void* buf, size_t n, Deadline deadline);

Status setNonBlocking(int fd, bool nonBlocking);
// TCP_NODELAY, SO_SNDBUF/SO_RCVBUF (bufBytes > 0) and congestion control (unless empty
// or "system"; failure is logged at INFO and ignored).
void tuneDataSocket(int fd, int64_t bufBytes, const std::string& congestion);

// The peer address of a connected socket, "ip:port", or "?" when unknown.
std::string peerAddressOf(int fd);

struct InterfaceAddress {
  std::string name;     // "eth0", "lo"
  std::string address;  // numeric, without brackets
  bool loopback = false;
};

// All up interfaces with an IPv4 or (non link-local) IPv6 address, in system order.
Result<std::vector<InterfaceAddress>> listInterfaces();
// Whether interface `name` is selected by `spec` (NCCL_SOCKET_IFNAME syntax).
bool interfaceMatches(const std::string& spec, const std::string& name);
// Whether `host` (numeric or a name) names an address of this host's up interfaces. A
// name that resolves only to loopback counts only when it is "localhost": Debian maps
// the host name to 127.0.1.1, which other hosts cannot reach.
bool isAddressOfThisHost(const std::string& host);
// Picks the interface per `spec` (see above); IPv4 before IPv6 within one interface.
// NotFound naming the spec and the available interfaces when nothing matches.
Result<InterfaceAddress> selectInterface(const std::string& spec);

}  // namespace collie::net
