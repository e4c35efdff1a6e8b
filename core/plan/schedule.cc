#include "core/plan/schedule.h"

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/plan/algorithm_spec.h"
#include "core/plan/point_to_point.h"
#include "core/plan/team_step.h"

namespace collie {

size_t Schedule::stepCount() const {
  size_t total = 0;
  for (const auto& steps : channels) total += steps.size();
  return total;
}

namespace {
// The end of the furthest block of a layout's counts and offsets, in bytes.
size_t layoutEnd(const std::vector<size_t>& counts, const std::vector<size_t>& offsets,
                 DataType dtype) {
  size_t end = 0;
  for (size_t p = 0; p < counts.size() && p < offsets.size(); ++p) {
    end = std::max(end, (offsets[p] + counts[p]) * dataTypeSize(dtype));
  }
  return end;
}
}  // namespace

std::shared_ptr<const BlockCounts> BlockCounts::packed(const std::vector<size_t>& counts) {
  auto blocks = std::make_shared<BlockCounts>();
  blocks->counts = counts;
  blocks->offsets.resize(counts.size());
  for (size_t p = 0; p < counts.size(); ++p) {
    blocks->offsets[p] = blocks->total;
    blocks->total += counts[p];
    blocks->largest = std::max(blocks->largest, counts[p]);
  }
  return blocks;
}

size_t inputBytes(const CollectiveArgs& args, int nranks) {
  size_t bytes = args.count * dataTypeSize(args.dtype);
  switch (args.kind) {
    case CollectiveKind::kAllToAllV:
      return args.layout ? layoutEnd(args.layout->sendCounts, args.layout->sendOffsets, args.dtype)
                         : 0;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kScatter:
      return bytes * nranks;
    case CollectiveKind::kAllGatherV:
      return args.blocks ? args.blocks->largest * dataTypeSize(args.dtype) : 0;
    case CollectiveKind::kRecv:
    case CollectiveKind::kBarrier:
      return 0;
    default:
      return bytes;
  }
}

size_t outputBytes(const CollectiveArgs& args, int nranks) {
  size_t bytes = args.count * dataTypeSize(args.dtype);
  switch (args.kind) {
    case CollectiveKind::kAllToAllV:
      return args.layout ? layoutEnd(args.layout->recvCounts, args.layout->recvOffsets, args.dtype)
                         : 0;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kGather:
      return bytes * nranks;
    case CollectiveKind::kReduceScatterV:
      return args.blocks ? args.blocks->largest * dataTypeSize(args.dtype) : 0;
    case CollectiveKind::kSend:
    case CollectiveKind::kBarrier:
      return 0;
    default:
      return bytes;
  }
}

namespace {
Status checkCommon(const CollectiveArgs& args, const PlanParams& params) {
  if (params.nranks < 1 || params.rank < 0 || params.rank >= params.nranks) {
    return invalidArgument("rank " + std::to_string(params.rank) + " is outside [0, " +
                           std::to_string(params.nranks) + ")");
  }
  if (params.nchannels < 1) return invalidArgument("nchannels must be at least 1");
  if (!isValid(args.dtype)) return invalidArgument("unknown dtype");
  if (!isValid(args.op)) return invalidArgument("unknown reduction op");
  return Status();
}

// The v kinds need a count per rank, the other kinds none.
Status checkBlocks(const CollectiveArgs& args, const PlanParams& params) {
  if (!hasBlockCounts(args.kind)) {
    if (args.blocks != nullptr) {
      return invalidArgument(std::string(collectiveName(args.kind)) + " takes no block counts");
    }
    return Status();
  }
  if (args.blocks == nullptr || args.blocks->counts.size() != static_cast<size_t>(params.nranks) ||
      args.blocks->offsets.size() != args.blocks->counts.size()) {
    return invalidArgument(std::string(collectiveName(args.kind)) + " needs " +
                           std::to_string(params.nranks) + " block counts, one per rank");
  }
  if (args.count != args.blocks->total) {
    return invalidArgument(std::string(collectiveName(args.kind)) +
                           ": count must be the sum of the block counts");
  }
  return Status();
}

Status checkRoot(const CollectiveArgs& args, const PlanParams& params) {
  if (args.root < 0 || args.root >= params.nranks) {
    return invalidArgument("root " + std::to_string(args.root) + " is outside [0, " +
                           std::to_string(params.nranks) + ")");
  }
  return Status();
}

// A team step's set must name team algorithms that implement the collective.
Status checkTeam(const CollectiveArgs& args, const PlanParams& params) {
  if (args.kind == CollectiveKind::kSend || args.kind == CollectiveKind::kRecv) {
    return invalidArgument("point-to-point operations have no team step");
  }
  for (int bit = 0; bit < 16; ++bit) {
    if ((params.team & (1u << bit)) == 0) continue;
    const Algorithm algo = static_cast<Algorithm>(bit);
    if (!isTeamAlgorithm(algo) || !teamSupports(algo, args.kind)) {
      return unsupported(std::string(algorithmName(algo)) + " " +
                         std::string(collectiveName(args.kind)) +
                         " is not a team collective; use auto");
    }
  }
  if (!params.teamFallback && params.team == 0) {
    return invalidArgument("a team step without algorithms needs a fallback schedule");
  }
  if (args.kind == CollectiveKind::kBroadcast || args.kind == CollectiveKind::kReduce) {
    return checkRoot(args, params);
  }
  return Status();
}

Generator<Step> yieldSteps(std::shared_ptr<const Schedule> schedule, int channel) {
  for (const Step& step : schedule->channels[channel]) co_yield step;
}

// Whether the collective is planned in ring positions (core/plan/layout.h): every
// collective of a communicator over several hosts but point-to-point (the caller names
// the peer) and a team step alone (one host). A root out of range plans in rank order,
// which refuses it.
bool inPositions(const CollectiveArgs& args, const PlanParams& params) {
  if (!params.hosts || isPointToPoint(args.kind)) return false;
  if (static_cast<int>(params.hosts->order.size()) != params.nranks) return false;
  if (params.rank < 0 || params.rank >= params.nranks) return false;
  return !isRooted(args.kind) || (args.root >= 0 && args.root < params.nranks);
}

// The spec that plans `kind` with `algorithm` (kAuto: the kind's robust default), or null
// when none is registered under it.
const AlgorithmSpec* specToPlan(CollectiveKind kind, Algorithm algorithm) {
  const AlgorithmRegistry& registry = AlgorithmRegistry::instance();
  return algorithm == Algorithm::kAuto ? &registry.robustDefault(kind) : registry.find(algorithm);
}

// The steps of a collective that has an algorithm choice (every kind but point-to-point
// and the barrier), by its algorithm's spec; what every algorithm shares is here: the
// root check and root agreement of broadcast and reduce, the copy of one rank.
Status planWithSpec(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                    Schedule* schedule) {
  const AlgorithmSpec* spec = specToPlan(args.kind, params.algorithm);
  if (spec == nullptr || !spec->implements(args.kind)) {
    return unsupported(algorithmSpecName(params.algorithm) + " " +
                       std::string(collectiveName(args.kind)) + " is not implemented; use " +
                       AlgorithmRegistry::instance().namesImplementing(args.kind) + " or auto");
  }
  schedule->algorithm = spec->id();
  const size_t es = dataTypeSize(args.dtype);
  switch (args.kind) {
    case CollectiveKind::kBroadcast:
      COLLIE_RETURN_IF_ERROR(checkRoot(args, params));
      COLLIE_RETURN_IF_ERROR(spec->plan(args, params, chunkElems, schedule));
      // After the data: a broadcast's data always flows (its root only sends), and a
      // rank that believes in another root sent data that this rank's receives reject.
      if (params.agreeOnRoot && params.nranks > 1) planBarrier(params, schedule);
      return Status();
    case CollectiveKind::kReduce:
      COLLIE_RETURN_IF_ERROR(checkRoot(args, params));
      // Before the data: two ranks that both believe they are a reduce's root only
      // receive, so without it nothing would ever reach them.
      if (params.agreeOnRoot && params.nranks > 1) planBarrier(params, schedule);
      return spec->plan(args, params, chunkElems, schedule);
    default:
      break;
  }
  if (isExchange(args.kind) || params.nranks > 1) {
    return spec->plan(args, params, chunkElems, schedule);
  }
  // One rank: its input is its output.
  Step copy;
  copy.kind = StepKind::kCopy;
  copy.src = Slice{BufferId::kInput, 0};
  copy.dst = Slice{BufferId::kOutput, 0};
  copy.bytes = args.count * es;
  copy.divisor = args.op == ReduceOp::kAvg && args.kind != CollectiveKind::kAllGather &&
                         args.kind != CollectiveKind::kAllGatherV
                     ? 1
                     : 0;
  if (copy.bytes > 0) schedule->channels[0].push_back(copy);
  return Status();
}

void toRanks(const HostLayout& hosts, Step* step) {
  if (step->kind == StepKind::kTeam) return;
  if (step->sendPeer >= 0) step->sendPeer = hosts.order[step->sendPeer];
  if (step->recvPeer >= 0) step->recvPeer = hosts.order[step->recvPeer];
}

Generator<Step> stepsToRanks(Generator<Step> steps, HostLayoutPtr hosts) {
  Step step;
  while (steps.next(&step)) {
    toRanks(*hosts, &step);
    co_yield step;
  }
}

Result<Schedule> buildInRankOrder(const CollectiveArgs& args, const PlanParams& params);
}  // namespace

Result<std::vector<Generator<Step>>> streamSchedule(const CollectiveArgs& args,
                                                    const PlanParams& params,
                                                    size_t* scratchBytesPerChannel) {
  COLLIE_RETURN_IF_ERROR(checkCommon(args, params));
  std::vector<Generator<Step>> channels;
  // A team step comes first, so only schedules without one stream.
  const size_t chunkElems = std::max<size_t>(1, params.chunkBytes / dataTypeSize(args.dtype));
  const AlgorithmSpec* spec = specToPlan(args.kind, params.algorithm);
  if (spec != nullptr && !params.teamStep && params.nranks > 1 &&
      checkBlocks(args, params).isOk() && spec->streams(args, params)) {
    PlanParams positions = params;
    if (inPositions(args, params)) positions.rank = params.hosts->position[params.rank];
    for (int c = 0; c < params.nchannels; ++c) {
      Generator<Step> steps = spec->stream(args, positions, chunkElems, c);
      channels.push_back(inPositions(args, params) ? stepsToRanks(std::move(steps), params.hosts)
                                                   : std::move(steps));
    }
    *scratchBytesPerChannel = spec->streamScratchBytes(args, chunkElems);
    return channels;
  }
  Result<Schedule> built = buildSchedule(args, params);
  if (!built.isOk()) return built.status();
  auto shared = std::make_shared<const Schedule>(std::move(built).value());
  for (int c = 0; c < params.nchannels; ++c) channels.push_back(yieldSteps(shared, c));
  *scratchBytesPerChannel = shared->scratchBytesPerChannel;
  return channels;
}

Result<Schedule> buildSchedule(const CollectiveArgs& args, const PlanParams& params) {
  if (!inPositions(args, params)) return buildInRankOrder(args, params);
  // Plan as the rank at this rank's position, then name the peers by rank.
  const HostLayout& hosts = *params.hosts;
  CollectiveArgs positionArgs = args;
  PlanParams positionParams = params;
  positionParams.rank = hosts.position[params.rank];
  if (isRooted(args.kind)) positionArgs.root = hosts.position[args.root];
  Result<Schedule> built = buildInRankOrder(positionArgs, positionParams);
  if (!built.isOk()) return built.status();
  Schedule schedule = std::move(built).value();
  schedule.args = args;
  schedule.rank = params.rank;
  for (std::vector<Step>& steps : schedule.channels) {
    for (Step& step : steps) toRanks(hosts, &step);
  }
  return schedule;
}

namespace {
Result<Schedule> buildInRankOrder(const CollectiveArgs& args, const PlanParams& params) {
  COLLIE_RETURN_IF_ERROR(checkCommon(args, params));
  COLLIE_RETURN_IF_ERROR(checkBlocks(args, params));
  const size_t es = dataTypeSize(args.dtype);
  const size_t chunkElems = std::max<size_t>(1, params.chunkBytes / es);

  Schedule schedule;
  schedule.args = args;
  schedule.rank = params.rank;
  schedule.nranks = params.nranks;
  schedule.channels.resize(params.nchannels);
  if (params.teamStep) {
    COLLIE_RETURN_IF_ERROR(checkTeam(args, params));
    planTeamStep(params, &schedule);
    if (!params.teamFallback) {
      schedule.algorithm = firstTeamAlgorithm(params.team);
      return schedule;
    }
  }
  if (isTeamAlgorithm(params.algorithm)) return teamStepOnly(params.algorithm);
  switch (args.kind) {
    case CollectiveKind::kSend:
    case CollectiveKind::kRecv:
      if (args.peer < 0 || args.peer >= params.nranks || args.peer == params.rank) {
        return invalidArgument("peer " + std::to_string(args.peer) +
                               " must be another rank in [0, " + std::to_string(params.nranks) +
                               ")");
      }
      schedule.algorithm = Algorithm::kChain;
      planPointToPoint(args, params, &schedule);
      break;
    case CollectiveKind::kBarrier:
      schedule.algorithm = Algorithm::kRing;
      planBarrier(params, &schedule);
      break;
    default:
      COLLIE_RETURN_IF_ERROR(planWithSpec(args, params, chunkElems, &schedule));
      break;
  }
  if (params.teamStep && params.team != 0) {
    schedule.fallback = schedule.algorithm;
    schedule.algorithm = firstTeamAlgorithm(params.team);
  }
  return schedule;
}
}  // namespace

std::string stepKindName(StepKind kind) {
  switch (kind) {
    case StepKind::kSend:
      return "Send";
    case StepKind::kRecv:
      return "Recv";
    case StepKind::kSendRecv:
      return "SendRecv";
    case StepKind::kRecvReduceSend:
      return "RecvReduceSend";
    case StepKind::kRecvReduceCopy:
      return "RecvReduceCopy";
    case StepKind::kRecvCopySend:
      return "RecvCopySend";
    case StepKind::kCopy:
      return "Copy";
    case StepKind::kTeam:
      return "Team";
  }
  return "?";
}

namespace {
const char* bufferName(BufferId id) {
  switch (id) {
    case BufferId::kInput:
      return "input";
    case BufferId::kOutput:
      return "output";
    case BufferId::kScratch:
      return "scratch";
  }
  return "?";
}
}  // namespace

std::string scheduleToJson(const Schedule& schedule) {
  nlohmann::json doc;
  doc["collective"] = std::string(collectiveName(schedule.args.kind));
  doc["algorithm"] = std::string(algorithmName(schedule.algorithm));
  doc["rank"] = schedule.rank;
  doc["nranks"] = schedule.nranks;
  doc["count"] = schedule.args.count;
  doc["dtype"] = std::string(dataTypeName(schedule.args.dtype));
  doc["op"] = std::string(reduceOpName(schedule.args.op));
  if (isRooted(schedule.args.kind)) doc["root"] = schedule.args.root;
  if (isPointToPoint(schedule.args.kind)) doc["peer"] = schedule.args.peer;
  if (schedule.fallback != Algorithm::kAuto) {
    doc["fallback"] = std::string(algorithmName(schedule.fallback));
  }
  doc["scratchBytesPerChannel"] = schedule.scratchBytesPerChannel;
  nlohmann::json channels = nlohmann::json::array();
  for (const auto& steps : schedule.channels) {
    nlohmann::json list = nlohmann::json::array();
    for (const Step& s : steps) {
      if (s.kind == StepKind::kTeam) {
        list.push_back({{"kind", stepKindName(s.kind)}, {"team", teamAlgorithmsText(s.team)}});
        continue;
      }
      list.push_back({{"kind", stepKindName(s.kind)},
                      {"sendPeer", s.sendPeer},
                      {"recvPeer", s.recvPeer},
                      {"src", {bufferName(s.src.buffer), s.src.offset}},
                      {"dst", {bufferName(s.dst.buffer), s.dst.offset}},
                      {"bytes", s.bytes},
                      {"divisor", s.divisor},
                      {"incomingFirst", s.incomingFirst}});
    }
    channels.push_back(std::move(list));
  }
  doc["channels"] = std::move(channels);
  return doc.dump(1);
}

}  // namespace collie
