// Gloo reference for bench/compare.py: gloo::AllreduceRingChunked of floats (sum, in
// place, Gloo's only mode) over Gloo's tcp transport, ranks meeting through a FileStore.
// Per size: `-w` warmup calls, then `-t` trials of `-n` back-to-back calls; a trial's
// time is the slowest rank's average per call, and the reported time is the median over
// trials (microseconds) -- the same definition as bench/mpi_allreduce.c.
//
// Usage: gloo_allreduce -r RANK -s SIZE -p STORE_DIR [-h HOST] [-b min] [-e max] [-f factor]
//                       [-n iters] [-w warmup] [-t trials]
// Output (rank 0): one line per size, "size_bytes in_place_us".
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_one.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

long parseBytes(const char* text) {
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (*end == 'K' || *end == 'k') value <<= 10;
  if (*end == 'M' || *end == 'm') value <<= 20;
  if (*end == 'G' || *end == 'g') value <<= 30;
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  int rank = -1, size = 0, iters = 20, warmup = 5, trials = 5, opt;
  long minBytes = 8, maxBytes = 64L << 20, factor = 2;
  std::string store, host = "127.0.0.1";
  while ((opt = getopt(argc, argv, "r:s:p:h:b:e:f:n:w:t:")) != -1) {
    switch (opt) {
      case 'r':
        rank = std::atoi(optarg);
        break;
      case 's':
        size = std::atoi(optarg);
        break;
      case 'p':
        store = optarg;
        break;
      case 'h':
        host = optarg;
        break;
      case 'b':
        minBytes = parseBytes(optarg);
        break;
      case 'e':
        maxBytes = parseBytes(optarg);
        break;
      case 'f':
        factor = std::atol(optarg);
        break;
      case 'n':
        iters = std::atoi(optarg);
        break;
      case 'w':
        warmup = std::atoi(optarg);
        break;
      case 't':
        trials = std::atoi(optarg);
        break;
      default:
        std::fprintf(stderr,
                     "usage: %s -r rank -s size -p store_dir [-h host] [-b] [-e] [-f] "
                     "[-n] [-w] [-t]\n",
                     argv[0]);
        return 2;
    }
  }
  if (rank < 0 || rank >= size || store.empty() || minBytes < 4 || maxBytes < minBytes ||
      factor < 2 || iters < 1 || trials < 1) {
    std::fprintf(stderr,
                 "gloo_allreduce: need 0 <= rank < size, a store dir, 4 <= min <= max, "
                 "factor >= 2, iters and trials >= 1\n");
    return 2;
  }
  gloo::transport::tcp::attr attr;
  attr.hostname = host;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore fileStore(store);
  gloo::rendezvous::PrefixStore prefixStore("collie-bench", fileStore);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(std::chrono::seconds(120));
  context->connectFullMesh(prefixStore, device);

  const long maxCount = maxBytes / static_cast<long>(sizeof(float));
  std::vector<float> data(static_cast<size_t>(maxCount));
  for (long i = 0; i < maxCount; ++i) data[i] = static_cast<float>(1 + (i + rank) % 3);
  gloo::BarrierAllToOne barrier(context);
  if (rank == 0) std::printf("# size_bytes in_place_us (median of %d trials)\n", trials);
  for (long bytes = minBytes; bytes <= maxBytes; bytes *= factor) {
    const int count = static_cast<int>(bytes / static_cast<long>(sizeof(float)));
    gloo::AllreduceRingChunked<float> allreduce(context, {data.data()}, count);
    for (int i = 0; i < warmup; ++i) allreduce.run();
    std::vector<double> samples;
    for (int t = 0; t < trials; ++t) {
      barrier.run();
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) allreduce.run();
      double mine =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count() /
          iters;
      gloo::AllreduceRing<double> slowest(context, {&mine}, 1,
                                          gloo::ReductionFunction<double>::max);
      slowest.run();
      samples.push_back(mine);
    }
    std::sort(samples.begin(), samples.end());
    const size_t n = samples.size();
    const double median = n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
    if (rank == 0) std::printf("%ld %.3f\n", static_cast<long>(count) * 4, median);
    std::fflush(stdout);
  }
  // No rank closes its connections while another still reads from them.
  barrier.run();
  return 0;
}
