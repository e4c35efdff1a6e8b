// `collie sim`: runs the real schedule generator for every virtual rank of one
// collective in this process and checks and measures it.
//
// Two passes. The first runs the full-size schedules with no data (message sizes,
// order and deadlock freedom only) and gathers steps and bytes per link. The second
// moves symbolic data: random uint64 values combined with a wrapping sum, so a
// missing or doubled contribution changes the result and every rank's output is
// checked exactly; it runs the same algorithm, ranks and channels with the element
// count (and the chunk size, proportionally) reduced so that nranks buffers fit in
// memory. The predicted time comes from the tuner's cost model.
//
// With --transport (shm) the ranks are modelled as one host served by that transport:
// the tuner plans with its team collectives (board, direct, cma) as a communicator of
// that size would, and a plan with a team step is checked twice: with the team running
// it (the simulator's reference of the team algorithms) and with every rank declining
// it (its fallback steps).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/config/config.h"
#include "core/sim/simulator.h"
#include "core/transport/transport.h"
#include "core/tune/tuner.h"
#include "tools/commands.h"

namespace collie::tools {
namespace {

constexpr size_t kDataBudgetBytes = size_t{256} << 20;  // all ranks' buffers, pass 2

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Pass 2: exact check with symbolic uint64 data. Returns an empty string on success.
std::string checkData(CollectiveArgs args, PlanParams params, size_t dataCount,
                      TeamSimulation team) {
  const int n = params.nranks;
  const size_t fullCount = args.count;
  const size_t chunkElems = std::max<size_t>(1, params.chunkBytes / dataTypeSize(args.dtype));
  args.dtype = DataType::kUint64;
  args.op = ReduceOp::kSum;
  args.count = dataCount;
  params.chunkBytes =
      8 * std::max<size_t>(1, fullCount ? chunkElems * dataCount / fullCount : chunkElems);
  const size_t in = inputBytes(args, n) / 8;
  const size_t out = outputBytes(args, n) / 8;
  std::vector<SimulatedRank> ranks(n);
  std::vector<std::vector<uint64_t>> inputs(n);
  std::mt19937_64 rng(12345);
  for (int r = 0; r < n; ++r) {
    inputs[r].resize(in);
    for (uint64_t& v : inputs[r]) v = rng();
    ranks[r].input.resize(in * 8);
    if (in) std::memcpy(ranks[r].input.data(), inputs[r].data(), in * 8);
    ranks[r].output.assign(out * 8, 0);
  }
  Status status = simulateCollective(args, params, &ranks, false, nullptr, team);
  if (!status.isOk()) return status.toString();
  std::vector<uint64_t> sum(in, 0);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < in; ++i) sum[i] += inputs[r][i];
  }
  for (int r = 0; r < n; ++r) {
    std::vector<uint64_t> got(out);
    if (out) std::memcpy(got.data(), ranks[r].output.data(), out * 8);
    for (size_t i = 0; i < out; ++i) {
      uint64_t want = 0;
      switch (args.kind) {
        case CollectiveKind::kAllReduce:
          want = sum[i];
          break;
        case CollectiveKind::kReduceScatter:
          want = sum[r * dataCount + i];
          break;
        case CollectiveKind::kAllGather:
          want = inputs[i / dataCount][i % dataCount];
          break;
        case CollectiveKind::kBroadcast:
          want = inputs[args.root][i];
          break;
        case CollectiveKind::kReduce:
          want = r == args.root ? sum[i] : 0;
          break;
        case CollectiveKind::kAllToAll:  // block p: block r of rank p's input
          want = inputs[i / dataCount][r * dataCount + i % dataCount];
          break;
        case CollectiveKind::kGather:
          want = r == args.root ? inputs[i / dataCount][i % dataCount] : 0;
          break;
        case CollectiveKind::kScatter:
          want = inputs[args.root][r * dataCount + i];
          break;
        default:
          break;
      }
      if (got[i] != want) {
        return "rank " + std::to_string(r) + " element " + std::to_string(i) + " is " +
               std::to_string(got[i]) + ", expected " + std::to_string(want);
      }
    }
  }
  return "";
}

}  // namespace

CLI::App* addSimCommand(CLI::App& app, SimCliOptions* options) {
  CLI::App* cmd = app.add_subcommand(
      "sim", "Simulate one collective's schedules on N virtual ranks: check and predict");
  cmd->add_option(
         "--coll", options->collective,
         "allreduce, reducescatter, allgather, broadcast, reduce, alltoall, gather or scatter")
      ->capture_default_str();
  cmd->add_option("--algo", options->algo, algorithmNames())->capture_default_str();
  cmd->add_option("--nranks", options->nranks, "virtual ranks")->capture_default_str();
  cmd->add_option("--bytes", options->bytes,
                  "bytes per rank buffer (all-gather/reduce-scatter/alltoall/gather/scatter: the "
                  "full vector, size / nranks per block); K/M/G")
      ->capture_default_str();
  cmd->add_option("--dtype", options->dtype, "element type of the planned collective")
      ->capture_default_str();
  cmd->add_option("--alpha", options->alphaUs, "model: microseconds per message");
  cmd->add_option("--bw", options->bwGBps, "model: GB/s per link");
  cmd->add_option("--nchannels", options->nchannels, "channels (default: the tuner, up to 2)");
  cmd->add_option("--chunk", options->chunk, "chunk bytes (default: the tuner); K/M suffix");
  cmd->add_option("--root", options->root, "root of broadcast/reduce/gather/scatter")
      ->capture_default_str();
  cmd->add_option("--hosts", options->hosts,
                  "spread the ranks over this many hosts, as many on each (rings and trees in "
                  "host order; hier: two levels)")
      ->capture_default_str();
  cmd->add_option("--distribution", options->distribution,
                  "rank numbering over the hosts: block (host after host) or cyclic")
      ->capture_default_str();
  cmd->add_option("--net-alpha", options->netAlphaUs,
                  "model: microseconds per message between hosts");
  cmd->add_option("--net-bw", options->netBwGBps, "model: GB/s of one host's link");
  cmd->add_option("--hier-hosts", options->hierHosts,
                  "hier's inter-host stage: auto (the cost model), ring (chain for broadcast "
                  "and reduce) or tree")
      ->capture_default_str();
  cmd->add_option("--transport", options->transport,
                  "model every rank on one host served by this transport, with its team "
                  "collectives (shm: board, direct, cma)");
  return cmd;
}

int runSim(const SimCliOptions& o) {
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "collie sim: %s\n", message.c_str());
    return 2;
  };
  Result<CollectiveKind> kind = parseCollective(o.collective);
  if (!kind.isOk()) return fail(kind.status().message());
  std::optional<Algorithm> algo = parseAlgorithm(o.algo);
  if (!algo) return fail("unknown --algo '" + o.algo + "'");
  std::optional<DataType> dtype = parseDataType(o.dtype);
  if (!dtype) return fail("unknown --dtype '" + o.dtype + "'");
  if (o.nranks < 1 || o.nranks > (1 << 20)) return fail("--nranks must be in [1, 1048576]");
  Result<int64_t> bytes = parseSize(o.bytes);
  if (!bytes.isOk() || *bytes < 0) return fail("bad --bytes '" + o.bytes + "'");
  size_t chunk = 0;
  if (!o.chunk.empty()) {
    Result<int64_t> parsed = parseSize(o.chunk);
    if (!parsed.isOk() || *parsed < 8) return fail("bad --chunk '" + o.chunk + "'");
    chunk = static_cast<size_t>(*parsed);
  }
  if (o.root < 0 || o.root >= o.nranks) return fail("--root must be in [0, nranks)");
  // The engine runs at most 16 channels (COLLIE_NCHANNELS' range); 0 = the tuner's choice.
  if (o.nchannels < 0 || o.nchannels > 16) {
    return fail("--nchannels " + std::to_string(o.nchannels) +
                " is outside [1, 16] (0: the tuner)");
  }
  if (!std::isfinite(o.alphaUs) || o.alphaUs < 0 || !std::isfinite(o.bwGBps) || o.bwGBps < 0) {
    return fail("--alpha and --bw must be non-negative numbers");
  }

  if (o.hosts < 1 || o.nranks % o.hosts != 0) {
    return fail("--hosts must divide --nranks (" + std::to_string(o.nranks) + ")");
  }
  if (o.distribution != "block" && o.distribution != "cyclic") {
    return fail("--distribution must be block or cyclic, not '" + o.distribution + "'");
  }
  if (!std::isfinite(o.netAlphaUs) || o.netAlphaUs < 0 || !std::isfinite(o.netBwGBps) ||
      o.netBwGBps < 0) {
    return fail("--net-alpha and --net-bw must be non-negative numbers");
  }
  if (o.hierHosts != "auto" && o.hierHosts != "ring" && o.hierHosts != "tree") {
    return fail("--hier-hosts must be auto, ring or tree, not '" + o.hierHosts + "'");
  }
  if (o.hosts > 1 && !o.transport.empty()) {
    return fail("--transport models one host; leave it out with --hosts");
  }

  const int n = o.nranks;
  const size_t es = dataTypeSize(*dtype);
  HostLayoutPtr hosts;
  if (o.hosts > 1) {
    std::vector<int> hostOfRank(n);
    for (int r = 0; r < n; ++r) {
      hostOfRank[r] = o.distribution == "cyclic" ? r % o.hosts : r / (n / o.hosts);
    }
    hosts = std::make_shared<const HostLayout>(HostLayout::make(hostOfRank));
  }
  CollectiveArgs args;
  args.kind = *kind;
  args.dtype = *dtype;
  args.op = ReduceOp::kSum;
  args.root = o.root;
  args.count = static_cast<size_t>(*bytes) / es;
  const bool blocked = *kind == CollectiveKind::kAllGather ||
                       *kind == CollectiveKind::kReduceScatter || isExchange(*kind);
  if (blocked) args.count /= n;
  const size_t planBytes = args.count * es;

  TuneConstants constants;
  if (o.alphaUs > 0) constants.alphaUs = o.alphaUs;
  if (o.bwGBps > 0) constants.bwGBps = o.bwGBps;
  constants.source = o.alphaUs > 0 || o.bwGBps > 0 ? "command line" : "default";
  if (o.netBwGBps > 0) {
    constants.netBwGBps = o.netBwGBps;
    constants.netAlphaUs = o.netAlphaUs > 0 ? o.netAlphaUs : constants.alphaUs;
  }
  TuneLimits limits;
  limits.maxChannels = o.nchannels > 0 ? o.nchannels : 2;
  limits.channelsFixed = o.nchannels > 0;
  limits.chunkBytes = chunk;
  limits.forced = *algo;
  if (hosts) {
    limits.nhosts = hosts->nhosts;
    limits.localSize = hosts->localSize;
  }
  limits.hostStage = o.hierHosts == "ring"   ? HostStage::kRing
                     : o.hierHosts == "tree" ? HostStage::kTree
                                             : HostStage::kAuto;
  if (*algo != Algorithm::kAuto && !algorithmSupports(*algo, *kind)) {
    return fail(std::string(algorithmName(*algo)) + " does not implement " + o.collective);
  }
  if (!o.transport.empty()) {
    const TransportFactory* factory = TransportRegistry::instance().find(o.transport);
    if (factory == nullptr) return fail("unknown --transport '" + o.transport + "'");
    if (factory->teamOffer != nullptr) {
      limits.team = factory->teamOffer(Config::fromEnvironment(), n);
    }
  }
  const std::string unavailable = forcedTeamUnavailable(*kind, planBytes, n, limits);
  if (!unavailable.empty()) return fail(unavailable);
  TuneDecision decision = decide(*kind, planBytes, n, limits, constants);
  PlanParams params;
  params.nranks = n;
  params.nchannels = decision.nchannels;
  params.chunkBytes = decision.chunkBytes;
  params.algorithm = decision.steps;
  params.teamStep = decision.teamStep;
  params.team = decision.team;
  params.teamFallback = decision.steps != Algorithm::kAuto;
  params.hosts = hosts;
  params.hostTree = decision.hostTree;

  std::printf("collie sim: %s of %zu bytes (%zu x %s) on %d ranks: %s%s", o.collective.c_str(),
              static_cast<size_t>(*bytes), args.count, std::string(dataTypeName(*dtype)).c_str(), n,
              algorithmSpecName(decision.algorithm).c_str(),
              decision.steps != Algorithm::kHier ? ""
              : decision.hostTree                ? " (tree between hosts)"
                                                 : " (ring/chain between hosts)");
  if (decision.steps != Algorithm::kAuto) {
    std::printf(", chunk %zu, %d channel(s)", decision.chunkBytes, decision.nchannels);
  }
  std::printf("\n");
  if (decision.teamStep) {
    std::printf("plan: team step %s%s\n", teamAlgorithmsText(decision.team).c_str(),
                decision.steps == Algorithm::kAuto
                    ? ", nothing after it"
                    : (", then (declined) " + algorithmSpecName(decision.steps)).c_str());
  }
  // With a team step: once as the team runs it, once as every rank declines it (the
  // fallback), where there is one.
  std::vector<TeamSimulation> modes = {TeamSimulation::kRun};
  if (decision.teamStep && decision.steps != Algorithm::kAuto && decision.team != 0) {
    modes.push_back(TeamSimulation::kDecline);
  }
  auto modeName = [&](TeamSimulation mode) {
    if (!decision.teamStep) return std::string();
    return mode == TeamSimulation::kRun && decision.team != 0
               ? " (team: " + algorithmSpecName(decision.algorithm) + ")"
               : " (team declined: " + algorithmSpecName(decision.steps) + ")";
  };
  auto start = std::chrono::steady_clock::now();
  SimulationStats stats;
  for (TeamSimulation mode : modes) {
    SimulationStats mine;
    Status status = simulateCollective(args, params, nullptr, false, &mine, mode);
    if (!status.isOk()) {
      std::printf("schedule check%s: FAILED: %s\n", modeName(mode).c_str(),
                  status.toString().c_str());
      return 1;
    }
    if (mode == modes.back()) stats = mine;  // the steps of the fallback, if any
  }
  const double scheduleSeconds = secondsSince(start);
  std::printf("steps: %llu in all, at most %llu on one rank; messages %llu\n",
              static_cast<unsigned long long>(stats.steps),
              static_cast<unsigned long long>(stats.maxStepsOnOneRank),
              static_cast<unsigned long long>(stats.messages));
  if (stats.messages == 0 && decision.teamStep) {
    std::printf("bytes moved: none in messages (the team step reads and writes the buffers)\n");
  } else {
    std::printf("bytes moved: %llu over %llu links, %.1f per link on average\n",
                static_cast<unsigned long long>(stats.bytesMoved),
                static_cast<unsigned long long>(stats.links),
                stats.links ? static_cast<double>(stats.bytesMoved) / stats.links : 0.0);
    std::printf("busiest link: rank %d -> rank %d, %llu bytes\n", stats.busiestSender,
                stats.busiestReceiver, static_cast<unsigned long long>(stats.maxBytesOnOneLink));
  }
  if (hosts) {
    // What leaves the busiest host, in buffers (all-gather, reduce-scatter: blocks), for
    // a flat ring or chain in host order and for two levels (core/plan/hier.h).
    const double m = hosts->nhosts;
    double flat = 2.0 * (n - 1) / n, two = 2.0 * (m - 1) / m;
    const char* flatText = "a flat ring's 2(N-1)/N";
    const char* twoText = "two levels' 2(M-1)/M";
    if (blocked) {
      flat = n - 1;
      two = (m - 1) / m * n;
      flatText = "a flat ring's N-1";
      twoText = "two levels' (M-1)/M N";
    } else if (*kind == CollectiveKind::kBroadcast || *kind == CollectiveKind::kReduce) {
      flat = two = 1;
      flatText = "a chain's 1";
      twoText = "two levels' (chain between hosts) 1";
    }
    std::printf(
        "hosts: %d of %d ranks (%s); bytes between hosts %llu, most out of one host %llu "
        "(host %d) = %.4f x the %s; %s = %.4f, %s = %.4f\n",
        hosts->nhosts, n / hosts->nhosts, o.distribution.c_str(),
        static_cast<unsigned long long>(stats.bytesBetweenHosts),
        static_cast<unsigned long long>(stats.maxBytesOutOfOneHost), stats.busiestHost,
        planBytes ? static_cast<double>(stats.maxBytesOutOfOneHost) / planBytes : 0.0,
        blocked ? "block" : "buffer", flatText, flat, twoText, two);
  }
  std::printf("model: alpha %.2f us, %.3f GB/s per link [%s]", constants.alphaUs, constants.bwGBps,
              constants.source.c_str());
  if (hosts && constants.netBwGBps > 0) {
    std::printf("; between hosts alpha %.2f us, %.3f GB/s per host's link", constants.netAlphaUs,
                constants.netBwGBps);
  }
  std::printf("\n");
  // Every algorithm that runs here (core/plan/algorithm_spec.h); a team algorithm where
  // the transport's team would run it (checked below).
  std::vector<Algorithm> candidates;
  const CommShape shape{n, limits.nhosts, limits.localSize};
  for (const AlgorithmSpec* spec : AlgorithmRegistry::instance().all()) {
    if (spec->implements(*kind) && (spec->isTeam() || spec->runsOn(*kind, shape))) {
      candidates.push_back(spec->id());
    }
  }
  for (Algorithm candidate : candidates) {
    TuneLimits only = limits;
    only.forced = candidate;
    if (isTeamAlgorithm(candidate) && !forcedTeamUnavailable(*kind, planBytes, n, only).empty()) {
      continue;
    }
    const bool chosen = candidate == decision.algorithm ||
                        (decision.teamStep && teamHas(decision.team, candidate)) ||
                        candidate == decision.steps;
    if (candidate != Algorithm::kHier) {
      TuneDecision d = decide(*kind, planBytes, n, only, constants);
      std::printf("predicted time %-7s: %12.1f us%s\n", algorithmSpecName(candidate).c_str(),
                  d.predictedUs, chosen ? "  <- simulated" : "");
      continue;
    }
    // Hier with each inter-host stage (all-gather and reduce-scatter have a ring only).
    const bool both =
        *kind != CollectiveKind::kAllGather && *kind != CollectiveKind::kReduceScatter;
    for (HostStage stage : {HostStage::kRing, HostStage::kTree}) {
      if (stage == HostStage::kTree && !both) continue;
      only.hostStage = stage;
      TuneDecision d = decide(*kind, planBytes, n, only, constants);
      const bool tree = stage == HostStage::kTree;
      const char* name = !both  ? "hier"
                         : tree ? "hier, tree between hosts"
                                : "hier, ring/chain between hosts";
      std::printf("predicted time %-7s: %12.1f us%s\n", name, d.predictedUs,
                  chosen && decision.hostTree == tree ? "  <- simulated" : "");
    }
  }
  std::printf("schedules (full size, no data) checked in %.2f s\n", scheduleSeconds);

  // Pass 2: exact data check at a count that fits in memory.
  start = std::chrono::steady_clock::now();
  const size_t perRankBudget = kDataBudgetBytes / (static_cast<size_t>(n) * 16 * (blocked ? n : 1));
  const size_t dataCount = std::min(args.count, std::max<size_t>(1, perRankBudget));
  for (TeamSimulation mode : modes) {
    std::string error = checkData(args, params, dataCount, mode);
    if (!error.empty()) {
      std::printf("data check%s: FAILED: %s\n", modeName(mode).c_str(), error.c_str());
      return 1;
    }
    std::printf(
        "data check%s: PASSED: every rank exact (%zu uint64 elements per rank, wrapping "
        "sum of random values) in %.2f s\n",
        modeName(mode).c_str(), dataCount, secondsSince(start));
  }
  return 0;
}

}  // namespace collie::tools
