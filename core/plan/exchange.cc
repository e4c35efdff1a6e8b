// Exchange schedules: all-to-all (pairwise, linear), all-to-all with a count per peer,
// gather and scatter. See exchange.h for the algorithms.
//
// Steps of rank r (n ranks; each block split over the channels, one message per
// channel, a 0-byte message on channel 0 when the block is empty):
//   all-to-all pairwise  Copy own block; for k = 1..n-1: Send to r+k, Recv from r-k
//   all-to-all linear    Copy own block; Send to r+1 .. r+n-1; Recv from r-1 .. r-n+1
//   gather, root         [agreement]; Copy own block; Recv from root+1 .. root+n-1
//   gather, other        [agreement]; Send to root
//   scatter, root        Copy own block; Send to root+1 .. root+n-1; [agreement]
//   scatter, other       Recv from root; [agreement]
#include "core/plan/exchange.h"

#include <algorithm>
#include <string>

#include "core/plan/partition.h"
#include "core/plan/point_to_point.h"

namespace collie {
namespace {

// One block of the input or the output of one peer: where it starts and how many
// elements it has.
struct Block {
  size_t offset = 0;  // elements
  size_t count = 0;
};

class ExchangePlan {
 public:
  ExchangePlan(const CollectiveArgs& args, const PlanParams& params, Schedule* schedule)
      : args_(args), params_(params), schedule_(schedule), es_(dataTypeSize(args.dtype)) {}

  // Block of the input sent to `peer` / of the output received from `peer`.
  Block sendBlock(int peer) const {
    if (args_.layout) return {args_.layout->sendOffsets[peer], args_.layout->sendCounts[peer]};
    if (args_.kind == CollectiveKind::kGather) return {0, args_.count};
    return {static_cast<size_t>(peer) * args_.count, args_.count};
  }
  Block recvBlock(int peer) const {
    if (args_.layout) return {args_.layout->recvOffsets[peer], args_.layout->recvCounts[peer]};
    if (args_.kind == CollectiveKind::kScatter) return {0, args_.count};
    return {static_cast<size_t>(peer) * args_.count, args_.count};
  }

  void copyOwn() {
    const Block from = sendBlock(params_.rank);
    const Block to = recvBlock(params_.rank);
    const size_t count = std::min(from.count, to.count);
    for (int c = 0; c < params_.nchannels; ++c) {
      const Range part = splitEven(0, count, params_.nchannels, c);
      if (part.count == 0) continue;
      schedule_->channels[c].push_back(makeStep(
          StepKind::kCopy, -1, -1, Slice{BufferId::kInput, (from.offset + part.begin) * es_},
          Slice{BufferId::kOutput, (to.offset + part.begin) * es_}, part.count * es_));
    }
  }

  void send(int peer) {
    const Block block = sendBlock(peer);
    for (int c = 0; c < params_.nchannels; ++c) {
      const Range part = splitEven(0, block.count, params_.nchannels, c);
      if (part.count == 0 && c > 0) continue;
      schedule_->channels[c].push_back(makeStep(
          StepKind::kSend, peer, -1, Slice{BufferId::kInput, (block.offset + part.begin) * es_},
          Slice{}, part.count * es_));
    }
  }

  void recv(int peer) {
    const Block block = recvBlock(peer);
    for (int c = 0; c < params_.nchannels; ++c) {
      const Range part = splitEven(0, block.count, params_.nchannels, c);
      if (part.count == 0 && c > 0) continue;
      schedule_->channels[c].push_back(
          makeStep(StepKind::kRecv, -1, peer, Slice{},
                   Slice{BufferId::kOutput, (block.offset + part.begin) * es_}, part.count * es_));
    }
  }

  void allToAll(Algorithm algorithm) {
    const int n = params_.nranks, r = params_.rank;
    copyOwn();
    if (algorithm == Algorithm::kPairwise) {
      for (int k = 1; k < n; ++k) {
        send(mod(r + k, n));
        recv(mod(r - k, n));
      }
      return;
    }
    for (int k = 1; k < n; ++k) send(mod(r + k, n));
    for (int k = 1; k < n; ++k) recv(mod(r - k, n));
  }

  void gather() {
    const int n = params_.nranks, root = args_.root;
    agree();
    if (params_.rank != root) {
      send(root);
      return;
    }
    copyOwn();
    for (int k = 1; k < n; ++k) recv(mod(root + k, n));
  }

  void scatter() {
    const int n = params_.nranks, root = args_.root;
    if (params_.rank != root) {
      recv(root);
    } else {
      copyOwn();
      for (int k = 1; k < n; ++k) send(mod(root + k, n));
    }
    agree();
  }

 private:
  void agree() {
    if (params_.agreeOnRoot && params_.nranks > 1) planBarrier(params_, schedule_);
  }

  const CollectiveArgs& args_;
  const PlanParams& params_;
  Schedule* schedule_;
  const size_t es_;
};

Status checkLayout(const CollectiveArgs& args, int nranks) {
  if (args.layout == nullptr) {
    return invalidArgument("alltoallv needs a layout (counts and offsets per peer)");
  }
  const ExchangeLayout& l = *args.layout;
  const size_t n = static_cast<size_t>(nranks);
  if (l.sendCounts.size() != n || l.sendOffsets.size() != n || l.recvCounts.size() != n ||
      l.recvOffsets.size() != n) {
    return invalidArgument("alltoallv layout needs " + std::to_string(nranks) +
                           " send and receive counts and offsets");
  }
  return Status();
}

}  // namespace

Algorithm exchangeAlgorithm(CollectiveKind kind, Algorithm requested) {
  const bool allToAll = kind == CollectiveKind::kAllToAll || kind == CollectiveKind::kAllToAllV;
  if (requested == Algorithm::kAuto) return allToAll ? Algorithm::kPairwise : Algorithm::kLinear;
  if (requested == Algorithm::kLinear) return requested;
  if (requested == Algorithm::kPairwise && allToAll) return requested;
  return Algorithm::kAuto;
}

Status planExchange(const CollectiveArgs& args, const PlanParams& params, Schedule* schedule) {
  const Algorithm algorithm = exchangeAlgorithm(args.kind, params.algorithm);
  if (algorithm == Algorithm::kAuto) {
    const bool allToAll =
        args.kind == CollectiveKind::kAllToAll || args.kind == CollectiveKind::kAllToAllV;
    return unsupported(std::string(algorithmName(params.algorithm)) + " " +
                       std::string(collectiveName(args.kind)) + " is not implemented; use " +
                       (allToAll ? "pairwise, linear or auto" : "linear or auto"));
  }
  if (args.kind == CollectiveKind::kAllToAllV) {
    COLLIE_RETURN_IF_ERROR(checkLayout(args, params.nranks));
    const size_t mine = params.rank;
    if (args.layout->sendCounts[mine] != args.layout->recvCounts[mine]) {
      return invalidArgument("alltoallv on rank " + std::to_string(params.rank) + " sends " +
                             std::to_string(args.layout->sendCounts[mine]) +
                             " elements to itself but receives " +
                             std::to_string(args.layout->recvCounts[mine]));
    }
  } else if (args.layout != nullptr) {
    return invalidArgument(std::string(collectiveName(args.kind)) + " takes no layout");
  }
  if (isRooted(args.kind) && (args.root < 0 || args.root >= params.nranks)) {
    return invalidArgument("root " + std::to_string(args.root) + " is outside [0, " +
                           std::to_string(params.nranks) + ")");
  }
  schedule->algorithm = algorithm;
  ExchangePlan plan(args, params, schedule);
  switch (args.kind) {
    case CollectiveKind::kGather:
      plan.gather();
      break;
    case CollectiveKind::kScatter:
      plan.scatter();
      break;
    default:
      plan.allToAll(algorithm);
      break;
  }
  return Status();
}

Status planExchangeAs(Algorithm algorithm, const CollectiveArgs& args, const PlanParams& params,
                      Schedule* schedule) {
  PlanParams as = params;
  as.algorithm = algorithm;
  return planExchange(args, as, schedule);
}

size_t inPlaceExchangeBytes(const CollectiveArgs& args, int nranks) {
  if (args.kind == CollectiveKind::kAllToAll) {
    return args.count * dataTypeSize(args.dtype) * static_cast<size_t>(nranks);
  }
  if (args.kind != CollectiveKind::kAllToAllV || args.layout == nullptr) return 0;
  size_t end = 0;
  for (size_t p = 0; p < args.layout->sendCounts.size(); ++p) {
    if (args.layout->sendCounts[p] == 0) continue;
    end = std::max(end, args.layout->sendOffsets[p] + args.layout->sendCounts[p]);
  }
  return end * dataTypeSize(args.dtype);
}

}  // namespace collie
