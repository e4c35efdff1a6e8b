// ucx_bidir: what one process moves both ways at once with tagged messages, the UCX work
// a 2-rank ring all-reduce asks of each rank (bench/ucx_vs_perftest.sh runs it between
// two namespace hosts). ucx_perftest's both-ways figure comes from two processes per
// host, one per direction; this is the same traffic from one UCP worker on one thread,
// as collie's engine drives it, or (--threads 2) from a worker and thread per direction.
//
//   ucx_bidir listen|connect IP PORT BUFFER_MIB MESSAGE_KIB ITERS [options]
//
// Each side streams ITERS passes over a send buffer of BUFFER_MIB in messages of
// MESSAGE_KIB, and receives as much into a buffer of its own, both directions at once,
// and prints GB/s per direction. Options:
//   --window W         messages in flight per direction (default 2)
//   --errors peer|none UCX endpoint error handling (default peer, as collie's endpoints;
//                      perftest's have none, which lets UCX use its rma_bw lane)
//   --wait sleep|poll  sleep: after 50 us of idle polling block on the worker's event fd
//                      (collie's COLLIE_BUSY_POLL default, perftest's -E sleep); poll:
//                      spin (default sleep)
//   --threads 1|2      1: one worker on one thread does both directions (default);
//                      2: a worker and thread per direction, the sender's endpoint
//                      reaching the peer's receiving worker
// The worker addresses go over a TCP connection to IP:PORT; the data takes whatever
// UCX_TLS allows. A receive that fails, or a peer that stops for 30 s, ends the run with
// an error. Benchmark only.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "ucx_bidir: %s\n", what.c_str());
  std::exit(1);
}

void check(ucs_status_t status, const char* what) {
  if (status != UCS_OK) fail(std::string(what) + ": " + ucs_status_string(status));
}

// The bootstrap connection: accepted when listening, else connected (retrying while the
// other side is not up yet).
int bootstrapSocket(bool listening, const char* ip, int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, ip, &address.sin_addr) != 1) fail("bad address " + std::string(ip));
  auto* raw = reinterpret_cast<sockaddr*>(&address);
  if (listening) {
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(listener, raw, sizeof(address)) != 0 || listen(listener, 1) != 0) fail("listen");
    pollfd waiting{listener, POLLIN, 0};
    if (poll(&waiting, 1, 30000) != 1) fail("no peer connected within 30 s");
    int fd = accept(listener, nullptr, nullptr);
    close(listener);
    if (fd < 0) fail("accept");
    return fd;
  }
  for (int attempt = 0; attempt < 600; ++attempt) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, raw, sizeof(address)) == 0) return fd;
    close(fd);
    usleep(50000);
  }
  fail("could not connect to the peer within 30 s");
}

void writeAll(int fd, const void* data, size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  for (size_t done = 0; done < bytes;) {
    ssize_t n = send(fd, p + done, bytes - done, MSG_NOSIGNAL);
    if (n <= 0) fail("bootstrap send");
    done += static_cast<size_t>(n);
  }
}

void readAll(int fd, void* data, size_t bytes) {
  auto* p = static_cast<char*>(data);
  for (size_t done = 0; done < bytes;) {
    pollfd waiting{fd, POLLIN, 0};
    if (poll(&waiting, 1, 30000) != 1) fail("bootstrap: peer silent for 30 s");
    ssize_t n = recv(fd, p + done, bytes - done, 0);
    if (n <= 0) fail("bootstrap: peer closed");
    done += static_cast<size_t>(n);
  }
}

// Exchanges one blob of bytes with the peer over the bootstrap socket.
std::vector<char> exchange(int fd, const void* mine, size_t bytes) {
  uint64_t length = bytes;
  writeAll(fd, &length, sizeof(length));
  writeAll(fd, mine, bytes);
  readAll(fd, &length, sizeof(length));
  if (length > (1u << 20)) fail("bootstrap: implausible length from the peer");
  std::vector<char> theirs(length);
  readAll(fd, theirs.data(), length);
  return theirs;
}

void onEndpointError(void* /*arg*/, ucp_ep_h /*ep*/, ucs_status_t status) {
  fail(std::string("endpoint error: ") + ucs_status_string(status));
}

struct Options {
  int window = 2;
  bool peerErrors = true;
  bool sleepWhenIdle = true;
  int threads = 1;
};

// One UCP worker, the thread that drives it, and its endpoint to the peer (null for a
// worker that only receives).
struct Lane {
  ucp_worker_h worker = nullptr;
  int eventFd = -1;
  ucp_ep_h endpoint = nullptr;
};

// One direction's messages: posted in order, retired in order.
struct Stream {
  std::deque<void*> inFlight;  // UCX requests; nullptr for a send that completed at once
  size_t posted = 0;
  size_t done = 0;
};

// Retires the completed requests at the front of `stream`; true when any were retired.
bool retire(Stream* stream, const char* what) {
  bool any = false;
  while (!stream->inFlight.empty()) {
    void* request = stream->inFlight.front();
    if (request != nullptr) {
      ucs_status_t status = ucp_request_check_status(request);
      if (status == UCS_INPROGRESS) break;
      ucp_request_free(request);
      check(status, what);
    }
    stream->inFlight.pop_front();
    ++stream->done;
    any = true;
  }
  return any;
}

void* postOrFail(ucs_status_ptr_t request, const char* what) {
  if (UCS_PTR_IS_ERR(request)) check(UCS_PTR_STATUS(request), what);
  return request;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr,
                 "usage: %s listen|connect IP PORT BUFFER_MIB MESSAGE_KIB ITERS "
                 "[--window W] [--errors peer|none] [--wait sleep|poll] [--threads 1|2]\n",
                 argv[0]);
    return 2;
  }
  const bool listening = std::string(argv[1]) == "listen";
  const char* ip = argv[2];
  const int port = std::atoi(argv[3]);
  const size_t bufferBytes = static_cast<size_t>(std::atol(argv[4])) << 20;
  const size_t messageBytes = static_cast<size_t>(std::atol(argv[5])) << 10;
  const int iters = std::atoi(argv[6]);
  Options options;
  for (int i = 7; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--window") {
      options.window = std::atoi(value.c_str());
    } else if (flag == "--errors" && (value == "peer" || value == "none")) {
      options.peerErrors = value == "peer";
    } else if (flag == "--threads" && (value == "1" || value == "2")) {
      options.threads = std::atoi(value.c_str());
    } else if (flag == "--wait" && (value == "sleep" || value == "poll")) {
      options.sleepWhenIdle = value == "sleep";
    } else {
      fail("bad option " + flag + " " + value);
    }
  }
  if ((argc - 7) % 2 != 0) fail("option without a value");
  if (bufferBytes == 0 || messageBytes == 0 || bufferBytes % messageBytes != 0 || iters < 1 ||
      options.window < 1) {
    fail("BUFFER_MIB must be a positive multiple of MESSAGE_KIB, ITERS and --window >= 1");
  }

  ucp_config_t* config = nullptr;
  check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.field_mask |= UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.mt_workers_shared = options.threads > 1;  // workers of one context on two threads
  ucp_context_h context = nullptr;
  check(ucp_init(&params, config, &context), "ucp_init");
  ucp_config_release(config);
  // Lane 0 sends (and receives too with one thread); lane 1, with two threads, receives.
  std::vector<Lane> lanes(static_cast<size_t>(options.threads));
  const int bootstrap = bootstrapSocket(listening, ip, port);
  std::vector<std::vector<char>> peerAddresses;
  for (Lane& lane : lanes) {
    ucp_worker_params_t workerParams{};
    workerParams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    workerParams.thread_mode = UCS_THREAD_MODE_SINGLE;
    check(ucp_worker_create(context, &workerParams, &lane.worker), "ucp_worker_create");
    check(ucp_worker_get_efd(lane.worker, &lane.eventFd), "ucp_worker_get_efd");
    ucp_address_t* address = nullptr;
    size_t addressLength = 0;
    check(ucp_worker_get_address(lane.worker, &address, &addressLength), "ucp_worker_get_address");
    peerAddresses.push_back(exchange(bootstrap, address, addressLength));
    ucp_worker_release_address(lane.worker, address);
  }

  // The sending lane's endpoint goes to the peer's receiving worker (the last one).
  ucp_ep_params_t epParams{};
  epParams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  epParams.address = reinterpret_cast<const ucp_address_t*>(peerAddresses.back().data());
  if (options.peerErrors) {
    epParams.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    epParams.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    epParams.err_handler.cb = onEndpointError;
    epParams.err_handler.arg = nullptr;
  }
  check(ucp_ep_create(lanes.front().worker, &epParams, &lanes.front().endpoint), "ucp_ep_create");

  std::vector<char> sendBuffer(bufferBytes, 1);
  std::vector<char> recvBuffer(bufferBytes, 0);
  const size_t perBuffer = bufferBytes / messageBytes;
  const size_t total = perBuffer * static_cast<size_t>(iters);
  const ucp_tag_t tag = 0x5a;
  ucp_request_param_t requestParams{};

  // Sends `sendCount` and receives `recvCount` messages on one lane, from one thread.
  auto runLane = [&](const Lane& lane, size_t sendCount, size_t recvCount) {
    Stream sends, recvs;
    auto lastProgress = Clock::now();
    while (sends.done < sendCount || recvs.done < recvCount) {
      while (recvs.posted < recvCount &&
             recvs.inFlight.size() < static_cast<size_t>(options.window)) {
        char* target = recvBuffer.data() + (recvs.posted % perBuffer) * messageBytes;
        recvs.inFlight.push_back(postOrFail(
            ucp_tag_recv_nbx(lane.worker, target, messageBytes, tag, ~ucp_tag_t{0}, &requestParams),
            "ucp_tag_recv_nbx"));
        ++recvs.posted;
      }
      while (sends.posted < sendCount &&
             sends.inFlight.size() < static_cast<size_t>(options.window)) {
        const char* source = sendBuffer.data() + (sends.posted % perBuffer) * messageBytes;
        sends.inFlight.push_back(
            postOrFail(ucp_tag_send_nbx(lane.endpoint, source, messageBytes, tag, &requestParams),
                       "ucp_tag_send_nbx"));
        ++sends.posted;
      }
      bool moved = ucp_worker_progress(lane.worker) != 0;
      moved = retire(&sends, "send") || moved;
      moved = retire(&recvs, "receive") || moved;
      auto now = Clock::now();
      if (moved) {
        lastProgress = now;
        continue;
      }
      if (now - lastProgress > std::chrono::seconds(30)) fail("no progress for 30 s");
      if (!options.sleepWhenIdle || now - lastProgress < std::chrono::microseconds(50)) continue;
      ucs_status_t armed = ucp_worker_arm(lane.worker);
      if (armed == UCS_ERR_BUSY) continue;  // events arrived meanwhile: progress again
      check(armed, "ucp_worker_arm");
      pollfd waiting{lane.eventFd, POLLIN, 0};
      poll(&waiting, 1, 1000);
    }
  };
  auto runPass = [&](size_t messages) {
    if (lanes.size() == 1) return runLane(lanes.front(), messages, messages);
    std::thread receiver([&] { runLane(lanes.back(), 0, messages); });
    runLane(lanes.front(), messages, 0);
    receiver.join();
  };

  // Warm-up (one pass, endpoints and buffers), a bootstrap barrier, then the timed run.
  char token = 0;
  runPass(perBuffer);
  writeAll(bootstrap, &token, 1);
  readAll(bootstrap, &token, 1);
  auto start = Clock::now();
  runPass(total);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // Neither side tears down before the other has received everything.
  writeAll(bootstrap, &token, 1);
  readAll(bootstrap, &token, 1);
  std::printf(
      "ucx_bidir %zu MiB buffers, %zu KiB messages x %zu, window %d, errors %s, %s, "
      "%d thread(s): %.2f GB/s per direction\n",
      bufferBytes >> 20, messageBytes >> 10, total, options.window,
      options.peerErrors ? "peer" : "none", options.sleepWhenIdle ? "sleep" : "poll",
      options.threads,
      static_cast<double>(messageBytes) * static_cast<double>(total) / seconds / 1e9);

  ucp_request_param_t closeParams{};
  closeParams.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  closeParams.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* closing = ucp_ep_close_nbx(lanes.front().endpoint, &closeParams);
  if (UCS_PTR_IS_PTR(closing)) {
    while (ucp_request_check_status(closing) == UCS_INPROGRESS) {
      ucp_worker_progress(lanes.front().worker);
    }
    ucp_request_free(closing);
  }
  for (Lane& lane : lanes) ucp_worker_destroy(lane.worker);
  ucp_cleanup(context);
  close(bootstrap);
  return 0;
}
