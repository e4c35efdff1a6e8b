// Communicator::create, as a few named steps: resolve the configuration (one snapshot,
// core/comm/options_config.h, carried to every component from here on), reach the
// store, exchange host ids (and agree on what must match, core/comm/join_agreement.h),
// connect a transport per peer from the registry, start the engine, open the device
// path. Every step fails with a Status naming this rank and what went wrong.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "collie/communicator.h"
#include "core/comm/comm_knobs.h"
#include "core/comm/communicator_impl.h"
#include "core/comm/join_agreement.h"
#include "core/comm/options_config.h"
#include "core/config/config.h"
#include "core/config/knob_reader.h"
#include "core/device/device_knobs.h"
#include "core/engine/engine_knobs.h"
#include "core/engine/tune_probe.h"
#include "core/kernel/device_memory.h"
#include "core/log/log.h"
#include "core/net/job_secret.h"
#include "core/transport/device_windows.h"
#include "core/transport/transport.h"
#include "core/transport/wait_policy.h"
#include "core/tune/tune_knobs.h"

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

Status checkArguments(const UniqueId& id, int rank, int nranks) {
  if (nranks < 1)
    return invalidArgument("nranks must be at least 1, got " + std::to_string(nranks));
  if (rank < 0 || rank >= nranks) {
    return invalidArgument("rank " + std::to_string(rank) + " is outside [0, " +
                           std::to_string(nranks) + ")");
  }
  return checkJobSecret(id.secret, "the unique id of rank " + std::to_string(rank));
}

// The core tables of a communicator's snapshot, parsed once at its creation: a name a
// parse reads that no table declares fails the creation here, before anything connects.
// (The transports parse their own tables when they are created.)
struct CoreKnobs {
  CommunicatorKnobs communicator;
  LaunchKnobs launch;
  EngineKnobs engine;
  WaitKnobs wait;
  TuneKnobs tune;
  DeviceKnobs device;
};

Result<CoreKnobs> parseCoreKnobs(const Config& settings) {
  // Every table's, those of components this communicator will not create included.
  COLLIE_RETURN_IF_ERROR(parseEveryKnobTable(settings));
  CoreKnobs knobs;
  Result<CommunicatorKnobs> communicator = CommunicatorKnobs::parse(settings);
  if (!communicator.isOk()) return communicator.status();
  knobs.communicator = *communicator;
  Result<LaunchKnobs> launch = LaunchKnobs::parse(settings);
  if (!launch.isOk()) return launch.status();
  knobs.launch = *launch;
  Result<EngineKnobs> engine = EngineKnobs::parse(settings);
  if (!engine.isOk()) return engine.status();
  knobs.engine = *engine;
  Result<WaitKnobs> wait = WaitKnobs::parse(settings);
  if (!wait.isOk()) return wait.status();
  knobs.wait = *wait;
  Result<TuneKnobs> tune = TuneKnobs::parse(settings);
  if (!tune.isOk()) return tune.status();
  knobs.tune = *tune;
  Result<DeviceKnobs> device = DeviceKnobs::parse(settings);
  if (!device.isOk()) return device.status();
  knobs.device = *device;
  return knobs;
}

// The engine's settings, from the communicator's parsed knobs.
EngineConfig resolveConfig(int rank, int nranks, const CoreKnobs& knobs) {
  EngineConfig config;
  config.rank = rank;
  config.nranks = nranks;
  config.timeout = knobs.communicator.timeout;
  // On one host until the topology says otherwise (Impl::create adapts it).
  config.wait = waitPolicyFor(knobs.engine.busyPoll, 1, cpusAvailable(knobs.wait));
  config.reduceOnReceive = knobs.engine.reduceOnReceive;
  config.adaptMaxBytes = knobs.engine.adaptMaxBytes;
  config.rootAgreement = knobs.engine.rootAgreement;
  config.traceDepth = knobs.engine.traceDepth;
  config.traceDump = knobs.engine.traceDump;
  config.nchannels = knobs.communicator.nchannels;
  config.channelsFixed = knobs.communicator.channelsFixed;
  // Chunk size: fixed when Options or COLLIE_CHUNKSIZE set it, else tuned (0).
  config.chunkBytes = knobs.communicator.chunkBytes;
  config.algorithm = knobs.communicator.algorithm;
  config.hostStage = knobs.communicator.hostStage;
  config.tune = knobs.tune;
  return config;
}

// The caller's store (ranks as threads), else the TCP store the unique id names.
Result<std::shared_ptr<Store>> reachStore(const UniqueId& id, int rank,
                                          std::shared_ptr<Store> given, Deadline deadline) {
  if (given) return given;
  Result<std::shared_ptr<Store>> connected = connectTcpStore(id.host, id.port, id.secret, deadline);
  if (!connected.isOk()) {
    return connected.status().withContext("rank " + std::to_string(rank) +
                                          " could not reach the rendezvous store");
  }
  return connected;
}

TransportContext makeTransportContext(const UniqueId& id, const EngineConfig& config,
                                      const CoreKnobs& knobs, const Config& settings,
                                      std::shared_ptr<Store> store, DeviceRuntime* deviceRuntime) {
  TransportContext context;
  context.rank = config.rank;
  context.nranks = config.nranks;
  context.nchannels = config.nchannels;
  const std::string& hostId = knobs.communicator.hostId;
  context.hostId = !hostId.empty() ? hostId : defaultHostId();
  context.jobKey = communicatorKey(id, config.rank);
  context.secret = id.secret;
  context.store = std::move(store);
  context.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(config.timeout);
  context.deviceRuntime = deviceRuntime;
  context.launcher = knobs.launch.launcherScope();
  context.config = settings;
  return context;
}

// Every rank's host id, once every rank agreed on what must be equal
// (core/comm/join_agreement.h).
Result<std::vector<std::string>> exchangeHostIds(const TransportContext& context,
                                                 const EngineConfig& config,
                                                 const std::string& forced, const UniqueId& id,
                                                 Deadline deadline) {
  JoinRecord joining;
  joining.hostId = context.hostId;
  joining.mustMatch = mustMatchSettings(
      context.nranks,
      {{"transport (COLLIE_TRANSPORT)", forced},
       {"algorithm (COLLIE_ALGO)", std::string(algorithmName(config.algorithm))},
       {"channels (COLLIE_NCHANNELS)",
        std::to_string(config.nchannels) + (config.channelsFixed ? " (fixed)" : "")},
       {"chunk bytes (COLLIE_CHUNKSIZE)", std::to_string(config.chunkBytes)}},
      context.config);
  JoinContext join;
  join.store = context.store.get();
  join.jobKey = context.jobKey;
  join.launcherExits = launcherExitPrefix(publicJobTag(id.secret));
  join.rank = context.rank;
  join.nranks = context.nranks;
  return exchangeJoinRecords(join, joining, deadline);
}

// The transports to try, in registry order: every one, or the forced one plus those
// that offer device windows (created for device buffers only).
Result<std::vector<TransportFactory>> candidateTransports(const std::string& forced) {
  std::vector<TransportFactory> factories = TransportRegistry::instance().factories();
  if (forced.empty()) return factories;
  const TransportFactory* factory = TransportRegistry::instance().find(forced);
  if (factory == nullptr) {
    std::string known;
    for (const TransportFactory& f : factories) known += (known.empty() ? "" : ", ") + f.name;
    return invalidArgument("transport '" + forced + "' is not in this build (built: " + known +
                           ")");
  }
  std::vector<TransportFactory> chosen = {*factory};
  for (const TransportFactory& f : factories) {
    if (f.offersDeviceWindows && f.name != factory->name) chosen.push_back(f);
  }
  return chosen;
}

// What connectTransports() made: the transports serving peers, and the first that
// offers device windows (kept in windowTransport when it serves no peer).
struct Connected {
  TransportSet set;
  DeviceWindowProvider* windowProvider = nullptr;
  std::unique_ptr<Transport> windowTransport;
};

// Connects `transport` to `peers` and records it in `set` as the transport serving them.
Status adoptTransport(const TransportContext& context, const std::string& name,
                      std::unique_ptr<Transport> transport, const std::vector<int>& peers,
                      TransportSet* set) {
  Result<std::vector<std::unique_ptr<Connection>>> connections = transport->connect(peers);
  if (!connections.isOk()) {
    return connections.status().withContext("rank " + std::to_string(context.rank) +
                                            " connecting over " + name);
  }
  const int index = static_cast<int>(set->transports.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    set->transportOfPeer[peers[i]] = index;
    for (int c = 0; c < context.nchannels; ++c) {
      set->connections[peers[i]].push_back(std::move((*connections)[i * context.nchannels + c]));
    }
  }
  COLLIE_LOG(INFO, INIT) << "rank " << context.rank << " uses " << name << " for " << peers.size()
                         << " peer(s)";
  set->transports.push_back(std::move(transport));
  return Status();
}

// Chooses a transport per peer: the forced one, or the first in registry order that
// can connect the pair. The choice depends only on both host ids, so both sides of a
// pair agree. Fails when a transport cannot connect or no transport reaches a peer.
Result<Connected> connectTransports(const TransportContext& context,
                                    const std::vector<std::string>& hosts,
                                    const std::string& forced) {
  Result<std::vector<TransportFactory>> factories = candidateTransports(forced);
  if (!factories.isOk()) return factories.status();
  const int rank = context.rank, nranks = context.nranks;
  Connected out;
  out.set.transportOfPeer.assign(nranks, -1);
  out.set.connections.resize(nranks);
  for (const TransportFactory& factory : *factories) {
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
      if (peer != rank && out.set.transportOfPeer[peer] < 0 &&
          (*transport)->canConnect(peer, hosts[peer])) {
        peers.push_back(peer);
      }
    }
    DeviceWindowProvider* windows = (*transport)->deviceWindows();
    if (out.windowProvider == nullptr && windows != nullptr && windows->available()) {
      out.windowProvider = windows;
      if (peers.empty()) out.windowTransport = std::move(*transport);
    }
    if (peers.empty()) continue;
    COLLIE_RETURN_IF_ERROR(
        adoptTransport(context, factory.name, std::move(*transport), peers, &out.set));
  }
  for (int peer = 0; peer < nranks; ++peer) {
    if (peer != rank && out.set.transportOfPeer[peer] < 0) {
      return unsupported("rank " + std::to_string(rank) + ": no transport can reach rank " +
                         std::to_string(peer) + " (host '" + hosts[peer] + "')" +
                         (forced.empty() ? "" : " with COLLIE_TRANSPORT=" + forced));
    }
  }
  return out;
}

// The topology of this communicator: every rank's host (from the host ids) and the
// transport serving each peer of this rank.
Topology makeTopology(int rank, const std::vector<std::string>& hosts, const TransportSet& set) {
  std::vector<std::string> transportOfPeer(hosts.size());
  for (size_t peer = 0; peer < hosts.size(); ++peer) {
    const int index = set.transportOfPeer[peer];
    transportOfPeer[peer] = static_cast<int>(peer) == rank ? "self"
                            : index >= 0                   ? set.transports[index]->name()
                                                           : "";
  }
  return Topology::make(rank, hosts, std::move(transportOfPeer));
}

// Device windows for the device path, opened before the engine's progress thread uses
// the transports (every rank decides alike: available() depends on what every rank
// published). Null: device buffers are staged through host memory (or unsupported).
Result<std::unique_ptr<DeviceWindows>> openDeviceWindows(const TransportContext& context,
                                                         DeviceWindowProvider* provider,
                                                         const DeviceKnobs& knobs,
                                                         Deadline deadline) {
  if (context.deviceRuntime == nullptr || provider == nullptr) {
    return std::unique_ptr<DeviceWindows>();
  }
  return provider->open(DeviceComm::windowBytes(context.nranks, knobs.slotBytes, knobs.boardBytes,
                                                knobs.ringSliceBytes),
                        DeviceComm::kWindowLayout, deadline);
}

// Starts the engine over the connected transports, then agrees with every rank on the
// tuner's constants and the channels a schedule may use.
Result<std::unique_ptr<Engine>> startEngine(const EngineConfig& config, TransportSet set,
                                            const TransportContext& context, Deadline deadline) {
  auto reasons = std::make_unique<FailureReasons>(context.store, context.jobKey, config.rank);
  auto engine = std::make_unique<Engine>(config, std::move(set), std::move(reasons));
  const std::string where = "rank " + std::to_string(config.rank);
  Result<TuneConstants> tune =
      agreeOnTuneConstants(*engine, *context.store, context.jobKey, deadline);
  if (!tune.isOk()) return tune.status().withContext(where);
  engine->setTuneConstants(*tune);
  Result<int> channels = agreeOnPlanChannels(*engine, *context.store, context.jobKey, deadline);
  if (!channels.isOk()) return channels.status().withContext(where);
  engine->setPlanChannels(*channels);
  return engine;
}

// The device path's Work: the engine's WorkState polling the device's completion.
Work workFromPoller(CompletionPoller poller) {
  return Work(std::make_shared<WorkState>(std::move(poller)));
}

}  // namespace

// Kernels over the device windows when there are any, else staging through host
// memory when there is a device runtime, else nothing. With a device runtime the
// staging is there in either case: the exchanges and the kinds with a count per rank
// have no kernels and always take it.
Status Communicator::Impl::openDevicePath(const EngineConfig& config, const DeviceKnobs& knobs,
                                          std::unique_ptr<DeviceWindows> windows) {
  if (deviceRuntime == nullptr) return Status();
  Engine* host = engine.get();
  auto hostSubmit = [host](const CollectiveArgs& args, const void* input, void* output) {
    return host->submit(args, input, output);
  };
  staging = std::make_unique<DeviceStaging>(deviceRuntime, hostSubmit, workFromPoller, rank, nranks,
                                            config.timeout);
  if (windows != nullptr) {
    DeviceCommConfig settings;
    settings.rank = rank;
    settings.nranks = nranks;
    settings.timeout = config.timeout;
    settings.algorithm = config.algorithm;
    settings.slotBytes = knobs.slotBytes;
    settings.boardBytes = knobs.boardBytes;
    settings.ringSliceBytes = knobs.ringSliceBytes;
    settings.profile = knobs.profile;
    settings.workFromPoller = workFromPoller;
    Result<std::unique_ptr<DeviceComm>> created =
        DeviceComm::create(deviceRuntime, settings, std::move(windows));
    if (!created.isOk()) return created.status();
    device = std::move(*created);
  }
  return Status();
}

Result<std::unique_ptr<Communicator>> Communicator::create(const UniqueId& id, int rank, int nranks,
                                                           const Options& options) {
  // Never fail open: a knob with a value collie does not accept refuses the start.
  Result<Config> settings = communicatorConfig(options);
  if (!settings.isOk()) {
    return settings.status().withContext("rank " + std::to_string(rank));
  }
  return Impl::create(id, rank, nranks, *settings, options.store);
}

Result<std::unique_ptr<Communicator>> Communicator::Impl::create(const UniqueId& id, int rank,
                                                                 int nranks, const Config& settings,
                                                                 std::shared_ptr<Store> given) {
  COLLIE_RETURN_IF_ERROR(checkArguments(id, rank, nranks));
  setLogRank(rank);
  Result<CoreKnobs> knobs = parseCoreKnobs(settings);
  if (!knobs.isOk()) return knobs.status().withContext("rank " + std::to_string(rank));
  EngineConfig config = resolveConfig(rank, nranks, *knobs);
  Result<DeviceRuntime*> deviceRuntime = selectDeviceRuntime(knobs->device.emulation);
  if (!deviceRuntime.isOk()) {
    return deviceRuntime.status().withContext("rank " + std::to_string(rank));
  }
  const Deadline deadline = Clock::now() + config.timeout;
  Result<std::shared_ptr<Store>> store = reachStore(id, rank, std::move(given), deadline);
  if (!store.isOk()) return store.status();
  const TransportContext context =
      makeTransportContext(id, config, *knobs, settings, *store, *deviceRuntime);
  const std::string& forced = knobs->communicator.transport;

  Result<std::vector<std::string>> hosts = exchangeHostIds(context, config, forced, id, deadline);
  if (!hosts.isOk()) return hosts.status();
  Result<Connected> connected = connectTransports(context, *hosts, forced);
  if (!connected.isOk()) return connected.status();
  Topology topology = makeTopology(rank, *hosts, connected->set);
  COLLIE_LOG(INFO, INIT) << "topology: "
                         << (rank == 0 ? topology.describe() : topology.describe(false));
  if (topology.nhosts() > 1) config.hosts = std::make_shared<const HostLayout>(topology.layout());
  config.wait =
      waitPolicyFor(knobs->engine.busyPoll, topology.localSize(), cpusAvailable(knobs->wait));
  if (config.wait.oversubscribed) {
    COLLIE_LOG(INFO, INIT) << "rank " << rank << ": " << topology.localSize()
                           << " ranks on this host for " << cpusAvailable(knobs->wait)
                           << " CPU(s): waits yield from the start (no pure spin)";
  }
  Result<std::unique_ptr<DeviceWindows>> windows =
      openDeviceWindows(context, connected->windowProvider, knobs->device, deadline);
  if (!windows.isOk()) return windows.status();
  connected->windowTransport.reset();  // the windows do not need it
  Result<std::unique_ptr<Engine>> engine =
      startEngine(config, std::move(connected->set), context, deadline);
  if (!engine.isOk()) return engine.status();

  auto impl = std::make_unique<Impl>();
  impl->rank = rank;
  impl->nranks = nranks;
  impl->engine = std::move(*engine);
  impl->topology = std::move(topology);
  impl->deviceRuntime = context.deviceRuntime;
  impl->devicePointersPossible = context.deviceRuntime != nullptr || cudaDeviceCount() > 0;
  if (context.deviceRuntime != nullptr) {
    Result<int> device = context.deviceRuntime->currentDevice();
    if (!device.isOk()) return device.status().withContext("rank " + std::to_string(rank));
    impl->deviceOrdinal = *device;
  }
  COLLIE_RETURN_IF_ERROR(impl->openDevicePath(config, knobs->device, std::move(*windows)));
  impl->id = id;
  impl->store = *store;
  impl->config = settings;
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

}  // namespace collie
