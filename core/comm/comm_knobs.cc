// The knobs of a communicator as a whole (core/comm/communicator_create.cc), and the variables a
// launcher hands its ranks (core/comm/launcher_environment.cc, `collie run`).
#include "core/comm/comm_knobs.h"

#include <algorithm>
#include <cctype>

#include "core/config/knob_reader.h"
#include "core/config/knob_registry.h"

namespace collie {

void registerCommunicatorKnobs(KnobRegistry& registry) {
  using namespace knobs;  // NOLINT(build/namespaces)
  (void)registry.add(KnobTable{
      "communicator",
      "a communicator's deadline, transport, algorithm, channels and chunks; the typed "
      "Options fields override these",
      {
          duration("COLLIE_TIMEOUT", "300s", kKnobMs, 365 * kKnobDay,
                   "deadline of every blocking wait (connect, store, send, recv, collective); "
                   "a wait that sees no progress for this long fails naming the silent peer"),
          text("COLLIE_TRANSPORT", "",
               "force one transport for every pair of ranks (one of the transports `collie "
               "info` lists); empty picks per pair, the first in that list that can connect it"),
          choice("COLLIE_ALGO", "auto",
                 "auto,ring,tree,chain,oneshot,board,direct,cma,pairwise,linear,hier",
                 "collective algorithm: auto (the tuner), ring, tree, chain, oneshot, or a team "
                 "collective of shm with every rank on one host: board, direct (registered "
                 "buffers), cma (cross-memory attach); for all-to-all pairwise or linear (and "
                 "linear for gather, scatter); hier (two levels over several hosts of as "
                 "many ranks: all-reduce, reduce-scatter, all-gather, broadcast, reduce); "
                 "collectives that lack the forced one take auto's",
                 "NCCL_ALGO"),
          everyRankAlike(choice(
              "COLLIE_HIER_HOSTS", "auto", "auto,ring,tree",
              "the inter-host stage of hier (core/plan/hier.h): auto (the tuner's cost "
              "model), ring (a ring for all-reduce, a chain for broadcast and reduce) or tree "
              "(double binary tree, binary tree); all-gather and reduce-scatter use a ring")),
          integer("COLLIE_NCHANNELS", "2", 1, 16,
                  "parallel channels (connections and pipelines) per peer; unset, a transport "
                  "may cap the planned count (ucx without an RDMA wire: 1)",
                  "NCCL_MIN_NCHANNELS"),
          integer("COLLIE_CHUNKSIZE", "512K", 64, kKnobGiB,
                  "bytes per pipelined chunk of a collective (unset: the tuner picks)"),
          text("COLLIE_HOST_ID", "",
               "override this rank's host identity (ranks with equal ids use shm between them)"),
      },
      [](const Config& config) { return CommunicatorKnobs::parse(config).status(); }});
}

void registerLaunchKnobs(KnobRegistry& registry) {
  using namespace knobs;  // NOLINT(build/namespaces)
  (void)registry.add(KnobTable{
      "launch",
      "how this process was started: set by `collie run` or by the user for other launchers "
      "(read from the environment only)",
      {
          processWide(Knob{"COLLIE_UNIQUE_ID", "",
                           "the job's unique id (set by collie run; holds the secret)", nullptr,
                           KnobKind::kHiddenText}),
          processWide(Knob{"COLLIE_JOB_SECRET", "",
                           "32 hex digits: the job secret for ranks started by other launchers",
                           nullptr, KnobKind::kSecret}),
          processWide(
              integer("COLLIE_RANK", "", 0, 1 << 24, "this process's rank (set by collie run)")),
          processWide(
              integer("COLLIE_WORLD_SIZE", "", 1, 1 << 24, "number of ranks (set by collie run)")),
          processWide(integer("COLLIE_LOCAL_RANK", "", 0, 1 << 24,
                              "rank among the ranks of this host (set by collie run)")),
          processWide(integer("COLLIE_NODE_RANK", "0", 0, 1 << 24,
                              "this host's launcher among the hosts of a job (collie run "
                              "--node-rank; set by collie run)")),
          processWide(text("COLLIE_MASTER_ADDR", "",
                           "host:port of the rendezvous store for ranks started by mpirun on "
                           "several hosts")),
          processWide(choice("COLLIE_KEEP_GOING", "0", "0,1",
                             "1 when `collie run --keep-going` started this rank: a rank's "
                             "death does not end the others (set by collie run)")),
          processWide(text("COLLIE_TMPDIR", "/tmp",
                           "directory of the rendezvous files of single-host jobs started by "
                           "mpirun or srun, and of torch_collie under `collie run`")),
      },
      [](const Config& config) { return LaunchKnobs::parse(config).status(); }});
}

namespace {

std::optional<int> optionalInteger(KnobReader& read, const char* name) {
  if (!read.isSet(name)) return std::nullopt;
  return static_cast<int>(read.integer(name));
}

}  // namespace

std::optional<LauncherScope> LaunchKnobs::launcherScope() const {
  if (uniqueId.empty()) return std::nullopt;
  // A unique id that does not parse names nothing: the communicator it launched fails on
  // it (core/comm/launcher_environment.cc).
  Result<UniqueId> launched = UniqueId::parse(uniqueId);
  if (!launched.isOk()) return std::nullopt;
  return LauncherScope{launched->secret, nodeRank};
}

Result<CommunicatorKnobs> CommunicatorKnobs::parse(const Config& config) {
  KnobReader read(config);
  CommunicatorKnobs knobs;
  knobs.timeout = read.duration("COLLIE_TIMEOUT");
  knobs.transport = read.text("COLLIE_TRANSPORT");
  const std::string algorithm = read.text("COLLIE_ALGO");
  std::string lower = algorithm;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // An NCCL_ALGO collie does not know (^nvls, allreduce:tree, ...) reads as the default
  // (validation warned about it).
  std::optional<Algorithm> parsed = parseAlgorithm(lower);
  if (!parsed) {
    return invalidArgument("COLLIE_ALGO='" + algorithm + "' is not one of " + algorithmNames());
  }
  knobs.algorithm = *parsed;
  const std::string stage = read.text("COLLIE_HIER_HOSTS");
  knobs.hostStage = stage == "ring"   ? HostStage::kRing
                    : stage == "tree" ? HostStage::kTree
                                      : HostStage::kAuto;
  knobs.nchannels = static_cast<int>(std::clamp<int64_t>(read.integer("COLLIE_NCHANNELS"), 1, 16));
  knobs.channelsFixed = read.isSet("COLLIE_NCHANNELS");
  knobs.chunkBytes =
      read.isSet("COLLIE_CHUNKSIZE")
          ? static_cast<size_t>(std::max<int64_t>(64, read.integer("COLLIE_CHUNKSIZE")))
          : 0;
  knobs.hostId = read.text("COLLIE_HOST_ID");
  return read.finish(knobs);
}

Result<LaunchKnobs> LaunchKnobs::parse(const Config& config) {
  KnobReader read(config);
  LaunchKnobs knobs;
  knobs.uniqueId = read.text("COLLIE_UNIQUE_ID");
  knobs.jobSecret = read.text("COLLIE_JOB_SECRET");
  knobs.rank = optionalInteger(read, "COLLIE_RANK");
  knobs.worldSize = optionalInteger(read, "COLLIE_WORLD_SIZE");
  knobs.localRank = optionalInteger(read, "COLLIE_LOCAL_RANK");
  knobs.nodeRank = static_cast<int>(read.integer("COLLIE_NODE_RANK"));
  knobs.masterAddr = read.text("COLLIE_MASTER_ADDR");
  knobs.keepGoing = read.integer("COLLIE_KEEP_GOING") == 1;
  knobs.tmpdir = read.text("COLLIE_TMPDIR");
  return read.finish(knobs);
}

}  // namespace collie
