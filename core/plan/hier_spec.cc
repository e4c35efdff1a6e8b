// Hier (core/plan/hier.h): two-level all-reduce, reduce-scatter, all-gather, broadcast and
// reduce over several hosts of as many ranks, more than one, on each; weighed against
// the flat algorithms with kHierMargin. Its inter-host stage of all-reduce, broadcast
// and reduce is a ring (chain) or a tree: the cheaper, or COLLIE_HIER_HOSTS's.
//
// Cost (L = localSize, M = nhosts, d = ceil(log2 M), S bytes, c channels, k chunk
// bytes; alpha/beta within a host, netAlpha/netBeta of a host's link):
//   all-reduce, R = ceil(S / (c k n)) rounds:
//     2 (L-1) R c alpha + 2 (L-1)/L S / beta                (within hosts, twice)
//     + the cheaper between hosts (a host's L rings or trees share its link):
//       ring  2 (M-1) R c netAlpha + 2 (M-1)/M S / netBeta
//       tree  R c (2d + 1 + 8 (K-1)) netAlpha + 2 S / netBeta, K = ceil(min(S, c k n)
//             / (c L) / 2k) chunks per tree and round
//   all-gather / reduce-scatter (S one block, S' = n S), R = ceil(S / (c ceil(k / M))):
//     R c ((M-1) netAlpha + M (L-1) alpha) + (M-1)/M S' / netBeta + (L-1)/L S' / beta
//   broadcast / reduce, K = ceil(S / (c k)), p = min(k, S):
//     (L-1)(alpha + p / beta) + the cheaper between hosts:
//       chain (M-1)(netAlpha + p / netBeta) + 2 (K c - 1) netAlpha + S / netBeta
//       tree  d (netAlpha + p / netBeta) + 3 (K c - 1) netAlpha + 2 S / netBeta
// On one host it costs what the flat robust default costs (it does not run there).
#include "core/plan/builtin_algorithms.h"
#include "core/plan/chain.h"
#include "core/plan/hier.h"

namespace collie {
namespace {

// Hierarchical schedules need ranks on several hosts, as many, more than one, on each.
Status checkTwoLevel(const CollectiveArgs& args, const PlanParams& params) {
  if (params.nranks <= 1 || (params.hosts && params.hosts->twoLevel())) return Status();
  return unsupported(
      "hier " + std::string(collectiveName(args.kind)) +
      " needs ranks on several hosts with as many, more than one, on each; this communicator "
      "has " +
      (params.hosts ? std::to_string(params.hosts->nhosts) + " hosts" +
                          (params.hosts->localSize == 0
                               ? " with uneven rank counts"
                               : " of " + std::to_string(params.hosts->localSize) + " rank(s)")
                    : std::string("1 host")) +
      "; use ring, tree, chain or auto");
}

constexpr AlgorithmIdentity kHierIdentity = {
    .id = Algorithm::kHier,
    .name = "hier",
    .kinds =
        kindsOf({CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                 CollectiveKind::kAllGather, CollectiveKind::kBroadcast, CollectiveKind::kReduce}),
};

class HierSpec final : public AlgorithmSpec {
 public:
  HierSpec() : AlgorithmSpec(kHierIdentity) {}
  bool runsOn(CollectiveKind kind, const CommShape& shape) const override {
    (void)kind;
    return shape.twoLevel();
  }
  double margin() const override { return kHierMargin; }

  double predict(const CostQuery& q, bool* hostTree) const override {
    if (q.nhosts <= 1) {
      return AlgorithmRegistry::instance().robustDefault(q.kind).predict(q, hostTree);
    }
    const double s = static_cast<double>(q.bytes);
    const double c = q.nchannels;
    const double k = static_cast<double>(std::max<size_t>(q.chunkBytes, 1));
    const double n = q.nranks;
    const double local = std::max(q.localSize, 1);
    const double hosts = std::max(q.nhosts, 1);
    const double alpha = q.constants.alphaUs;
    const double netAlpha = q.net.alphaUs;
    const double beta = bytesPerUs(q.constants);
    const double netBeta = bytesPerUs(q.net);
    const double d = depthOf(q.nhosts);
    bool tree = false;
    double micros = 0;
    switch (q.kind) {
      case CollectiveKind::kAllReduce: {
        const double rounds = ceilDivD(s, c * k * n);
        const double within =
            2 * (local - 1) * rounds * c * alpha + 2 * (local - 1) / local * s / beta;
        const double ring =
            2 * (hosts - 1) * rounds * c * netAlpha + 2 * (hosts - 1) / hosts * s / netBeta;
        const double segment = std::min(s, c * k * n) / (c * local);  // one tree's bytes a round
        const double chunks = ceilDivD(segment, 2 * k);
        const double treeUs =
            rounds * c * (2 * d + 1 + 8 * (chunks - 1)) * netAlpha + 2 * s / netBeta;
        tree = q.stage == HostStage::kAuto ? treeUs < ring : q.stage == HostStage::kTree;
        micros = within + (tree ? treeUs : ring);
        break;
      }
      case CollectiveKind::kAllGather:
      case CollectiveKind::kReduceScatter: {
        const double total = s * n;  // the full vector
        const double rounds = ceilDivD(s, c * ceilDivD(k, hosts));
        micros = rounds * c * ((hosts - 1) * netAlpha + hosts * (local - 1) * alpha) +
                 (hosts - 1) / hosts * total / netBeta + (local - 1) / local * total / beta;
        break;
      }
      default: {  // broadcast, reduce
        const double chunks = ceilDivD(s, c * k);
        const double piece = std::min(k, s);
        const double within = (local - 1) * (alpha + piece / beta);
        const double chain = (hosts - 1) * (netAlpha + piece / netBeta) +
                             2 * (chunks * c - 1) * netAlpha + s / netBeta;
        const double treeUs =
            d * (netAlpha + piece / netBeta) + 3 * (chunks * c - 1) * netAlpha + 2 * s / netBeta;
        tree = q.stage == HostStage::kAuto ? treeUs < chain : q.stage == HostStage::kTree;
        micros = within + (tree ? treeUs : chain);
        break;
      }
    }
    if (hostTree != nullptr) *hostTree = tree;
    return micros;
  }

  Status plan(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
              Schedule* schedule) const override {
    COLLIE_RETURN_IF_ERROR(checkTwoLevel(args, params));
    switch (args.kind) {
      case CollectiveKind::kAllReduce:
        planHierAllReduce(args, params, chunkElems, schedule);
        break;
      case CollectiveKind::kReduceScatter:
        planHierReduceScatter(args, params, chunkElems, schedule);
        break;
      case CollectiveKind::kAllGather:
        planHierAllGather(args, params, chunkElems, schedule);
        break;
      default:  // broadcast, reduce: on one rank, the chain's copy
        if (params.nranks <= 1) {
          schedule->algorithm = Algorithm::kChain;
          (args.kind == CollectiveKind::kBroadcast ? planChainBroadcast : planChainReduce)(
              args, params, chunkElems, schedule);
        } else {
          (args.kind == CollectiveKind::kBroadcast ? planHierBroadcast : planHierReduce)(
              args, params, chunkElems, schedule);
        }
        break;
    }
    return Status();
  }

  bool streams(const CollectiveArgs& args, const PlanParams& params) const override {
    return args.kind == CollectiveKind::kAllReduce && params.hosts && params.hosts->twoLevel();
  }
  Generator<Step> stream(const CollectiveArgs& args, const PlanParams& params, size_t chunkElems,
                         int channel) const override {
    return hierAllReduceSteps(args, params, chunkElems, channel);
  }
};

}  // namespace

std::unique_ptr<const AlgorithmSpec> makeHierSpec() { return std::make_unique<HierSpec>(); }

}  // namespace collie
