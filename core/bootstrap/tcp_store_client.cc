// The TCP store client. One connection, one request at a time under a mutex. A get
// tells the server how long to wait; if the answer still does not come (a stalled
// server) the connection is dropped and the next call reconnects, so a late answer
// can never be taken for the reply to a later request.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "collie/store.h"
#include "core/bootstrap/store_protocol.h"
#include "core/log/log.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"

namespace collie {
namespace {

using namespace store_protocol;  // NOLINT(build/namespaces)

constexpr auto kRequestTimeout = std::chrono::seconds(60);  // set/add, and reconnects
constexpr auto kGetGrace = std::chrono::seconds(5);         // beyond the server-side wait

class TcpStoreClient final : public Store {
 public:
  TcpStoreClient(std::string host, uint16_t port, const JobSecret& secret, net::Socket sock)
      : host_(std::move(host)), port_(port), secret_(secret), sock_(std::move(sock)) {}

  Status set(const std::string& key, const Bytes& value) override {
    if (value.size() > kMaxValueBytes) {
      return invalidArgument("store value for '" + key + "' is " + std::to_string(value.size()) +
                             " bytes; the limit is 64 MiB");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    Bytes reply;
    return call(kSet, key, value.size(), value.data(), Clock::now() + kRequestTimeout, &reply);
  }

  Result<Bytes> get(const std::string& key, Deadline deadline) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto waitMs = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    Bytes reply;
    Status st = call(kGet, key, static_cast<uint64_t>(std::max<int64_t>(waitMs, 0)), nullptr,
                     std::max(deadline, Clock::now()) + kGetGrace, &reply);
    if (!st.isOk()) return st;
    return reply;
  }

  Result<int64_t> add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lock(mutex_);
    Bytes reply;
    Status st = call(kAdd, key, static_cast<uint64_t>(delta), nullptr,
                     Clock::now() + kRequestTimeout, &reply);
    if (!st.isOk()) return st;
    if (reply.size() != 8) return remoteError("store server sent a malformed add reply");
    return static_cast<int64_t>(get64(reply.data()));
  }

 private:
  Status call(Op op, const std::string& key, uint64_t arg, const uint8_t* value, Deadline deadline,
              Bytes* reply) {
    if (key.empty() || key.size() > kMaxKeyBytes) {
      return invalidArgument("store key must be 1.." + std::to_string(kMaxKeyBytes) +
                             " bytes, got " + std::to_string(key.size()));
    }
    if (!sock_.valid()) {
      Result<net::Socket> sock = connect(host_, port_, secret_, Clock::now() + kRequestTimeout);
      if (!sock.isOk()) return sock.status();
      sock_ = std::move(*sock);
    }
    Status st = exchange(op, key, arg, value, deadline, reply);
    if (!st.isOk() && st.code() != StatusCode::kTimeout) {
      sock_.reset();
      return st.withContext("store " + net::joinHostPort(host_, port_));
    }
    if (!st.isOk()) sock_.reset();  // the late answer must not be read as another reply
    return st;
  }

  Status exchange(Op op, const std::string& key, uint64_t arg, const uint8_t* value,
                  Deadline deadline, Bytes* reply) {
    uint8_t header[kRequestHeaderBytes] = {0};
    header[0] = op;
    put32(header + 4, static_cast<uint32_t>(key.size()));
    put64(header + 8, arg);
    // One write per request (TCP_NODELAY is on): header, key and value together.
    request_.assign(header, header + sizeof(header));
    request_.insert(request_.end(), key.begin(), key.end());
    if (op == kSet && arg > 0) request_.insert(request_.end(), value, value + arg);
    COLLIE_RETURN_IF_ERROR(net::writeFull(sock_.fd(), request_.data(), request_.size(), deadline));
    uint8_t response[kResponseHeaderBytes];
    Status st = net::readFull(sock_.fd(), response, sizeof(response), deadline);
    if (st.code() == StatusCode::kTimeout && op == kGet) {
      return timeoutError("store key '" + key + "' was not set before the deadline (the store " +
                          "server did not answer)");
    }
    COLLIE_RETURN_IF_ERROR(st);
    uint64_t length = 0;
    std::string why;
    if (parseResponseHeader(response, static_cast<Op>(op), &length, &why) != Parse::kOk) {
      return remoteError("store server sent a malformed reply: " + why);
    }
    if (response[0] == kTimedOut) {
      return timeoutError("store key '" + key +
                          "' was not set before the deadline (a rank that should set it is "
                          "missing or slow; raise COLLIE_TIMEOUT if ranks start slowly)");
    }
    reply->resize(length);
    return net::readFull(sock_.fd(), reply->data(), length, deadline);
  }

 public:
  // Connects and authenticates. A server that closes the connection before its
  // Challenge had no room for another unauthenticated connection (a burst of ranks from
  // this host past COLLIE_STORE_MAX_PENDING_PER_HOST): retried with backoff, at most
  // kRefusedRetries times and never past the deadline.
  static Result<net::Socket> connect(const std::string& host, uint16_t port,
                                     const JobSecret& secret, Deadline deadline) {
    constexpr int kRefusedRetries = 200;
    auto backoff = std::chrono::milliseconds(2);
    for (int attempt = 0;; ++attempt) {
      Result<net::Socket> sock = net::connectWithDeadline(
          host, port, deadline, [](int fd) { net::tuneDataSocket(fd, 0, ""); });
      if (!sock.isOk()) return sock.status().withContext("connecting to the store");
      net::Hello hello;
      hello.purpose = net::Purpose::kStore;
      Status st = net::sendHello(sock->fd(), hello, secret, deadline);
      if (st.isOk()) return sock;
      const bool refused = st.code() == StatusCode::kRemoteError;
      if (!refused || attempt >= kRefusedRetries || Clock::now() + backoff >= deadline) {
        return st.withContext("store " + net::joinHostPort(host, port));
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
    }
  }

 private:
  std::string host_;
  uint16_t port_;
  JobSecret secret_;
  std::mutex mutex_;
  net::Socket sock_;
  Bytes request_;  // reused request buffer
};

}  // namespace

Result<std::shared_ptr<Store>> connectTcpStore(const std::string& host, uint16_t port,
                                               const JobSecret& secret, Deadline deadline) {
  Result<net::Socket> sock = TcpStoreClient::connect(host, port, secret, deadline);
  if (!sock.isOk()) return sock.status();
  return std::shared_ptr<Store>(
      std::make_shared<TcpStoreClient>(host, port, secret, std::move(*sock)));
}

}  // namespace collie
