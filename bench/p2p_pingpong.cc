// p2p_pingpong: point-to-point latency and bandwidth between ranks 0 and 1, untagged or
// tagged (issue 51: what a tag's envelope and matching cost).
//
// Rank 0 sends --bytes to rank 1 and receives them back, --iters times after --warmup,
// each operation waited for before the next (a blocking ping-pong, as torch's send/recv
// and NCCL's grouped calls of one op). --tag T sends and receives with tag T (builds
// whose communicator.h defines COLLIE_P2P_TAGS). Prints, on rank 0, the median and the
// minimum one-way time in microseconds over 10 batches, and the bandwidth of the median.
//
// Usage: collie run -n 2 -- p2p_pingpong [--bytes N] [--iters N] [--warmup N] [--tag T]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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
};

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
    } else {
      return false;
    }
  }
  return o.iters >= 10 && o.warmup >= 0;
}

collie::Status waitFor(collie::Result<collie::Work> work) {
  return work.isOk() ? work->wait() : work.status();
}

collie::Status transfer(collie::Communicator& comm, bool send, std::vector<uint8_t>& buf, int peer,
                        const std::optional<int64_t>& tag) {
#ifdef COLLIE_P2P_TAGS
  if (tag) {
    return waitFor(send ? comm.send(buf.data(), buf.size(), collie::DataType::kUint8, peer, *tag)
                        : comm.recv(buf.data(), buf.size(), collie::DataType::kUint8, peer, *tag));
  }
#endif
  return waitFor(send ? comm.send(buf.data(), buf.size(), collie::DataType::kUint8, peer)
                      : comm.recv(buf.data(), buf.size(), collie::DataType::kUint8, peer));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: p2p_pingpong [--bytes N] [--iters N>=10] [--warmup N] [--tag T]\n");
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
  auto round = [&] {
    if (rank == 0) {
      status = transfer(comm, true, buf, 1, o.tag);
      if (status.isOk()) status = transfer(comm, false, buf, 1, o.tag);
    } else if (rank == 1) {
      status = transfer(comm, false, buf, 0, o.tag);
      if (status.isOk()) status = transfer(comm, true, buf, 0, o.tag);
    }
  };
  for (int i = 0; i < o.warmup && status.isOk(); ++i) round();
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
  if (rank == 0) {
    std::sort(batches.begin(), batches.end());
    const double median = batches[batches.size() / 2];
    std::printf("p2p_pingpong bytes=%zu %s: one way median %.2f us, min %.2f us, %.3f GB/s\n",
                o.bytes, o.tag ? ("tag " + std::to_string(*o.tag)).c_str() : "untagged", median,
                batches.front(), median > 0 ? static_cast<double>(o.bytes) / median / 1e3 : 0.0);
  }
  return 0;
}
