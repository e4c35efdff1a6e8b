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
             kind == CollectiveKind::kAllGather || hasBlockCounts(kind);
    case Algorithm::kTree:
      return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kBroadcast ||
             kind == CollectiveKind::kReduce;
    case Algorithm::kChain:
      return kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce;
    case Algorithm::kOneShot:
      return kind == CollectiveKind::kAllReduce;
    case Algorithm::kHier:
      return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter ||
             kind == CollectiveKind::kAllGather || kind == CollectiveKind::kBroadcast ||
             kind == CollectiveKind::kReduce;
    case Algorithm::kPairwise:
      return kind == CollectiveKind::kAllToAll || kind == CollectiveKind::kAllToAllV;
    case Algorithm::kLinear:
      return isExchange(kind);
    case Algorithm::kAuto:
      return true;
    case Algorithm::kBoard:
    case Algorithm::kDirect:
    case Algorithm::kCma:
      return teamSupports(algorithm, kind);
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
      if (algorithm == Algorithm::kOneShot) return alpha + (n - 1) * s / beta;
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
    case CollectiveKind::kReduceScatterV:
    case CollectiveKind::kAllGatherV: {  // S = the sum of the blocks, costed as equal ones
      const double rounds = ceilDivD(s / n, c * k);
      return (n - 1) * rounds * c * alpha + (n - 1) / n * s / beta;
    }
    case CollectiveKind::kBarrier:
      return d * alpha;
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kAllToAllV:
      if (algorithm == Algorithm::kLinear) return c * alpha + (n - 1) * s / beta;
      return (n - 1) * (c * alpha + s / beta);
    case CollectiveKind::kGather:
    case CollectiveKind::kScatter:
      return (d + c) * alpha + (n - 1) * s / beta;
    default:
      return alpha;
  }
}

namespace {

// The hierarchical schedules (core/plan/hier.h) as tuner.h describes them.
double predictHierMicros(CollectiveKind kind, size_t bytes, int nranks, int nhosts, int localSize,
                         int nchannels, size_t chunkBytes, const TuneConstants& constants,
                         const TuneConstants& net, HostStage stage, bool* hostTree) {
  const double s = static_cast<double>(bytes);
  const double c = nchannels;
  const double k = static_cast<double>(std::max<size_t>(chunkBytes, 1));
  const double n = nranks;
  const double local = std::max(localSize, 1);
  const double hosts = std::max(nhosts, 1);
  const double alpha = constants.alphaUs;
  const double netAlpha = net.alphaUs;
  const double beta = std::max(constants.bwGBps, 1e-6) * 1000.0;
  const double netBeta = std::max(net.bwGBps, 1e-6) * 1000.0;
  const double d = depthOf(nhosts);
  *hostTree = false;
  switch (kind) {
    case CollectiveKind::kAllReduce: {
      const double rounds = ceilDivD(s, c * k * n);
      const double within =
          2 * (local - 1) * rounds * c * alpha + 2 * (local - 1) / local * s / beta;
      const double ring =
          2 * (hosts - 1) * rounds * c * netAlpha + 2 * (hosts - 1) / hosts * s / netBeta;
      const double segment = std::min(s, c * k * n) / (c * local);  // one tree's bytes a round
      const double chunks = ceilDivD(segment, 2 * k);
      const double tree = rounds * c * (2 * d + 1 + 8 * (chunks - 1)) * netAlpha + 2 * s / netBeta;
      *hostTree = stage == HostStage::kAuto ? tree < ring : stage == HostStage::kTree;
      return within + (*hostTree ? tree : ring);
    }
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter: {
      const double total = s * n;  // the full vector
      const double rounds = ceilDivD(s, c * ceilDivD(k, hosts));
      return rounds * c * ((hosts - 1) * netAlpha + hosts * (local - 1) * alpha) +
             (hosts - 1) / hosts * total / netBeta + (local - 1) / local * total / beta;
    }
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce: {
      const double chunks = ceilDivD(s, c * k);
      const double piece = std::min(k, s);
      const double within = (local - 1) * (alpha + piece / beta);
      const double chain = (hosts - 1) * (netAlpha + piece / netBeta) +
                           2 * (chunks * c - 1) * netAlpha + s / netBeta;
      const double tree =
          d * (netAlpha + piece / netBeta) + 3 * (chunks * c - 1) * netAlpha + 2 * s / netBeta;
      *hostTree = stage == HostStage::kAuto ? tree < chain : stage == HostStage::kTree;
      return within + (*hostTree ? tree : chain);
    }
    default:
      return predictMicros(kind, Algorithm::kRing, bytes, nranks, nchannels, chunkBytes, net);
  }
}

}  // namespace

double predictHostsMicros(CollectiveKind kind, Algorithm algorithm, size_t bytes, int nranks,
                          int nhosts, int localSize, int nchannels, size_t chunkBytes,
                          const TuneConstants& constants, bool* hostTree, HostStage stage) {
  TuneConstants net = constants;
  if (constants.netBwGBps > 0) {
    net.alphaUs = constants.netAlphaUs;
    net.bwGBps = constants.netBwGBps;
  }
  bool tree = false;
  double micros;
  if (algorithm == Algorithm::kHier && algorithmSupports(algorithm, kind)) {
    micros = predictHierMicros(kind, bytes, nranks, nhosts, localSize, nchannels, chunkBytes,
                               constants, net, stage, &tree);
  } else {
    micros = predictMicros(kind, algorithm, bytes, nranks, nchannels, chunkBytes,
                           nhosts > 1 ? net : constants);
  }
  if (hostTree != nullptr) *hostTree = tree;
  return micros;
}

TuneConstants clampConstants(TuneConstants constants) {
  // NaN compares false everywhere: it becomes the lower bound.
  auto clamp = [](double v, double lo, double hi) { return v >= lo ? std::min(v, hi) : lo; };
  constants.alphaUs = clamp(constants.alphaUs, kMinAlphaUs, kMaxAlphaUs);
  constants.bwGBps = clamp(constants.bwGBps, kMinBwGBps, kMaxBwGBps);
  return constants;
}

namespace {

// The schedule (ring, tree, chain, oneshot) for one collective, as described in tuner.h;
// a forced team algorithm counts as auto here.
TuneDecision decideSchedule(CollectiveKind kind, size_t bytes, int nranks, const TuneLimits& limits,
                            const TuneConstants& constants) {
  // The first algorithm is the robust default.
  std::vector<Algorithm> algorithms;
  const bool oneShotFits = kind == CollectiveKind::kAllReduce && nranks == 2;
  const bool twoLevel = limits.nhosts > 1 && limits.localSize > 1;
  if (limits.forced != Algorithm::kAuto && !isTeamAlgorithm(limits.forced) &&
      algorithmSupports(limits.forced, kind) &&
      (limits.forced != Algorithm::kOneShot || oneShotFits) &&
      (limits.forced != Algorithm::kHier || twoLevel)) {
    algorithms = {limits.forced};
  } else if (kind == CollectiveKind::kAllReduce) {
    algorithms = {Algorithm::kRing, Algorithm::kTree};
    if (oneShotFits && bytes <= kOneShotMaxBytes) algorithms.push_back(Algorithm::kOneShot);
    if (twoLevel) algorithms.push_back(Algorithm::kHier);
  } else if (kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce) {
    algorithms = {Algorithm::kChain, Algorithm::kTree};
    if (twoLevel) algorithms.push_back(Algorithm::kHier);
  } else if (kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllGather) {
    algorithms = {Algorithm::kRing};
    if (twoLevel) algorithms.push_back(Algorithm::kHier);
  } else if (kind == CollectiveKind::kAllToAll) {
    algorithms = {Algorithm::kPairwise, Algorithm::kLinear};
  } else if (kind == CollectiveKind::kAllToAllV) {
    // Its counts differ between ranks, and every rank must decide alike: no sizes.
    algorithms = {Algorithm::kPairwise};
  } else if (isExchange(kind)) {
    algorithms = {Algorithm::kLinear};
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
      int start = limits.channelsFixed
                      ? most
                      : static_cast<int>(std::clamp<size_t>(bytes / perChannel, 1, most));
      int fewest = limits.channelsFixed ? most : 1;
      if (algorithm == Algorithm::kOneShot) start = fewest = 1;  // one message each way
      for (int channels = start; channels >= fewest; --channels) {
        bool hostTree = false;
        const double t =
            limits.nhosts > 1
                ? predictHostsMicros(kind, algorithm, bytes, nranks, limits.nhosts,
                                     limits.localSize, channels, chunk, constants, &hostTree,
                                     limits.hostStage)
                : predictMicros(kind, algorithm, bytes, nranks, channels, chunk, constants);
        if (first || t < mine.predictedUs) {
          mine = TuneDecision{algorithm, chunk, channels, t};
          mine.hostTree = hostTree;
          first = false;
        }
      }
    }
    const double margin = algorithm == Algorithm::kHier ? kHierMargin : kRobustMargin;
    if (a == 0 || mine.predictedUs < (1.0 - margin) * best.predictedUs) best = mine;
  }
  best.steps = best.algorithm;
  return best;
}

bool boardFits(CollectiveKind kind, size_t bytes, int nranks, const TeamOffer& team) {
  return teamHas(team.algorithms, Algorithm::kBoard) && teamSupports(Algorithm::kBoard, kind) &&
         boardBytesOf(kind, bytes, nranks) <= team.boardBytes;
}

}  // namespace

std::string forcedTeamUnavailable(CollectiveKind kind, size_t bytes, int nranks,
                                  const TuneLimits& limits) {
  const Algorithm forced = limits.forced;
  if (!isTeamAlgorithm(forced) || !teamSupports(forced, kind)) return "";
  const std::string name = std::string(algorithmName(forced));
  if (nranks < 2 || !teamHas(limits.team.algorithms, forced)) {
    return "algorithm " + name +
           " is a team collective, and this communicator's transport runs no " + name +
           " (team collectives need every rank on one host, served by shm with "
           "COLLIE_SHM_ONESHOT_MAX > 0, and cma COLLIE_SHM_CMA_MAX > 0 on every rank); use "
           "auto or a schedule (ring, tree, chain)";
  }
  if (forced == Algorithm::kBoard && !boardFits(kind, bytes, nranks, limits.team)) {
    return "the board carries at most " + std::to_string(limits.team.boardBytes) +
           " bytes per rank (COLLIE_SHM_ONESHOT_MAX), but this " +
           std::string(collectiveName(kind)) + " publishes " +
           std::to_string(boardBytesOf(kind, bytes, nranks)) + "; use auto or raise it";
  }
  return "";
}

TuneDecision decide(CollectiveKind kind, size_t bytes, int nranks, const TuneLimits& limits,
                    const TuneConstants& constants) {
  const TeamOffer& team = limits.team;
  const bool teamKind = kind != CollectiveKind::kSend && kind != CollectiveKind::kRecv;
  const bool hasTeam = team.any() && nranks > 1 && teamKind;
  if (isTeamAlgorithm(limits.forced) && teamSupports(limits.forced, kind)) {
    // Alone, without a fallback: where it cannot run, the planner says why.
    TuneDecision forced;
    forced.algorithm = limits.forced;
    forced.teamStep = true;
    forced.team = teamBit(limits.forced);
    forced.steps = Algorithm::kAuto;
    forced.predictedUs = predictTeamMicros(limits.forced, kind, bytes, nranks, team);
    return forced;
  }
  TuneDecision best = decideSchedule(kind, bytes, nranks, limits, constants);
  if (!hasTeam || (limits.forced != Algorithm::kAuto && !isTeamAlgorithm(limits.forced))) {
    return best;
  }
  best.teamStep = true;
  double otherwise = best.predictedUs;
  if (boardFits(kind, bytes, nranks, team)) {
    const double board = predictTeamMicros(Algorithm::kBoard, kind, bytes, nranks, team);
    if (!(best.predictedUs < (1.0 - kRobustMargin) * board)) {
      best.team |= teamBit(Algorithm::kBoard);
      best.steps = Algorithm::kAuto;
      otherwise = board;
    }
  }
  // Strictly cheaper (beyond rounding): at the calibrated crossover the board stays. An
  // exchange the board carries stays on it: cma ran on the progress thread behind a
  // hand-off and lost at every size the board takes (2 ranks, 4-256 KiB, loaded VM:
  // 24-114 against 9-75 us).
  const bool boardKeeps = isEqualExchange(kind) && teamHas(best.team, Algorithm::kBoard);
  // Where the engine times cma against the schedule (cmaIsMeasured), the measurement
  // decides: a probe that finds the FIFOs fast (its bandwidth varies 1.5x from launch to
  // launch here) must not keep cma from being tried.
  const bool measured = cmaIsMeasured(kind, bytes, best.team, best.steps != Algorithm::kAuto,
                                      team.boardBytes, limits.measuredCmaMaxBytes);
  for (Algorithm single : {Algorithm::kDirect, Algorithm::kCma}) {
    if (boardKeeps || !teamHas(team.algorithms, single) || !teamSupports(single, kind)) continue;
    if (predictTeamMicros(single, kind, bytes, nranks, team) < otherwise * (1 - 1e-9) ||
        (single == Algorithm::kCma && measured)) {
      best.team |= teamBit(single);
    }
  }
  if (best.team != 0) {
    best.algorithm = firstTeamAlgorithm(best.team);
    best.predictedUs = predictTeamMicros(best.algorithm, kind, bytes, nranks, team);
  }
  return best;
}

std::string decisionText(const TuneDecision& d) {
  std::string text;
  if (d.teamStep) text = teamAlgorithmsText(d.team);
  if (d.steps == Algorithm::kAuto) return text;
  if (!text.empty()) text += ">";
  const std::string stage = d.steps == Algorithm::kHier && d.hostTree ? "+tree" : "";
  return text + std::string(algorithmName(d.steps)) + stage + "/" + sizeText(d.chunkBytes) + "/" +
         std::to_string(d.nchannels);
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
        std::snprintf(line, sizeof line, " %14s",
                      decisionText(decide(kind, bytes, n, limits, constants)).c_str());
        out += line;
      }
      out += "\n";
    }
  }
  return out;
}

std::string algorithmTable(const TuneLimits& limits, const TuneConstants& constants, int nranks) {
  const CollectiveKind kind = CollectiveKind::kAllReduce;
  std::vector<Algorithm> algorithms;
  for (Algorithm algo : kAllAlgorithms) {
    if (algo == Algorithm::kAuto || !algorithmSupports(algo, kind)) continue;
    if (algo == Algorithm::kOneShot && nranks != 2) continue;
    if (isTeamAlgorithm(algo) && !teamHas(limits.team.algorithms, algo)) continue;
    algorithms.push_back(algo);
  }
  char cell[64];
  std::string out = "allreduce on " + std::to_string(nranks) +
                    " ranks: predicted us per algorithm (- where it cannot run), and the plan\n";
  std::snprintf(cell, sizeof cell, "%8s", "bytes");
  out += cell;
  for (Algorithm algo : algorithms) {
    std::snprintf(cell, sizeof cell, " %9s", std::string(algorithmName(algo)).c_str());
    out += cell;
  }
  out += "  plan\n";
  for (size_t bytes = 8; bytes <= (size_t{1} << 30); bytes *= 4) {
    std::snprintf(cell, sizeof cell, "%8s", sizeText(bytes).c_str());
    out += cell;
    for (Algorithm algo : algorithms) {
      TuneLimits only = limits;
      only.forced = algo;
      const TuneDecision d = decide(kind, bytes, nranks, only, constants);
      const bool runs = forcedTeamUnavailable(kind, bytes, nranks, only).empty();
      if (runs) {
        std::snprintf(cell, sizeof cell, " %9.1f", d.predictedUs);
      } else {
        std::snprintf(cell, sizeof cell, " %9s", "-");
      }
      out += cell;
    }
    out += "  " + decisionText(decide(kind, bytes, nranks, limits, constants)) + "\n";
  }
  const CollectiveKind others[] = {CollectiveKind::kReduceScatter, CollectiveKind::kAllGather,
                                   CollectiveKind::kBroadcast, CollectiveKind::kReduce};
  out += "the other collectives on " + std::to_string(nranks) + " ranks: the plan\n";
  std::snprintf(cell, sizeof cell, "%8s", "bytes");
  out += cell;
  for (CollectiveKind other : others) {
    std::snprintf(cell, sizeof cell, " %22s", std::string(collectiveName(other)).c_str());
    out += cell;
  }
  out += "\n";
  for (size_t bytes = 8; bytes <= (size_t{1} << 30); bytes *= 8) {
    std::snprintf(cell, sizeof cell, "%8s", sizeText(bytes).c_str());
    out += cell;
    for (CollectiveKind other : others) {
      std::snprintf(cell, sizeof cell, " %22s",
                    decisionText(decide(other, bytes, nranks, limits, constants)).c_str());
      out += cell;
    }
    out += "\n";
  }
  std::snprintf(
      cell, sizeof cell, "%8s %22s\n", "barrier",
      decisionText(decide(CollectiveKind::kBarrier, 0, nranks, limits, constants)).c_str());
  return out + cell;
}

}  // namespace collie
