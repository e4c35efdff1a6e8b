#include "core/tune/tuner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace collie {
namespace {

double ceilDivD(double a, double b) { return std::max(1.0, std::ceil(a / b)); }

int depthOf(int nranks) {
  int depth = 0;
  while ((1 << depth) < nranks) ++depth;
  return depth;
}

std::string sizeText(size_t bytes) {
  const char* units[] = {"B", "K", "M", "G"};
  int unit = 0;
  while (bytes >= 1024 && bytes % 1024 == 0 && unit < 3) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + units[unit];
}

}  // namespace

bool algorithmSupports(Algorithm algorithm, CollectiveKind kind) {
  switch (algorithm) {
    case Algorithm::kRing:
      return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter ||
             kind == CollectiveKind::kAllGather;
    case Algorithm::kTree:
      return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kBroadcast ||
             kind == CollectiveKind::kReduce;
    case Algorithm::kChain:
      return kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce;
    case Algorithm::kAuto:
      return true;
  }
  return false;
}

double predictMicros(CollectiveKind kind, Algorithm algorithm, size_t bytes, int nranks,
                     int nchannels, size_t chunkBytes, const TuneConstants& constants) {
  const double n = nranks;
  const double s = static_cast<double>(bytes);
  const double c = nchannels;
  const double k = static_cast<double>(std::max<size_t>(chunkBytes, 1));
  const double alpha = constants.alphaUs;
  const double beta = std::max(constants.bwGBps, 1e-6) * 1000.0;  // bytes per us
  const double d = depthOf(nranks);
  if (nranks <= 1) return alpha;
  switch (kind) {
    case CollectiveKind::kAllReduce:
      if (algorithm == Algorithm::kTree) {
        const double chunks = ceilDivD(s, 2 * c * k);
        return (2 * d + 1 + 8 * (chunks * c - 1)) * alpha + 2 * s / beta;
      } else {
        const double rounds = ceilDivD(s, c * k * n);
        return 2 * (n - 1) * rounds * c * alpha + 2 * (n - 1) / n * s / beta;
      }
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce: {
      const double chunks = ceilDivD(s, c * k);
      const double piece = std::min(k, s);
      if (algorithm == Algorithm::kTree) {
        return (d + 3 * (chunks * c - 1)) * alpha + (2 * s + d * piece) / beta;
      }
      return (n - 1 + 2 * (chunks * c - 1)) * alpha + (s + (n - 2) * piece) / beta;
    }
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather: {
      const double total = s * n;  // the full vector
      const double rounds = ceilDivD(s, c * k);
      return (n - 1) * rounds * c * alpha + (n - 1) / n * total / beta;
    }
    default:
      return alpha;
  }
}

TuneConstants clampConstants(TuneConstants constants) {
  // NaN compares false everywhere: it becomes the lower bound.
  auto clamp = [](double v, double lo, double hi) { return v >= lo ? std::min(v, hi) : lo; };
  constants.alphaUs = clamp(constants.alphaUs, kMinAlphaUs, kMaxAlphaUs);
  constants.bwGBps = clamp(constants.bwGBps, kMinBwGBps, kMaxBwGBps);
  return constants;
}

TuneDecision decide(CollectiveKind kind, size_t bytes, int nranks, const TuneLimits& limits,
                    const TuneConstants& constants) {
  // The first algorithm is the robust default.
  std::vector<Algorithm> algorithms;
  if (limits.forced != Algorithm::kAuto && algorithmSupports(limits.forced, kind)) {
    algorithms = {limits.forced};
  } else if (kind == CollectiveKind::kAllReduce) {
    algorithms = {Algorithm::kRing, Algorithm::kTree};
  } else if (kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce) {
    algorithms = {Algorithm::kChain, Algorithm::kTree};
  } else {
    algorithms = {Algorithm::kRing};
  }
  std::vector<size_t> chunks = {limits.chunkBytes};
  if (limits.chunkBytes == 0) chunks = {128 << 10, 256 << 10, 512 << 10, 1 << 20};
  TuneDecision best;
  for (size_t a = 0; a < algorithms.size(); ++a) {
    const Algorithm algorithm = algorithms[a];
    TuneDecision mine;
    bool first = true;
    for (size_t chunk : chunks) {
      // Channels: the configured count when fixed, else every count that gives each
      // channel a chunk, most first, so that a tie keeps the parallel pipelines.
      const int most = std::max(1, limits.maxChannels);
      const size_t perChannel =
          algorithm == Algorithm::kTree && kind == CollectiveKind::kAllReduce ? 2 * chunk : chunk;
      const int start = limits.channelsFixed
                            ? most
                            : static_cast<int>(std::clamp<size_t>(bytes / perChannel, 1, most));
      const int fewest = limits.channelsFixed ? most : 1;
      for (int channels = start; channels >= fewest; --channels) {
        const double t = predictMicros(kind, algorithm, bytes, nranks, channels, chunk, constants);
        if (first || t < mine.predictedUs) {
          mine = TuneDecision{algorithm, chunk, channels, t};
          first = false;
        }
      }
    }
    if (a == 0 || mine.predictedUs < (1.0 - kRobustMargin) * best.predictedUs) best = mine;
  }
  return best;
}

std::string decisionTable(const TuneLimits& limits, const TuneConstants& constants) {
  char line[256];
  std::string out;
  std::snprintf(line, sizeof line,
                "tuning constants: alpha %.2f us/message, bandwidth %.3f GB/s per link [%s]\n",
                constants.alphaUs, constants.bwGBps, constants.source.c_str());
  out += line;
  std::snprintf(line, sizeof line, "limits: channels <= %d%s, chunk %s, algorithm %s\n",
                limits.maxChannels, limits.channelsFixed ? " (fixed)" : "",
                limits.chunkBytes ? sizeText(limits.chunkBytes).c_str() : "tuned",
                std::string(algorithmName(limits.forced)).c_str());
  out += line;
  const std::vector<int> rankCounts = {2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};
  for (CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kBroadcast}) {
    out += "\n" + std::string(collectiveName(kind)) + ": algorithm/chunk/channels\n";
    std::snprintf(line, sizeof line, "%8s", "bytes");
    out += line;
    for (int n : rankCounts) {
      std::snprintf(line, sizeof line, " %14s", ("n=" + std::to_string(n)).c_str());
      out += line;
    }
    out += "\n";
    for (size_t bytes = 8; bytes <= (size_t{1} << 30); bytes *= 8) {
      std::snprintf(line, sizeof line, "%8s", sizeText(bytes).c_str());
      out += line;
      for (int n : rankCounts) {
        TuneDecision d = decide(kind, bytes, n, limits, constants);
        std::string cell = std::string(algorithmName(d.algorithm)) + "/" + sizeText(d.chunkBytes) +
                           "/" + std::to_string(d.nchannels);
        std::snprintf(line, sizeof line, " %14s", cell.c_str());
        out += line;
      }
      out += "\n";
    }
  }
  return out;
}

}  // namespace collie
