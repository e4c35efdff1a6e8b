// Communicator::createFromEnvironment: join a job started by collie run, torchrun,
// Open MPI or Slurm, from the variables those launchers set. collie's own launch
// variables (COLLIE_UNIQUE_ID, COLLIE_RANK, ...) are process-wide knobs parsed
// (LaunchKnobs) from the communicator's snapshot, which also configures the store this rank may
// host; the other launchers' variables (RANK, OMPI_COMM_WORLD_*, SLURM_*) are read here directly.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "collie/communicator.h"
#include "core/bootstrap/store_knobs.h"
#include "core/bootstrap/store_server.h"
#include "core/comm/comm_knobs.h"
#include "core/comm/communicator_impl.h"
#include "core/comm/options_config.h"
#include "core/config/config.h"
#include "core/config/knob.h"
#include "core/log/log.h"
#include "core/net/job_secret.h"
#include "core/net/net_knobs.h"
#include "core/net/socket.h"

namespace collie {
namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

// A launcher variable that must be an integer in [min, max]; the refusal names the
// variable, its (shortened) value and the accepted range.
Result<int> intVariable(const char* name, long min = 0, long max = 1 << 24) {
  const char* text = env(name);
  if (text == nullptr) return notFound(std::string(name) + " is not set");
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text, &end, 10);
  if (*end != '\0' || errno != 0 || value < min || value > max) {
    return invalidArgument(std::string(name) + "=" + echoedValue(text) +
                           " is not accepted: an integer in " + std::to_string(min) + ".." +
                           std::to_string(max) + " is");
  }
  return static_cast<int>(value);
}

struct LaunchInfo {
  int rank = -1;
  int size = -1;
  const char* launcher = "";
};

Status readRankAndSize(const char* rankName, const char* sizeName, LaunchInfo* info) {
  Result<int> rank = intVariable(rankName);
  Result<int> size = intVariable(sizeName);
  if (!rank.isOk()) return rank.status();
  if (!size.isOk()) return size.status();
  info->rank = *rank;
  info->size = *size;
  return Status();
}

// A launch knob that must be an integer (the snapshot checked its range).
std::string octal(unsigned mode) {
  char text[16];
  std::snprintf(text, sizeof(text), "%04o", mode);
  return text;
}

// The communicator's snapshot and the tables of it this file reads, parsed once.
struct LaunchSettings {
  Config config;  // also configures the store server this rank may start
  LaunchKnobs launch;
  StoreKnobs store;
  NetKnobs net;
  std::chrono::microseconds timeout{0};  // COLLIE_TIMEOUT
};

Result<LaunchSettings> parseLaunchSettings(const Config& config) {
  LaunchSettings settings;
  settings.config = config;
  Result<LaunchKnobs> launch = LaunchKnobs::parse(config);
  if (!launch.isOk()) return launch.status();
  settings.launch = *launch;
  Result<StoreKnobs> store = StoreKnobs::parse(config);
  if (!store.isOk()) return store.status();
  settings.store = *store;
  Result<NetKnobs> net = NetKnobs::parse(config);
  if (!net.isOk()) return net.status();
  settings.net = *net;
  Result<CommunicatorKnobs> communicator = CommunicatorKnobs::parse(config);
  if (!communicator.isOk()) return communicator.status();
  settings.timeout = communicator->timeout;
  return settings;
}

Result<int> launchedAs(const std::optional<int>& value, const char* name) {
  if (!value) return notFound(std::string(name) + " is not set");
  return *value;
}

// The job secret of ranks not started by collie run, whose launcher (torchrun, mpirun
// on several hosts) has no secret of collie's to hand out: the user must set one.
Result<JobSecret> externalSecret(const LaunchKnobs& launch, const char* launcher) {
  const std::string& hex = launch.jobSecret;
  if (hex.empty()) {
    return invalidArgument(std::string("ranks started by ") + launcher +
                           " need COLLIE_JOB_SECRET, the same on every rank, so that only "
                           "this job's ranks can connect; refusing to run unauthenticated. "
                           "Set it to " +
                           kJobSecretForm);
  }
  return jobSecretFromUserText(hex.c_str(), "COLLIE_JOB_SECRET");
}

Result<std::pair<std::string, uint16_t>> splitHostPort(const std::string& text) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size()) {
    return invalidArgument(echoedValue(text) + " is not HOST:PORT");
  }
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string digits = text.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  long port = std::strtol(digits.c_str(), &end, 10);
  if (*end != '\0' || errno != 0 || port < 1 || port > 65535) {
    return invalidArgument("the port of " + echoedValue(text) +
                           " is not accepted: HOST:PORT with a port in 1..65535 is");
  }
  return std::make_pair(host, static_cast<uint16_t>(port));
}

// The one address the store of an externally launched job listens on: COLLIE_STORE_BIND
// ('*': every interface), else the master address when it is this host's, else the
// interface COLLIE_SOCKET_IFNAME selects, else (with a warning) every interface.
std::string storeBindHost(const LaunchSettings& settings, const std::string& master) {
  const std::string& chosen = settings.store.bind;
  if (chosen == "*") return "0.0.0.0";
  if (!chosen.empty()) return chosen;
  if (net::isAddressOfThisHost(master)) return master;
  const std::string& spec = settings.net.socketInterfaces;
  if (!spec.empty()) {
    Result<net::InterfaceAddress> ifc = net::selectInterface(spec);
    if (ifc.isOk()) return ifc->address;
  }
  COLLIE_LOG(WARN, INIT) << "the store listens on every interface: the master address '" << master
                         << "' is not one of this host's; set COLLIE_STORE_BIND or "
                            "COLLIE_SOCKET_IFNAME to listen on one";
  return "0.0.0.0";
}

// Rank 0 of an externally launched job hosts the store at the address every rank was
// given (id.port on storeBindHost(id.host)).
Status startStore(const LaunchSettings& settings, const UniqueId& id,
                  std::unique_ptr<StoreServer>* server) {
  Result<std::unique_ptr<StoreServer>> started =
      startStoreServer(storeBindHost(settings, id.host), id.port, id.secret, settings.config);
  if (!started.isOk()) return started.status().withContext("rank 0 starting the store");
  *server = std::move(*started);
  return Status();
}

// Ranks started by another launcher at a known store address: the job secret is the
// user's (COLLIE_JOB_SECRET), and rank 0 hosts the store.
Status joinExternalStore(const LaunchSettings& settings, const char* launcher, int rank,
                         UniqueId* id, std::unique_ptr<StoreServer>* server) {
  Result<JobSecret> secret = externalSecret(settings.launch, launcher);
  if (!secret.isOk()) return secret.status();
  id->secret = *secret;
  return rank == 0 ? startStore(settings, *id, server) : Status();
}

// The one place a single-host rendezvous file may live: `base`/collie-<uid>, a 0700
// directory of this user. It is made if missing; one that exists must be a directory
// (not a symlink) owned by this user with no access for group or others, else another
// local user could plant the id file (and take the job over) or read it.
Result<std::string> privateRendezvousDir(const std::string& base) {
  const std::string dir = base + "/collie-" + std::to_string(getuid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return systemError("cannot create the rendezvous directory " + dir, errno);
  }
  struct stat info {};
  if (::lstat(dir.c_str(), &info) != 0) {
    return systemError("cannot stat the rendezvous directory " + dir, errno);
  }
  if (!S_ISDIR(info.st_mode) || info.st_uid != getuid() || (info.st_mode & 077) != 0) {
    return unauthenticated(
        "refusing the rendezvous directory " + dir + ": it is " +
        (S_ISLNK(info.st_mode)   ? std::string("a symlink")
         : S_ISDIR(info.st_mode) ? "a directory owned by uid " + std::to_string(info.st_uid) +
                                       " with mode " + octal(info.st_mode & 07777)
                                 : std::string("not a directory")) +
        "; it must be a directory (not a symlink) owned by uid " + std::to_string(getuid()) +
        " with mode 0700 (another user may have planted it: remove it, or set COLLIE_TMPDIR "
        "to a directory only you can write, or COLLIE_MASTER_ADDR)");
  }
  return dir;
}

// Reads the unique id from `path` when it exists; refuses a file that is not a regular
// file of this user's readable by nobody else (checked on the open descriptor).
Result<std::string> readIdFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return notFound(path + " does not exist yet");
    return systemError("cannot open the rendezvous file " + path, errno);
  }
  struct stat info {};
  const bool statted = ::fstat(fd, &info) == 0;
  if (!statted || !S_ISREG(info.st_mode) || info.st_uid != getuid() || (info.st_mode & 077) != 0) {
    ::close(fd);
    return unauthenticated("refusing the rendezvous file " + path + ": owned by uid " +
                           std::to_string(info.st_uid) + " with mode " +
                           octal(info.st_mode & 07777) + "; it must be a regular file of uid " +
                           std::to_string(getuid()) + " with mode 0600");
  }
  char text[512];
  ssize_t got = ::read(fd, text, sizeof(text) - 1);
  ::close(fd);
  if (got <= 0) return notFound(path + " is still empty");
  std::string line(text, static_cast<size_t>(got));
  const size_t newline = line.find('\n');
  if (newline == std::string::npos) return notFound(path + " is not complete yet");
  return line.substr(0, newline);
}

// Rank 0 publishes `text` in `path`: written to a fresh file made with O_EXCL|O_NOFOLLOW
// (mode 0600) in the same private directory, then renamed over `path`, so readers see
// the whole id or nothing. The temporary file never outlives a failure.
Status publishIdFile(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp" + std::to_string(getpid());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return systemError("cannot create " + temp, errno);
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int writeErrno = errno;
  ::close(fd);
  if (!written || ::rename(temp.c_str(), path.c_str()) != 0) {
    const int error = written ? errno : writeErrno;
    ::unlink(temp.c_str());
    return systemError("cannot publish the unique id in " + path, error);
  }
  return Status();
}

// A single-host rendezvous through a file: rank 0 hosts the store on loopback with a
// fresh secret and publishes the id in `path`, a 0600 file in this user's private
// directory (privateRendezvousDir) named after the launcher's job id.
Result<UniqueId> rendezvousByFile(const LaunchSettings& settings, const std::string& path, int rank,
                                  std::unique_ptr<StoreServer>* server, std::string* cleanup,
                                  Deadline deadline) {
  if (rank == 0) {
    Result<UniqueId> id = UniqueId::generate("127.0.0.1", 0);
    if (!id.isOk()) return id.status();
    Result<std::unique_ptr<StoreServer>> started =
        startStoreServer("127.0.0.1", 0, id->secret, settings.config);
    if (!started.isOk()) return started.status();
    id->port = (*started)->port();
    *server = std::move(*started);
    COLLIE_RETURN_IF_ERROR(publishIdFile(path, id->toString() + "\n"));
    *cleanup = path;
    return id;
  }
  while (true) {
    Result<std::string> line = readIdFile(path);
    if (line.isOk()) return UniqueId::parse(*line);
    if (line.status().code() != StatusCode::kNotFound) return line.status();
    if (Clock::now() > deadline) {
      return timeoutError("rank 0 did not publish the job's unique id in " + path +
                              " before the deadline (is rank 0 running on this host? on several "
                              "hosts set COLLIE_MASTER_ADDR=host:port)",
                          0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::createFromEnvironment(const Options& options) {
  // Never fail open: a knob with a value collie does not accept refuses the start.
  Result<Config> settings = communicatorConfig(options);
  if (!settings.isOk()) return settings.status();
  const Config& config = *settings;
  Result<LaunchSettings> parsed = parseLaunchSettings(config);
  if (!parsed.isOk()) return parsed.status();
  const LaunchSettings& launch = *parsed;
  const Deadline deadline = Clock::now() + launch.timeout;

  // collie run.
  if (!launch.launch.uniqueId.empty()) {
    Result<int> rank = launchedAs(launch.launch.rank, "COLLIE_RANK");
    Result<int> size = launchedAs(launch.launch.worldSize, "COLLIE_WORLD_SIZE");
    if (!rank.isOk()) return rank.status();
    if (!size.isOk()) return size.status();
    Result<UniqueId> id = UniqueId::parse(launch.launch.uniqueId);
    if (!id.isOk()) return id.status().withContext("COLLIE_UNIQUE_ID");
    return Impl::create(*id, *rank, *size, config, options.store);
  }

  LaunchInfo info;
  std::string jobName;
  if (env("RANK") && env("WORLD_SIZE") && env("MASTER_ADDR") && env("MASTER_PORT")) {
    info.launcher = "torchrun";
  } else if (env("OMPI_COMM_WORLD_RANK") && env("OMPI_COMM_WORLD_SIZE")) {
    info.launcher = "mpirun";
    COLLIE_RETURN_IF_ERROR(readRankAndSize("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", &info));
    const char* job = env("OMPI_MCA_ess_base_jobid");
    if (job == nullptr) job = env("PMIX_NAMESPACE");
    jobName = std::string("ompi-") + (job ? job : "default");
  } else if (env("SLURM_PROCID") && env("SLURM_NTASKS")) {
    info.launcher = "slurm";
    COLLIE_RETURN_IF_ERROR(readRankAndSize("SLURM_PROCID", "SLURM_NTASKS", &info));
    jobName = std::string("slurm-") + (env("SLURM_JOB_ID") ? env("SLURM_JOB_ID") : "0") + "." +
              (env("SLURM_STEP_ID") ? env("SLURM_STEP_ID") : "0");
  } else {
    return invalidArgument(
        "no launcher variables found: start ranks with `collie run -n N -- prog`, torchrun "
        "(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), mpirun or srun");
  }

  std::unique_ptr<StoreServer> server;
  std::string cleanup;
  UniqueId id;
  if (std::string(info.launcher) == "torchrun") {
    Result<int> rank = intVariable("RANK");
    Result<int> size = intVariable("WORLD_SIZE");
    // torchrun's store has MASTER_PORT and collie's the next port, so both must be
    // ports: 1..65534 (a larger value must not wrap onto another port).
    Result<int> port = intVariable("MASTER_PORT", 1, 65534);
    if (!rank.isOk()) return rank.status();
    if (!size.isOk()) return size.status();
    if (!port.isOk()) return port.status();
    info.rank = *rank;
    info.size = *size;
    // torchrun's own store listens on MASTER_PORT; collie's listens on the next port.
    id.host = env("MASTER_ADDR");
    id.port = static_cast<uint16_t>(*port + 1);
    COLLIE_RETURN_IF_ERROR(
        joinExternalStore(launch, "torchrun (MASTER_ADDR)", info.rank, &id, &server));
  } else if (!launch.launch.masterAddr.empty()) {
    Result<std::pair<std::string, uint16_t>> address = splitHostPort(launch.launch.masterAddr);
    if (!address.isOk()) return address.status().withContext("COLLIE_MASTER_ADDR");
    id.host = address->first;
    id.port = address->second;
    COLLIE_RETURN_IF_ERROR(
        joinExternalStore(launch, "COLLIE_MASTER_ADDR", info.rank, &id, &server));
  } else {
    Result<std::string> dir = privateRendezvousDir(launch.launch.tmpdir);
    if (!dir.isOk())
      return dir.status().withContext(std::string("rank ") + std::to_string(info.rank));
    const std::string path = *dir + "/" + jobName + ".id";
    Result<UniqueId> found = rendezvousByFile(launch, path, info.rank, &server, &cleanup, deadline);
    if (!found.isOk()) return found.status();
    id = *found;
  }
  COLLIE_LOG(INFO, INIT) << "started by " << info.launcher << " as rank " << info.rank << " of "
                         << info.size;
  Result<std::unique_ptr<Communicator>> comm =
      Impl::create(id, info.rank, info.size, config, options.store);
  if (!comm.isOk()) return comm.status();
  (*comm)->impl_->storeServer = std::move(server);
  (*comm)->impl_->cleanupFile = cleanup;
  return comm;
}

}  // namespace collie
