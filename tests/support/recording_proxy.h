// Test support: a TCP forwarding proxy on 127.0.0.1 that records every byte it
// forwards, to see what a connection puts on the wire.
//
// The proxy listens on an ephemeral loopback port and connects each accepted client to
// the target (also expected on loopback: tests never send traffic elsewhere). Each
// direction of each connection is pumped by a thread of its own with blocking calls,
// so the two directions flow independently, like a real link; a half close is passed
// on as one. What went each way is kept per connection, in order of acceptance.
//
// Thread safety: the accessors may be called from any thread while traffic flows;
// the destructor closes every socket and joins every thread.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace collie::testing {

class RecordingProxy {
 public:
  // One proxied connection: what the client sent toward the target, and back.
  struct Flow {
    std::vector<uint8_t> toTarget;
    std::vector<uint8_t> toClient;
  };

  explicit RecordingProxy(uint16_t targetPort) : targetPort_(targetPort) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr = loopback(0);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listener_, 128) != 0) {
      return;
    }
    socklen_t length = sizeof(addr);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &length);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { acceptLoop(); });
  }

  ~RecordingProxy() {
    stop_ = true;
    if (acceptor_.joinable()) acceptor_.join();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int fd : sockets_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : pumps_) t.join();
    for (int fd : sockets_) ::close(fd);
    ::close(listener_);
  }

  RecordingProxy(const RecordingProxy&) = delete;
  RecordingProxy& operator=(const RecordingProxy&) = delete;

  // The port to connect to instead of the target's; 0 if the proxy could not listen.
  uint16_t port() const { return port_; }

  std::vector<Flow> flows() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Flow> out;
    for (const auto& flow : flows_) out.push_back(*flow);
    return out;
  }

  // Every byte of every connection, both directions.
  std::vector<uint8_t> allBytes() const {
    std::vector<uint8_t> out;
    for (const Flow& flow : flows()) {
      out.insert(out.end(), flow.toTarget.begin(), flow.toTarget.end());
      out.insert(out.end(), flow.toClient.begin(), flow.toClient.end());
    }
    return out;
  }

 private:
  static sockaddr_in loopback(uint16_t port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return addr;
  }

  void acceptLoop() {
    while (!stop_) {
      pollfd pfd{listener_, POLLIN, 0};
      if (::poll(&pfd, 1, 20) <= 0) continue;
      int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      int target = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr = loopback(targetPort_);
      if (::connect(target, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        ::close(client);
        ::close(target);
        continue;
      }
      int one = 1;
      ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ::setsockopt(target, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      std::lock_guard<std::mutex> lock(mutex_);
      flows_.push_back(std::make_unique<Flow>());
      Flow* flow = flows_.back().get();
      sockets_.push_back(client);
      sockets_.push_back(target);
      pumps_.emplace_back([this, client, target, flow] { pump(client, target, &flow->toTarget); });
      pumps_.emplace_back([this, client, target, flow] { pump(target, client, &flow->toClient); });
    }
  }

  // Copies from -> to until from closes (then half-closes to) or either fails.
  void pump(int from, int to, std::vector<uint8_t>* record) {
    uint8_t buf[64 * 1024];
    for (;;) {
      ssize_t n = ::recv(from, buf, sizeof(buf), 0);
      if (n <= 0) break;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        record->insert(record->end(), buf, buf + n);
      }
      for (ssize_t sent = 0; sent < n;) {
        ssize_t m = ::send(to, buf + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL);
        if (m <= 0) return;
        sent += m;
      }
    }
    ::shutdown(to, SHUT_WR);
  }

  uint16_t targetPort_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Flow>> flows_;
  std::vector<int> sockets_;
  std::vector<std::thread> pumps_;
};

}  // namespace collie::testing
