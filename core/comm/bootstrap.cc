// Communicator creation: find the store, agree on a key for this communicator,
// exchange host identities, choose a transport per peer from the registry and
// connect, then start the engine.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "collie/communicator.h"
#include "core/bootstrap/job_secret.h"
#include "core/comm/join_agreement.h"
#include "core/config/config.h"
#include "core/device/device_comm.h"
#include "core/device/device_staging.h"
#include "core/engine/engine.h"
#include "core/log/log.h"
#include "core/transport/device_windows.h"
#include "core/transport/transport.h"
#include "core/tune/tune_probe.h"

namespace collie {
namespace {

std::string readFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Ranks with equal ids share memory and /dev/shm. A network namespace counts as a
// host of its own so that namespace "hosts" talk over their network.
std::string defaultHostId() {
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  char netns[128] = {0};
  ssize_t length = readlink("/proc/self/ns/net", netns, sizeof(netns) - 1);
  if (length < 0) netns[0] = 0;
  return std::string(name) + "/" + readFirstLine("/proc/sys/kernel/random/boot_id") + "/" + netns;
}

// Each communicator made from one unique id gets its own key prefix; ranks create
// communicators from the same id in the same order, so they agree on the index.
std::string communicatorKey(const UniqueId& id, int rank) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, int>, int> created;
  std::lock_guard<std::mutex> lock(mutex);
  int index = created[{id.toString(), rank}]++;
  return "collie/" + publicJobTag(id.secret) + "/" + std::to_string(index);
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::create(const UniqueId& id, int rank, int nranks,
                                                           const Options& options) {
  if (nranks < 1)
    return invalidArgument("nranks must be at least 1, got " + std::to_string(nranks));
  if (rank < 0 || rank >= nranks) {
    return invalidArgument("rank " + std::to_string(rank) + " is outside [0, " +
                           std::to_string(nranks) + ")");
  }
  // Never fail open: a knob with a value collie does not accept refuses the start.
  COLLIE_RETURN_IF_ERROR(validateConfig());
  COLLIE_RETURN_IF_ERROR(
      checkJobSecret(id.secret, "the unique id of rank " + std::to_string(rank)));
  setLogRank(rank);
  EngineConfig config;
  config.rank = rank;
  config.nranks = nranks;
  config.timeout = options.timeout.count() > 0
                       ? std::chrono::duration_cast<std::chrono::microseconds>(options.timeout)
                       : configDuration("COLLIE_TIMEOUT");
  config.busyPoll = configDuration("COLLIE_BUSY_POLL");
  config.reduceOnReceive = configInt("COLLIE_RECV_REDUCE") != 0;
  config.traceDepth = static_cast<size_t>(std::max<int64_t>(0, configInt("COLLIE_TRACE_DEPTH")));
  config.traceDump = configString("COLLIE_TRACE_DUMP");
  config.nchannels =
      options.nchannels > 0 ? options.nchannels : static_cast<int>(configInt("COLLIE_NCHANNELS"));
  config.nchannels = std::max(1, std::min(config.nchannels, 16));
  config.channelsFixed = options.nchannels > 0 || configSource("COLLIE_NCHANNELS") != "default";
  // Chunk size: fixed when the caller or COLLIE_CHUNKSIZE sets it, else tuned (0).
  config.chunkBytes = options.chunkBytes > 0 ? options.chunkBytes
                      : configSource("COLLIE_CHUNKSIZE") != "default"
                          ? static_cast<size_t>(configInt("COLLIE_CHUNKSIZE"))
                          : 0;
  if (config.chunkBytes > 0) config.chunkBytes = std::max<size_t>(config.chunkBytes, 64);
  config.algorithm = options.algorithm;
  if (config.algorithm == Algorithm::kAuto) {
    std::string name = configString("COLLIE_ALGO");
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    // An NCCL_ALGO collie does not know (^nvls, allreduce:tree, ...) reads as the
    // default (validateConfig warned about it).
    std::optional<Algorithm> parsed = parseAlgorithm(name);
    if (!parsed) {
      return invalidArgument("COLLIE_ALGO='" + configString("COLLIE_ALGO") +
                             "' is not one of auto, ring, tree, chain, oneshot");
    }
    config.algorithm = *parsed;
  }
  const auto deadline = Clock::now() + config.timeout;

  std::shared_ptr<Store> store = options.store;
  if (!store) {
    Result<std::shared_ptr<Store>> connected =
        connectTcpStore(id.host, id.port, id.secret, deadline);
    if (!connected.isOk()) {
      return connected.status().withContext("rank " + std::to_string(rank) +
                                            " could not reach the rendezvous store");
    }
    store = *connected;
  }

  TransportContext context;
  context.rank = rank;
  context.nranks = nranks;
  context.nchannels = config.nchannels;
  context.hostId = !options.hostId.empty()                   ? options.hostId
                   : !configString("COLLIE_HOST_ID").empty() ? configString("COLLIE_HOST_ID")
                                                             : defaultHostId();
  context.jobKey = communicatorKey(id, rank);
  context.secret = id.secret;
  context.store = store;
  context.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(config.timeout);

  // Every rank's host, and agreement on what must be equal (core/comm/join_agreement.h).
  const std::string forcedTransport =
      !options.transport.empty() ? options.transport : configString("COLLIE_TRANSPORT");
  JoinRecord joining;
  joining.hostId = context.hostId;
  joining.mustMatch = mustMatchSettings(
      nranks, {{"transport (COLLIE_TRANSPORT)", forcedTransport},
               {"algorithm (COLLIE_ALGO)", std::string(algorithmName(config.algorithm))},
               {"channels (COLLIE_NCHANNELS)",
                std::to_string(config.nchannels) + (config.channelsFixed ? " (fixed)" : "")},
               {"chunk bytes (COLLIE_CHUNKSIZE)", std::to_string(config.chunkBytes)}});
  JoinContext join;
  join.store = store.get();
  join.jobKey = context.jobKey;
  join.launcherExits = launcherExitPrefix(publicJobTag(id.secret));
  join.rank = rank;
  join.nranks = nranks;
  Result<std::vector<std::string>> joined = exchangeJoinRecords(join, joining, deadline);
  if (!joined.isOk()) return joined.status();
  const std::vector<std::string>& hosts = *joined;

  // Choose a transport per peer: the forced one, or the first in registry order that
  // can connect the pair. The choice depends only on both host ids, so both sides of
  // a pair agree.
  const std::string& forced = forcedTransport;
  std::vector<TransportFactory> factories = TransportRegistry::instance().factories();
  if (!forced.empty()) {
    const TransportFactory* factory = TransportRegistry::instance().find(forced);
    if (factory == nullptr) {
      std::string known;
      for (const TransportFactory& f : factories) known += (known.empty() ? "" : ", ") + f.name;
      return invalidArgument("transport '" + forced + "' is not in this build (built: " + known +
                             ")");
    }
    // Transports that offer device windows are still created, for device buffers only.
    std::vector<TransportFactory> chosen = {*factory};
    for (const TransportFactory& f : factories) {
      if (f.offersDeviceWindows && f.name != factory->name) chosen.push_back(f);
    }
    factories = std::move(chosen);
  }
  context.deviceRuntime = selectDeviceRuntime();
  TransportSet set;
  set.transportOfPeer.assign(nranks, -1);
  set.connections.resize(nranks);
  std::unique_ptr<Transport> windowTransport;  // offers device windows, serves no peer
  DeviceWindowProvider* windowProvider = nullptr;
  for (const TransportFactory& factory : factories) {
    if (nranks == 1 && !factory.offersDeviceWindows) continue;
    TransportContext mine = context;
    mine.forced = !forced.empty() && factory.name == forced;
    Result<std::unique_ptr<Transport>> transport = factory.create(mine);
    if (!transport.isOk()) {
      if (mine.forced) return transport.status().withContext("transport " + factory.name);
      COLLIE_LOG(INFO, INIT) << "transport " << factory.name
                             << " unavailable: " << transport.status().toString();
      continue;
    }
    std::vector<int> peers;
    for (int peer = 0; peer < nranks; ++peer) {
      if (peer != rank && set.transportOfPeer[peer] < 0 &&
          (*transport)->canConnect(peer, hosts[peer])) {
        peers.push_back(peer);
      }
    }
    if (windowProvider == nullptr && (*transport)->deviceWindows() != nullptr &&
        (*transport)->deviceWindows()->available()) {
      windowProvider = (*transport)->deviceWindows();
      if (peers.empty()) windowTransport = std::move(*transport);
    }
    if (peers.empty()) continue;
    Result<std::vector<std::unique_ptr<Connection>>> connections = (*transport)->connect(peers);
    if (!connections.isOk()) {
      return connections.status().withContext("rank " + std::to_string(rank) + " connecting over " +
                                              factory.name);
    }
    int index = static_cast<int>(set.transports.size());
    for (size_t i = 0; i < peers.size(); ++i) {
      set.transportOfPeer[peers[i]] = index;
      for (int c = 0; c < config.nchannels; ++c) {
        set.connections[peers[i]].push_back(std::move((*connections)[i * config.nchannels + c]));
      }
    }
    COLLIE_LOG(INFO, INIT) << "rank " << rank << " uses " << factory.name << " for " << peers.size()
                           << " peer(s)";
    set.transports.push_back(std::move(*transport));
  }
  for (int peer = 0; peer < nranks; ++peer) {
    if (peer != rank && set.transportOfPeer[peer] < 0) {
      return unsupported("rank " + std::to_string(rank) + ": no transport can reach rank " +
                         std::to_string(peer) + " (host '" + hosts[peer] + "')" +
                         (forced.empty() ? "" : " with COLLIE_TRANSPORT=" + forced));
    }
  }
  // Device windows for the device path, opened before the engine's progress thread
  // uses the transports (every rank decides alike: available() depends on what every
  // rank published). Null: device buffers are staged through host memory.
  std::unique_ptr<DeviceWindows> windows;
  if (context.deviceRuntime != nullptr && windowProvider != nullptr) {
    Result<std::unique_ptr<DeviceWindows>> opened =
        windowProvider->open(DeviceComm::windowBytes(nranks), DeviceComm::kWindowLayout, deadline);
    if (!opened.isOk()) return opened.status();
    windows = std::move(*opened);
  }
  windowTransport.reset();  // the windows do not need it
  auto board = std::make_unique<FailureBoard>(store, context.jobKey, rank);
  auto engine = std::make_unique<Engine>(config, std::move(set), std::move(board));
  Result<TuneConstants> tune = agreeOnTuneConstants(*engine, *store, context.jobKey, deadline);
  if (!tune.isOk()) return tune.status().withContext("rank " + std::to_string(rank));
  engine->setTuneConstants(*tune);
  Result<int> channels = agreeOnPlanChannels(*engine, *store, context.jobKey, deadline);
  if (!channels.isOk()) return channels.status().withContext("rank " + std::to_string(rank));
  engine->setPlanChannels(*channels);
  std::unique_ptr<Communicator> comm(new Communicator(rank, nranks, std::move(engine)));
  comm->deviceRuntime_ = context.deviceRuntime;
  if (windows != nullptr) {
    DeviceCommConfig device;
    device.rank = rank;
    device.nranks = nranks;
    device.timeout = config.timeout;
    device.algorithm = config.algorithm;
    Result<std::unique_ptr<DeviceComm>> created =
        DeviceComm::create(comm->deviceRuntime_, device, std::move(windows));
    if (!created.isOk()) return created.status();
    comm->device_ = std::move(*created);
  }
  if (comm->deviceRuntime_ != nullptr && comm->device_ == nullptr) {
    comm->staging_ = std::make_unique<DeviceStaging>(comm->deviceRuntime_, comm->engine_.get(),
                                                     rank, nranks, config.timeout);
  }
  comm->id_ = id;
  comm->store_ = store;
  comm->options_ = options;
  comm->options_.store.reset();  // the store is kept in store_
  return comm;
}

}  // namespace collie
