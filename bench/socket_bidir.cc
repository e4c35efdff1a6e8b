// socket_bidir: how fast one process moves data both ways over TCP at once, the socket
// work a 2-rank all-reduce asks of each rank (bench/socket_ceiling.sh runs it between
// two namespace hosts). Each side sends and receives BYTES x ITERS from/to buffers of
// BYTES (not cache-resident for 32 MiB) and prints GB/s per direction.
//
//   socket_bidir listen|connect IP PORT MIB ITERS MODE [CONGESTION]
//
// MODE: shared  one thread, non-blocking, one socket carrying both directions
//       split   one thread, non-blocking, one socket per direction
//       threads a sending and a receiving thread (blocking), one socket per direction
//       shared-threads  a sending and a receiving thread (blocking) on one socket
// CONGESTION (default cubic) is set with TCP_CONGESTION on every socket.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

int fail(const char* what) {
  std::perror(what);
  std::exit(1);
}

// One connection on `port`: accepted when listening, else connected (retrying while
// the other side is not up yet).
int openSocket(bool listening, const char* ip, int port, const std::string& congestion) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, ip, &address.sin_addr) != 1) fail("inet_pton");
  auto* raw = reinterpret_cast<sockaddr*>(&address);
  int fd = -1;
  if (listening) {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(listener, IPPROTO_TCP, TCP_CONGESTION, congestion.data(), congestion.size());
    if (bind(listener, raw, sizeof(address)) != 0 || listen(listener, 1) != 0) fail("listen");
    fd = accept(listener, nullptr, nullptr);
    close(listener);
  } else {
    for (int attempt = 0; attempt < 100; ++attempt) {
      fd = socket(AF_INET, SOCK_STREAM, 0);
      setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, congestion.data(), congestion.size());
      if (connect(fd, raw, sizeof(address)) == 0) break;
      close(fd);
      fd = -1;
      usleep(50000);
    }
  }
  if (fd < 0) fail("connect");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

void blockingLoop(int fd, char* buffer, size_t bytes, int iters, bool sending) {
  for (int i = 0; i < iters; ++i) {
    for (size_t done = 0; done < bytes;) {
      ssize_t n = sending ? send(fd, buffer + done, bytes - done, MSG_NOSIGNAL)
                          : recv(fd, buffer + done, bytes - done, 0);
      if (n <= 0) fail(sending ? "send" : "recv");
      done += static_cast<size_t>(n);
    }
  }
}

// Sends on `out` and receives on `in` (the same socket or not) from one thread.
void pollingLoop(int out, int in, char* sendBuffer, char* recvBuffer, size_t bytes, int iters) {
  fcntl(out, F_SETFL, O_NONBLOCK);
  fcntl(in, F_SETFL, O_NONBLOCK);
  const size_t total = bytes * static_cast<size_t>(iters);
  size_t sent = 0;
  size_t received = 0;
  while (sent < total || received < total) {
    if (sent < total) {
      size_t offset = sent % bytes;
      ssize_t n =
          send(out, sendBuffer + offset, std::min(bytes - offset, total - sent), MSG_NOSIGNAL);
      if (n > 0) sent += static_cast<size_t>(n);
      if (n < 0 && errno != EAGAIN) fail("send");
    }
    if (received < total) {
      size_t offset = received % bytes;
      ssize_t n = recv(in, recvBuffer + offset, std::min(bytes - offset, total - received), 0);
      if (n > 0) received += static_cast<size_t>(n);
      if (n == 0 || (n < 0 && errno != EAGAIN)) fail("recv");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(
        stderr,
        "usage: %s listen|connect IP PORT MIB ITERS shared|split|threads|shared-threads [CC]\n",
        argv[0]);
    return 2;
  }
  const bool listening = std::string(argv[1]) == "listen";
  const char* ip = argv[2];
  const int port = std::atoi(argv[3]);
  const size_t bytes = static_cast<size_t>(std::atol(argv[4])) << 20;
  const int iters = std::atoi(argv[5]);
  const std::string mode = argv[6];
  const std::string congestion = argc > 7 ? argv[7] : "cubic";
  if (bytes == 0 || iters < 1 ||
      (mode != "shared" && mode != "split" && mode != "threads" && mode != "shared-threads")) {
    std::fprintf(stderr, "socket_bidir: bad size, iterations or mode\n");
    return 2;
  }
  // Socket 0 carries the listener's data (and, shared, both directions); socket 1 the
  // connecting side's.
  const int first = openSocket(listening, ip, port, congestion);
  const bool oneSocket = mode == "shared" || mode == "shared-threads";
  const int second = oneSocket ? first : openSocket(listening, ip, port + 1, congestion);
  const int out = listening ? first : second;
  const int in = listening ? second : first;
  std::vector<char> sendBuffer(bytes, 1);
  std::vector<char> recvBuffer(bytes, 0);
  auto start = std::chrono::steady_clock::now();
  if (mode == "threads" || mode == "shared-threads") {
    std::thread sender(
        [&] { blockingLoop(out, sendBuffer.data(), bytes, iters, /*sending=*/true); });
    blockingLoop(in, recvBuffer.data(), bytes, iters, /*sending=*/false);
    sender.join();
  } else {
    pollingLoop(out, in, sendBuffer.data(), recvBuffer.data(), bytes, iters);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("socket_bidir %s %s %zu MiB x %d: %.2f GB/s per direction\n", mode.c_str(),
              congestion.c_str(), bytes >> 20, iters,
              static_cast<double>(bytes) * iters / seconds / 1e9);
  close(first);
  if (second != first) close(second);
  return 0;
}
