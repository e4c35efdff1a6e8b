// p2p_pingpong: point-to-point latency and bandwidth between ranks 0 and 1, untagged or
// tagged (issue 51: what a tag's envelope and matching cost).
//
// Rank 0 sends --bytes to rank 1 and receives them back, --iters times after --warmup,
// each operation waited for before the next (a blocking ping-pong, as torch's send/recv
// and NCCL's grouped calls of one op). --tag T sends and receives with tag T (builds
// whose communicator.h defines COLLIE_P2P_TAGS). Prints, on rank 0, the median and the
// minimum one-way time in microseconds over 10 batches, and the bandwidth of the median.
//
// --overlap-every K --compute-us C: every K-th round rank 0 does not wait for its send at
// once, as a pipeline stage that sends and goes on computing: it submits the send,
// computes (spins) for C us, then waits. Its send carries the submit time
// (CLOCK_MONOTONIC, one clock for every process of a host), and rank 1 also prints how
// long those sends took to arrive (median and maximum): what a send nobody waits for at
// once costs the rank that receives it. Needs --bytes >= 8.
//
// Usage: collie run -n 2 -- p2p_pingpong [--bytes N] [--iters N] [--warmup N] [--tag T]
//                                        [--overlap-every K --compute-us C]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "collie/communicator.h"

namespace {

struct Options {
  size_t bytes = 8;
  int iters = 2000;
  int warmup = 200;
  std::optional<int64_t> tag;
  int overlapEvery = 0;  // 0: every send waited for at once
  int computeUs = 0;
};

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool hasValue = i + 1 < argc;
    if (arg == "--bytes" && hasValue) {
      o.bytes = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--iters" && hasValue) {
      o.iters = std::atoi(argv[++i]);
    } else if (arg == "--warmup" && hasValue) {
      o.warmup = std::atoi(argv[++i]);
    } else if (arg == "--tag" && hasValue) {
      o.tag = std::strtoll(argv[++i], nullptr, 10);
    } else if (arg == "--overlap-every" && hasValue) {
      o.overlapEvery = std::atoi(argv[++i]);
    } else if (arg == "--compute-us" && hasValue) {
      o.computeUs = std::atoi(argv[++i]);
    } else {
      return false;
    }
  }
  return o.iters >= 10 && o.warmup >= 0 && o.overlapEvery >= 0 && o.computeUs >= 0 &&
         (o.overlapEvery == 0 || o.bytes >= sizeof(int64_t));
}

collie::Status waitFor(collie::Result<collie::Work> work) {
  return work.isOk() ? work->wait() : work.status();
}

collie::Result<collie::Work> submit(collie::Communicator& comm, bool send,
                                    std::vector<uint8_t>& buf, int peer,
                                    const std::optional<int64_t>& tag) {
#ifdef COLLIE_P2P_TAGS
  if (tag) {
    return send ? comm.send(buf.data(), buf.size(), collie::DataType::kUint8, peer, *tag)
                : comm.recv(buf.data(), buf.size(), collie::DataType::kUint8, peer, *tag);
  }
#endif
  return send ? comm.send(buf.data(), buf.size(), collie::DataType::kUint8, peer)
              : comm.recv(buf.data(), buf.size(), collie::DataType::kUint8, peer);
}

collie::Status transfer(collie::Communicator& comm, bool send, std::vector<uint8_t>& buf, int peer,
                        const std::optional<int64_t>& tag) {
  return waitFor(submit(comm, send, buf, peer, tag));
}

// A send that is waited for only after `computeUs` of spinning, stamped with its submit
// time.
collie::Status overlappedSend(collie::Communicator& comm, std::vector<uint8_t>& buf, int peer,
                              const std::optional<int64_t>& tag, int computeUs) {
  const int64_t start = nowNs();
  std::memcpy(buf.data(), &start, sizeof(start));
  collie::Result<collie::Work> work = submit(comm, true, buf, peer, tag);
  while (nowNs() - start < int64_t{computeUs} * 1000) {
  }
  return waitFor(std::move(work));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: p2p_pingpong [--bytes N] [--iters N>=10] [--warmup N] [--tag T] "
                 "[--overlap-every K --compute-us C]\n");
    return 2;
  }
#ifndef COLLIE_P2P_TAGS
  if (o.tag) {
    std::fprintf(stderr, "p2p_pingpong: this build of collie has no tagged point-to-point\n");
    return 2;
  }
#endif
  auto created = collie::Communicator::createFromEnvironment();
  if (!created.isOk()) {
    std::fprintf(stderr, "p2p_pingpong: %s\n", created.status().toString().c_str());
    return 1;
  }
  collie::Communicator& comm = **created;
  const int rank = comm.rank();
  std::vector<uint8_t> buf(o.bytes, static_cast<uint8_t>(rank + 1));
  std::vector<double> batches;
  constexpr int kBatches = 10;
  collie::Status status;
  std::vector<double> delivered;  // rank 1: us from an overlapped send's submit to arrival
  bool timed = false;
  int roundNumber = 0;
  auto round = [&] {
    const bool overlapped = o.overlapEvery > 0 && ++roundNumber % o.overlapEvery == 0;
    if (rank == 0) {
      status = overlapped ? overlappedSend(comm, buf, 1, o.tag, o.computeUs)
                          : transfer(comm, true, buf, 1, o.tag);
      if (status.isOk()) status = transfer(comm, false, buf, 1, o.tag);
    } else if (rank == 1) {
      status = transfer(comm, false, buf, 0, o.tag);
      if (status.isOk() && overlapped && timed) {
        int64_t sent = 0;
        std::memcpy(&sent, buf.data(), sizeof(sent));
        delivered.push_back(static_cast<double>(nowNs() - sent) / 1e3);
      }
      if (status.isOk()) status = transfer(comm, true, buf, 0, o.tag);
    }
  };
  for (int i = 0; i < o.warmup && status.isOk(); ++i) round();
  timed = true;
  for (int b = 0; b < kBatches && status.isOk(); ++b) {
    const int calls = (b + 1) * o.iters / kBatches - b * o.iters / kBatches;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls && status.isOk(); ++i) round();
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    batches.push_back(took.count() / calls / 2);  // one way
  }
  if (!status.isOk()) {
    std::fprintf(stderr, "p2p_pingpong rank %d: %s\n", rank, status.toString().c_str());
    return 1;
  }
  if (rank == 1 && !delivered.empty()) {
    std::sort(delivered.begin(), delivered.end());
    std::printf(
        "p2p_pingpong overlapped sends (every %d, %d us of compute): arrived after median %.2f "
        "us, max %.2f us (%zu sends)\n",
        o.overlapEvery, o.computeUs, delivered[delivered.size() / 2], delivered.back(),
        delivered.size());
  }
  if (rank == 0) {
    std::sort(batches.begin(), batches.end());
    const double median = batches[batches.size() / 2];
    std::printf("p2p_pingpong bytes=%zu %s: one way median %.2f us, min %.2f us, %.3f GB/s\n",
                o.bytes, o.tag ? ("tag " + std::to_string(*o.tag)).c_str() : "untagged", median,
                batches.front(), median > 0 ? static_cast<double>(o.bytes) / median / 1e3 : 0.0);
  }
  return 0;
}
