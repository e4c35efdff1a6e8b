#include "core/tune/tuner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <span>
#include <vector>

namespace collie {
namespace {

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
  if (algorithm == Algorithm::kAuto) return true;
  const AlgorithmSpec* spec = AlgorithmRegistry::instance().find(algorithm);
  return spec != nullptr && spec->implements(kind);
}

namespace {

// The query of `kind` of `bytes` on `nranks` ranks over `nhosts` hosts, channels and
// chunk left to the caller.
CostQuery queryOf(CollectiveKind kind, size_t bytes, int nranks, int nhosts, int localSize,
                  const TuneConstants& constants, HostStage stage) {
  CostQuery query;
  query.kind = kind;
  query.bytes = bytes;
  query.nranks = nranks;
  query.nhosts = nhosts;
  query.localSize = localSize;
  query.constants = linkOf(constants);
  query.net = netLinkOf(constants);  // read only over several hosts (CostQuery::pacing)
  query.stage = stage;
  return query;
}

// `spec`'s prediction; one rank costs a latency.
double predictWith(const AlgorithmSpec& spec, const CostQuery& query, bool* hostTree) {
  if (hostTree != nullptr) *hostTree = false;
  if (query.nranks <= 1) return query.pacing().alphaUs;
  return spec.predict(query, hostTree);
}

}  // namespace

double predictMicros(CollectiveKind kind, Algorithm algorithm, size_t bytes, int nranks,
                     int nchannels, size_t chunkBytes, const TuneConstants& constants) {
  // One host: every spec is paced by `constants` (CostQuery::pacing()).
  return predictHostsMicros(kind, algorithm, bytes, nranks, 1, 0, nchannels, chunkBytes, constants);
}

double predictHostsMicros(CollectiveKind kind, Algorithm algorithm, size_t bytes, int nranks,
                          int nhosts, int localSize, int nchannels, size_t chunkBytes,
                          const TuneConstants& constants, bool* hostTree, HostStage stage) {
  CostQuery query = queryOf(kind, bytes, nranks, nhosts, localSize, constants, stage);
  query.nchannels = nchannels;
  query.chunkBytes = chunkBytes;
  return predictWith(AlgorithmRegistry::instance().resolve(algorithm, kind), query, hostTree);
}

double predictTeamMicros(Algorithm algo, CollectiveKind kind, size_t bytes, int nranks,
                         const TeamOffer& offer) {
  const AlgorithmSpec* spec = AlgorithmRegistry::instance().find(algo);
  if (spec == nullptr || !spec->isTeam()) return 0;
  CostQuery query;
  query.kind = kind;
  query.bytes = bytes;
  query.nranks = nranks;
  query.team = &offer;
  return spec->predict(query, nullptr);
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
  // The robust default first, then the others in the registry's order.
  const AlgorithmRegistry& registry = AlgorithmRegistry::instance();
  const CommShape shape{nranks, limits.nhosts, limits.localSize};
  // No allocation: the planner decides before it looks in its schedule cache.
  std::array<const AlgorithmSpec*, AlgorithmRegistry::kMaxSpecs> candidates{};
  size_t count = 0;
  if (const AlgorithmSpec* forced = registry.forcedSchedule(limits.forced, kind, shape)) {
    candidates[count++] = forced;
  } else {
    const AlgorithmSpec& robust = registry.robustDefault(kind);
    candidates[count++] = &robust;
    for (const AlgorithmSpec* spec : registry.all()) {
      if (spec != &robust && !spec->isTeam() && spec->implements(kind) &&
          spec->offeredFor(kind, bytes, shape)) {
        candidates[count++] = spec;
      }
    }
  }
  const std::span<const AlgorithmSpec* const> algorithms(candidates.data(), count);
  static constexpr size_t kTunedChunks[] = {128 << 10, 256 << 10, 512 << 10, 1 << 20};
  const std::span<const size_t> chunks = limits.chunkBytes == 0
                                             ? std::span<const size_t>(kTunedChunks)
                                             : std::span<const size_t>(&limits.chunkBytes, 1);
  TuneDecision best;
  CostQuery query =
      queryOf(kind, bytes, nranks, limits.nhosts, limits.localSize, constants, limits.hostStage);
  for (size_t a = 0; a < algorithms.size(); ++a) {
    const AlgorithmSpec& spec = *algorithms[a];
    TuneDecision mine;
    bool first = true;
    for (size_t chunk : chunks) {
      // Channels: the configured count when fixed, else every count that gives each
      // channel a chunk, most first, so that a tie keeps the parallel pipelines.
      const int most = std::max(1, limits.maxChannels);
      const size_t perChannel = spec.bytesPerChannel(kind, chunk);
      int start = limits.channelsFixed ? most
                                       : static_cast<int>(std::clamp<size_t>(
                                             bytes / std::max<size_t>(perChannel, 1), 1, most));
      int fewest = limits.channelsFixed ? most : 1;
      if (perChannel == 0) start = fewest = 1;  // one message each way
      for (int channels = start; channels >= fewest; --channels) {
        bool hostTree = false;
        query.nchannels = channels;
        query.chunkBytes = chunk;
        const double t = predictWith(spec, query, &hostTree);
        if (first || t < mine.predictedUs) {
          mine = TuneDecision{spec.id(), chunk, channels, t};
          mine.hostTree = hostTree;
          first = false;
        }
      }
    }
    if (a == 0 || mine.predictedUs < (1.0 - spec.margin()) * best.predictedUs) best = mine;
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
  const std::string stage = d.hostTree ? "+tree" : "";
  return text + algorithmSpecName(d.steps) + stage + "/" + sizeText(d.chunkBytes) + "/" +
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
  // Every algorithm that runs here: the schedule algorithms, and the team's it offers.
  std::vector<Algorithm> algorithms;
  const CommShape shape{nranks, limits.nhosts, limits.localSize};
  for (const AlgorithmSpec* spec : AlgorithmRegistry::instance().all()) {
    const bool runs =
        spec->isTeam() ? teamHas(limits.team.algorithms, spec->id()) : spec->runsOn(kind, shape);
    if (spec->implements(kind) && runs) algorithms.push_back(spec->id());
  }
  char cell[64];
  std::string out = "allreduce on " + std::to_string(nranks) +
                    " ranks: predicted us per algorithm (- where it cannot run), and the plan\n";
  std::snprintf(cell, sizeof cell, "%8s", "bytes");
  out += cell;
  for (Algorithm algo : algorithms) {
    std::snprintf(cell, sizeof cell, " %9s", algorithmSpecName(algo).c_str());
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
