// The NCCL-compatible API, part 1: ids, communicators, errors and memory.
// Thin maps onto collie::Communicator; no exception crosses the C boundary.
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>
#include <vector>

#include "collie/store.h"
#include "core/api/nccl/nccl_internal.h"
#include "core/comm/comm_knobs.h"
#include "core/config/config.h"
#include "core/device/device_knobs.h"
#include "core/log/log.h"
#include "core/net/net_knobs.h"
#include "core/net/socket.h"

namespace collie::nccl {
namespace {

thread_local std::string lastError;
constexpr unsigned kConfigMagic = 0xcafebeef;

// Stores started by ncclGetUniqueId live until the process exits, like NCCL's
// bootstrap root thread.
std::mutex serversMutex;
std::vector<std::unique_ptr<StoreServer>>& servers() {
  static auto* list = new std::vector<std::unique_ptr<StoreServer>>();
  return *list;
}

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

// Whether some registered knob takes `name` as its NCCL alias (NCCL_IB_HCA when the
// ibverbs transport is built).
bool isKnobAlias(const char* name) {
  for (const Knob* knob : KnobRegistry::instance().knobs()) {
    if (knob->ncclAlias != nullptr && std::strcmp(knob->ncclAlias, name) == 0) return true;
  }
  return false;
}

// NCCL variables without a collie knob: said once, at the first init.
void noteIgnoredVariables() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct Ignored {
      const char* name;
      const char* why;
    };
    const Ignored ignored[] = {
        {"NCCL_PROTO", "collie has one protocol per transport"},
        {"NCCL_IB_HCA", "this build has no InfiniBand transport"},
        {"NCCL_NET", "collie chooses transports itself (COLLIE_TRANSPORT forces one)"},
        {"NCCL_P2P_DISABLE", "collie has no GPU peer-to-peer path on host buffers"},
        {"NCCL_P2P_LEVEL", "collie has no GPU peer-to-peer path on host buffers"},
        {"NCCL_MAX_NCHANNELS", "use NCCL_MIN_NCHANNELS / COLLIE_NCHANNELS"},
        {"NCCL_NTHREADS", "collie runs one progress thread per communicator"},
        {"NCCL_LAUNCH_MODE", "collie launches no kernels for host buffers"},
    };
    for (const Ignored& var : ignored) {
      if (isKnobAlias(var.name)) continue;
      if (const char* value = env(var.name)) {
        COLLIE_LOG(WARN, INIT) << var.name << "=" << value << " accepted and ignored: " << var.why;
      }
    }
  });
}

}  // namespace

DeviceRuntime* deviceRuntimeFromEnvironment() {
  // A refused COLLIE_DEVICE_EMULATION fails the communicator's creation, which names it.
  Result<DeviceKnobs> knobs = DeviceKnobs::parse(Config::fromEnvironment());
  if (!knobs.isOk()) return nullptr;
  Result<DeviceRuntime*> runtime = selectDeviceRuntime(knobs->emulation);
  return runtime.isOk() ? *runtime : nullptr;
}

namespace {

// Options from the NCCL variables that are not plain aliases of a collie knob.
Options optionsFromEnvironment() {
  noteIgnoredVariables();
  Options options;
  const char* shmDisable = env("NCCL_SHM_DISABLE");
  // Knobs that do not parse leave the choice as it is: the creation then names them.
  Result<CommunicatorKnobs> knobs = CommunicatorKnobs::parse(Config::fromEnvironment());
  if (shmDisable != nullptr && std::string(shmDisable) == "1" && knobs.isOk() &&
      knobs->transport.empty()) {
    options.transport = "tcp";
  }
  return options;
}

struct ConfigFields {
  bool blocking = true;
  std::string name;
};

// Reads the fields collie honours, only as far as the caller's struct reaches.
ncclResult_t readConfig(const ncclConfig_t* config, ConfigFields* out) {
  const char* blockingEnv = env("NCCL_COMM_BLOCKING");
  out->blocking = blockingEnv == nullptr || std::string(blockingEnv) != "0";
  if (config == nullptr) return ncclSuccess;
  if (config->magic != kConfigMagic) {
    return invalidArgumentResult(
        "ncclConfig_t was not initialised with NCCL_CONFIG_INITIALIZER (bad magic)");
  }
  auto covers = [&](size_t offset, size_t bytes) { return config->size >= offset + bytes; };
  if (covers(offsetof(ncclConfig_t, blocking), sizeof(int)) &&
      config->blocking != NCCL_CONFIG_UNDEF_INT) {
    out->blocking = config->blocking != 0;
  }
  if (covers(offsetof(ncclConfig_t, commName), sizeof(const char*)) &&
      config->commName != nullptr) {
    out->name = config->commName;
  }
  return ncclSuccess;
}

// Creates the communicator now (blocking) or on a thread (non-blocking, in a group).
ncclResult_t createComm(ncclComm_t* out, const ConfigFields& fields,
                        std::function<Result<std::unique_ptr<Communicator>>()> create) {
  auto handle = std::make_unique<ncclComm>();
  handle->name = fields.name;
  if (fields.blocking && !inGroup()) {
    Result<std::unique_ptr<Communicator>> created = create();
    if (!created.isOk()) return fail(created.status());
    handle->comm = std::move(*created);
    handle->rank = handle->comm->rank();
    handle->nranks = handle->comm->size();
    *out = handle.release();
    addLiveHandle(*out);
    return ncclSuccess;
  }
  ncclComm* comm = handle.release();
  addLiveHandle(comm);
  comm->init = std::make_shared<AsyncInit>();
  comm->initThread = std::thread([state = comm->init, create = std::move(create)] {
    Result<std::unique_ptr<Communicator>> created = create();
    std::unique_ptr<Communicator> orphan;
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      if (!created.isOk()) {
        state->status = created.status();
      } else if (state->abandoned) {
        orphan = std::move(*created);
      } else {
        state->comm = std::move(*created);
      }
      state->done = true;
    }
    state->cv.notify_all();
    if (orphan) orphan->abort();  // destroyed here, off the caller's thread
  });
  *out = comm;
  if (inGroup()) {
    deferInit(comm);
    return ncclSuccess;
  }
  return ncclInProgress;
}

ncclResult_t initRank(ncclComm_t* out, int nranks, const ncclUniqueId& commId, int rank,
                      const ncclConfig_t* config) {
  if (out == nullptr) return invalidArgumentResult("ncclCommInitRank: comm is NULL");
  *out = nullptr;
  ConfigFields fields;
  if (ncclResult_t r = readConfig(config, &fields); r != ncclSuccess) return r;
  Result<UniqueId> id = UniqueId::fromBytes(reinterpret_cast<const uint8_t*>(commId.internal),
                                            sizeof(commId.internal));
  if (!id.isOk()) return fail(id.status().withContext("ncclCommInitRank: bad ncclUniqueId"));
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return invalidArgumentResult("ncclCommInitRank: rank " + std::to_string(rank) +
                                 " is outside [0, " + std::to_string(nranks) + ")");
  }
  Options options = optionsFromEnvironment();
  UniqueId parsed = *id;
  // NCCL binds a communicator to the device current on the calling thread; a
  // non-blocking or grouped init runs on a thread of its own, so it makes the caller's
  // device current there first.
  DeviceRuntime* runtime = deviceRuntimeFromEnvironment();
  Result<int> device = runtime != nullptr ? runtime->currentDevice() : Result<int>(-1);
  if (!device.isOk()) return fail(device.status().withContext("ncclCommInitRank"));
  ncclResult_t result =
      createComm(out, fields, [parsed, rank, nranks, options, runtime, device = *device] {
        if (runtime != nullptr) {
          Status bound = runtime->setCurrentDevice(device);
          if (!bound.isOk()) return Result<std::unique_ptr<Communicator>>(bound);
        }
        return Communicator::create(parsed, rank, nranks, options);
      });
  if (*out != nullptr) {
    (*out)->rank = rank;
    (*out)->nranks = nranks;
  }
  return result;
}

}  // namespace

ncclResult_t resultOf(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return ncclSuccess;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
      return ncclInvalidArgument;
    case StatusCode::kTimeout:
    case StatusCode::kRemoteError:
      return ncclRemoteError;
    case StatusCode::kSystemError:
    case StatusCode::kUnauthenticated:
      return ncclSystemError;
    case StatusCode::kMismatch:
    case StatusCode::kUnsupported:
    case StatusCode::kAborted:
      return ncclInvalidUsage;
    case StatusCode::kInternal:
      return ncclInternalError;
  }
  return ncclInternalError;
}

ncclResult_t fail(const Status& status) {
  lastError = status.toString();
  COLLIE_LOG(WARN, INIT) << "nccl: " << lastError;
  return resultOf(status);
}

const std::string& lastErrorText() { return lastError; }
void setLastErrorText(const std::string& text) { lastError = text; }

ncclResult_t invalidUsage(const std::string& why) { return fail(unsupported(why)); }
ncclResult_t invalidArgumentResult(const std::string& why) { return fail(invalidArgument(why)); }

namespace {
struct LiveHandles {
  std::mutex mutex;
  std::unordered_set<const ncclComm*> handles;
};
LiveHandles& liveHandles() {
  static LiveHandles* live = new LiveHandles;  // never destroyed: used until exit
  return *live;
}
}  // namespace

void addLiveHandle(ncclComm* comm) {
  std::lock_guard<std::mutex> lock(liveHandles().mutex);
  liveHandles().handles.insert(comm);
}

bool takeLiveHandle(ncclComm* comm) {
  std::lock_guard<std::mutex> lock(liveHandles().mutex);
  return liveHandles().handles.erase(comm) == 1;
}

ncclResult_t checkLive(const ncclComm* comm, const char* what) {
  if (comm == nullptr) return invalidArgumentResult(std::string(what) + ": comm is NULL");
  {
    std::lock_guard<std::mutex> lock(liveHandles().mutex);
    if (liveHandles().handles.count(comm) == 1) return ncclSuccess;
  }
  char address[32];
  std::snprintf(address, sizeof(address), "%p", static_cast<const void*>(comm));
  return invalidArgumentResult(std::string(what) + ": comm " + address +
                               " is not a live communicator (destroyed or aborted already, or "
                               "never returned by an ncclCommInit*, ncclCommSplit or "
                               "ncclCommShrink call)");
}

ncclResult_t refuseIfRevoked(const ncclComm* comm, const char* what) {
  if (!comm->revoked) return ncclSuccess;
  return invalidUsage(std::string(what) +
                      ": the communicator was revoked (ncclCommRevoke); only ncclCommShrink and "
                      "ncclCommDestroy may use it now");
}

ncclResult_t ready(ncclComm* comm, bool wait) {
  if (comm->comm) return ncclSuccess;
  if (comm->init) {
    std::unique_lock<std::mutex> lock(comm->init->mutex);
    if (wait) comm->init->cv.wait(lock, [&] { return comm->init->done; });
    if (!comm->init->done) return ncclInProgress;
    comm->comm = std::move(comm->init->comm);
    comm->initError = comm->init->status;
    lock.unlock();
    comm->init.reset();
    if (comm->initThread.joinable()) comm->initThread.join();
    if (comm->comm) {
      comm->rank = comm->comm->rank();
      comm->nranks = comm->comm->size();
      return ncclSuccess;
    }
  }
  if (!comm->initError.isOk()) return fail(comm->initError.withContext("communicator init failed"));
  return invalidUsage("communicator is not initialised");
}

}  // namespace collie::nccl

using namespace collie;        // NOLINT(build/namespaces)
using namespace collie::nccl;  // NOLINT(build/namespaces)

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return invalidArgumentResult("ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return invalidArgumentResult("ncclGetUniqueId: uniqueId is NULL");
  return guarded([&] {
    // NCCL_COMM_ID=host:port fixes the root's address; otherwise the store listens on
    // every interface and the id names the one COLLIE_SOCKET_IFNAME selects.
    std::string host = "127.0.0.1";
    uint16_t port = 0;
    if (const char* commId = env("NCCL_COMM_ID")) {
      Status split = net::splitHostPort(commId, &host, &port);
      if (!split.isOk()) return fail(split.withContext("NCCL_COMM_ID"));
    } else {
      // No communicator yet: the environment's interface (NCCL programs configure
      // through the environment).
      Result<NetKnobs> knobs = NetKnobs::parse(Config::fromEnvironment());
      if (!knobs.isOk()) return fail(knobs.status().withContext("ncclGetUniqueId"));
      Result<net::InterfaceAddress> ifc = net::selectInterface(knobs->socketInterfaces);
      if (ifc.isOk()) host = ifc->address;
    }
    Result<UniqueId> id = UniqueId::generate(host, port);
    if (!id.isOk()) return fail(id.status());
    Result<std::unique_ptr<StoreServer>> server = StoreServer::start("0.0.0.0", port, id->secret);
    if (!server.isOk()) return fail(server.status().withContext("ncclGetUniqueId: store"));
    id->port = (*server)->port();
    {
      std::lock_guard<std::mutex> lock(serversMutex);
      servers().push_back(std::move(*server));
    }
    auto bytes = id->toBytes();
    static_assert(sizeof(uniqueId->internal) == kUniqueIdBytes);
    std::memcpy(uniqueId->internal, bytes.data(), bytes.size());
    return ncclSuccess;
  });
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return guarded([&] { return initRank(comm, nranks, commId, rank, nullptr); });
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  return guarded([&] { return initRank(comm, nranks, commId, rank, config); });
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* config) {
  if (nId < 1 || commIds == nullptr) {
    if (newcomm != nullptr) *newcomm = nullptr;
    return invalidArgumentResult("ncclCommInitRankScalable: nId is " + std::to_string(nId) +
                                 (commIds == nullptr ? " and commIds is NULL" : "") +
                                 "; at least one ncclUniqueId is needed");
  }
  // NCCL spreads its bootstrap over the ids; collie's rendezvous is the store of the
  // first one, which every rank has (the list is the same on every rank).
  return guarded([&] { return initRank(newcomm, nranks, commIds[0], myrank, config); });
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1) {
    return invalidArgumentResult("ncclCommInitAll: comms is NULL or ndev < 1");
  }
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return r;
  // Communicator i is bound to devlist[i] (NULL: device i), as in NCCL, when there is a
  // device runtime; the caller's current device is restored afterwards.
  DeviceRuntime* runtime = deviceRuntimeFromEnvironment();
  Result<int> callers = runtime != nullptr ? runtime->currentDevice() : Result<int>(-1);
  if (!callers.isOk()) return fail(callers.status().withContext("ncclCommInitAll"));
  auto device = [devlist](int i) { return devlist != nullptr ? devlist[i] : i; };
  for (int i = 0; runtime != nullptr && i < ndev; ++i) {  // every device first: no rank waits
    Status bound = runtime->setCurrentDevice(device(i));
    (void)runtime->setCurrentDevice(*callers);
    if (!bound.isOk())
      return fail(bound.withContext("ncclCommInitAll: devlist[" + std::to_string(i) + "]"));
  }
  ncclGroupStart();
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < ndev; ++i) {
    if (runtime != nullptr) (void)runtime->setCurrentDevice(device(i));
    ncclResult_t r = ncclCommInitRank(&comms[i], ndev, id, i);
    if (first == ncclSuccess) first = r;
  }
  if (runtime != nullptr) (void)runtime->setCurrentDevice(*callers);
  ncclResult_t end = ncclGroupEnd();
  return first != ncclSuccess ? first : end;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (ncclResult_t r = checkLive(comm, "ncclCommFinalize"); r != ncclSuccess) return r;
  // Host-buffer operations have completed when their call returned: nothing to flush.
  if (ncclResult_t r = ready(comm, true); r != ncclSuccess) return r;
  comm->finalized = true;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (ncclResult_t r = checkLive(comm, "ncclCommDestroy"); r != ncclSuccess) return r;
  if (inGroup()) {
    // As in NCCL; the group's calls may still name this communicator, and they run at
    // ncclGroupEnd. The handle stays valid.
    return invalidUsage(
        "ncclCommDestroy inside ncclGroupStart/ncclGroupEnd is not allowed; call ncclGroupEnd "
        "first (or ncclCommAbort, which drops the group's calls on this communicator)");
  }
  return guarded([&] {
    // Taken first: of two racing destroys of one handle, one frees it.
    if (!takeLiveHandle(comm)) return checkLive(comm, "ncclCommDestroy");
    ready(comm, true);
    delete comm;
    return ncclSuccess;
  });
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (!takeLiveHandle(comm)) return checkLive(comm, "ncclCommAbort");
  dropFromGroup(comm);
  return guarded([&] {
    if (comm->init) {
      std::unique_ptr<Communicator> made;
      bool running;
      {
        std::lock_guard<std::mutex> lock(comm->init->mutex);
        running = !comm->init->done;
        comm->init->abandoned = running;
        made = std::move(comm->init->comm);
      }
      // A running init may wait for absent peers until its deadline: leave it to
      // dispose of what it makes, and return now.
      if (running) {
        comm->initThread.detach();
      } else if (comm->initThread.joinable()) {
        comm->initThread.join();
      }
      if (made) made->abort();
    } else if (comm->comm) {
      comm->comm->abort();
    }
    delete comm;
    return ncclSuccess;
  });
}

ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  if (ncclResult_t r = checkLive(comm, "ncclCommRevoke"); r != ncclSuccess) return r;
  if (revokeFlags != NCCL_REVOKE_DEFAULT) {
    return invalidArgumentResult("ncclCommRevoke: revokeFlags is " + std::to_string(revokeFlags) +
                                 "; only NCCL_REVOKE_DEFAULT (0) is defined");
  }
  if (inGroup()) return invalidUsage("ncclCommRevoke inside ncclGroupStart/ncclGroupEnd");
  return guarded([&] {
    if (ncclResult_t r = ready(comm, true); r != ncclSuccess) return r;
    // abort() fails what is pending and closes the connections, so peers fail at once;
    // it returns when the engine no longer runs anything: the communicator is quiescent.
    comm->comm->abort();
    comm->revoked = true;
    return ncclSuccess;
  });
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  if (newcomm == nullptr) return invalidArgumentResult("ncclCommShrink: newcomm is NULL");
  if (ncclResult_t r = checkLive(comm, "ncclCommShrink"); r != ncclSuccess) return r;
  *newcomm = nullptr;
  if (excludeRanksCount < 0 || (excludeRanksCount > 0 && excludeRanksList == nullptr)) {
    return invalidArgumentResult("ncclCommShrink: excludeRanksCount is " +
                                 std::to_string(excludeRanksCount) +
                                 (excludeRanksList == nullptr ? " with a NULL list" : ""));
  }
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT) {
    return invalidArgumentResult("ncclCommShrink: shrinkFlags is " + std::to_string(shrinkFlags) +
                                 "; accepted: NCCL_SHRINK_DEFAULT (0), NCCL_SHRINK_ABORT (1)");
  }
  return guarded([&] {
    if (ncclResult_t r = ready(comm, true); r != ncclSuccess) return r;
    ConfigFields fields;
    if (ncclResult_t r = readConfig(config, &fields); r != ncclSuccess) return r;
    if (config == nullptr) fields.name = comm->name;  // inherits the parent's settings
    // Pending operations of the parent would wait for the excluded ranks: abort them.
    if (shrinkFlags == NCCL_SHRINK_ABORT) comm->comm->abort();
    std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
    Communicator* parent = comm->comm.get();
    return createComm(newcomm, fields, [parent, excluded = std::move(excluded)] {
      return parent->shrink(excluded);
    });
  });
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config) {
  if (newcomm == nullptr) return invalidArgumentResult("ncclCommSplit: newcomm is NULL");
  if (ncclResult_t r = checkLive(comm, "ncclCommSplit"); r != ncclSuccess) return r;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    return invalidArgumentResult("ncclCommSplit: color " + std::to_string(color) +
                                 " is negative (only NCCL_SPLIT_NOCOLOR may be)");
  }
  return guarded([&] {
    *newcomm = nullptr;
    if (ncclResult_t r = ready(comm, true); r != ncclSuccess) return r;
    if (ncclResult_t r = refuseIfRevoked(comm, "ncclCommSplit"); r != ncclSuccess) return r;
    ConfigFields fields;
    if (ncclResult_t r = readConfig(config, &fields); r != ncclSuccess) return r;
    if (color == NCCL_SPLIT_NOCOLOR) {  // run at once, also inside a group
      // Still a collective call on the parent: take part in the color exchange.
      Result<std::unique_ptr<Communicator>> none = comm->comm->split(-1, key);
      return none.isOk() ? ncclSuccess : fail(none.status());
    }
    Communicator* parent = comm->comm.get();
    Options options = optionsFromEnvironment();
    ncclResult_t result = createComm(newcomm, fields, [parent, color, key, options] {
      return parent->split(color, key, options);
    });
    return result;
  });
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (asyncError == nullptr) {
    return invalidArgumentResult("ncclCommGetAsyncError: asyncError is NULL");
  }
  if (ncclResult_t r = checkLive(comm, "ncclCommGetAsyncError"); r != ncclSuccess) return r;
  return guarded([&] {
    ncclResult_t state = ready(comm, false);
    if (state != ncclSuccess) {
      *asyncError = state;
      return ncclSuccess;
    }
    if (comm->revoked) {  // quiescent since ncclCommRevoke returned, as NCCL reports it
      *asyncError = ncclSuccess;
      return ncclSuccess;
    }
    Status error = comm->comm->asyncError();
    *asyncError = resultOf(error);
    if (!error.isOk()) lastError = error.toString();
    return ncclSuccess;
  });
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (count == nullptr) return invalidArgumentResult("ncclCommCount: count is NULL");
  if (ncclResult_t r = checkLive(comm, "ncclCommCount"); r != ncclSuccess) return r;
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (device == nullptr) return invalidArgumentResult("ncclCommCuDevice: device is NULL");
  if (ncclResult_t r = checkLive(comm, "ncclCommCuDevice"); r != ncclSuccess) return r;
  return guarded([&] {
    if (ncclResult_t r = ready(comm, true); r != ncclSuccess) return r;
    *device = comm->comm->deviceOrdinal();  // -1: no device runtime, a host communicator
    return ncclSuccess;
  });
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (rank == nullptr) return invalidArgumentResult("ncclCommUserRank: rank is NULL");
  if (ncclResult_t r = checkLive(comm, "ncclCommUserRank"); r != ncclSuccess) return r;
  *rank = comm->rank;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the collie developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) { return lastError.c_str(); }

}  // extern "C"

COLLIE_NCCL_PROFILING_NAME(ncclGetVersion);
COLLIE_NCCL_PROFILING_NAME(ncclGetUniqueId);
COLLIE_NCCL_PROFILING_NAME(ncclCommInitRank);
COLLIE_NCCL_PROFILING_NAME(ncclCommInitRankConfig);
COLLIE_NCCL_PROFILING_NAME(ncclCommInitRankScalable);
COLLIE_NCCL_PROFILING_NAME(ncclCommInitAll);
COLLIE_NCCL_PROFILING_NAME(ncclCommFinalize);
COLLIE_NCCL_PROFILING_NAME(ncclCommDestroy);
COLLIE_NCCL_PROFILING_NAME(ncclCommAbort);
COLLIE_NCCL_PROFILING_NAME(ncclCommRevoke);
COLLIE_NCCL_PROFILING_NAME(ncclCommShrink);
COLLIE_NCCL_PROFILING_NAME(ncclCommSplit);
COLLIE_NCCL_PROFILING_NAME(ncclCommGetAsyncError);
COLLIE_NCCL_PROFILING_NAME(ncclCommCount);
COLLIE_NCCL_PROFILING_NAME(ncclCommCuDevice);
COLLIE_NCCL_PROFILING_NAME(ncclCommUserRank);
COLLIE_NCCL_PROFILING_NAME(ncclGetErrorString);
COLLIE_NCCL_PROFILING_NAME(ncclGetLastError);
