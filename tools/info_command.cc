// `collie info`: what this build contains and how this host and configuration look.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>

#include "core/comm/comm_knobs.h"
#include "core/config/config.h"
#include "core/device/device_knobs.h"
#include "core/device/device_runtime.h"
#include "core/engine/engine_knobs.h"
#include "core/engine/tune_probe.h"
#include "core/net/net_knobs.h"
#include "core/net/process_sockets.h"
#include "core/transport/device_windows.h"
#include "core/transport/transport.h"
#include "tools/commands.h"

namespace collie {
// Generated into the build (builtin_transports.cc): space-separated feature names.
const char* builtinFeatures();
}  // namespace collie

namespace collie::tools {
namespace {

void printInterfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    std::printf("  (getifaddrs failed)\n");
    return;
  }
  // name -> (flags, addresses)
  std::map<std::string, std::pair<unsigned, std::string>> interfaces;
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    auto& [flags, addresses] = interfaces[ifa->ifa_name];
    flags = ifa->ifa_flags;
    if (ifa->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    int family = ifa->ifa_addr->sa_family;
    if (family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(ifa->ifa_addr)->sin_addr, text,
                sizeof text);
    } else if (family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr)->sin6_addr, text,
                sizeof text);
    } else {
      continue;
    }
    addresses += std::string(addresses.empty() ? "" : " ") + text;
  }
  freeifaddrs(list);
  for (const auto& [name, entry] : interfaces) {
    const auto& [flags, addresses] = entry;
    std::printf("  %-12s %-4s%s  %s\n", name.c_str(), (flags & IFF_UP) ? "up" : "down",
                (flags & IFF_LOOPBACK) ? " loopback" : "", addresses.c_str());
  }
}

// Each built transport, whether it can be created here (a one-rank probe with an
// in-memory store; nothing leaves the process, nothing waits for a peer) and what it
// reports about the host.
void printTransports() {
  TransportContext ctx;
  ctx.rank = 0;
  ctx.nranks = 1;
  ctx.hostId = "collie-info";
  ctx.jobKey = "collie-info/" + std::to_string(getpid());
  ctx.store = makeInMemoryStore();
  ctx.timeout = std::chrono::milliseconds(1000);
  Result<DeviceKnobs> device = DeviceKnobs::parse(Config::fromEnvironment());
  Result<DeviceRuntime*> runtime = device.isOk() ? selectDeviceRuntime(device->emulation)
                                                 : Result<DeviceRuntime*>(device.status());
  ctx.deviceRuntime = runtime.isOk() ? *runtime : nullptr;
  for (const TransportFactory& factory : TransportRegistry::instance().factories()) {
    Result<std::unique_ptr<Transport>> probe = factory.create(ctx);
    std::string state = probe.isOk() ? "usable" : "unavailable: " + probe.status().message();
    if (probe.isOk() && factory.offersDeviceWindows) {
      const DeviceWindowProvider* windows = (*probe)->deviceWindows();
      state = windows != nullptr && windows->available()
                  ? "usable: device windows for ranks of one host"
                  : "unavailable: no device runtime (no CUDA device; no device emulation "
                    "selected, or none built in): device buffers would be staged through host "
                    "memory";
    }
    std::printf("  %-8s priority %-4d %s\n", factory.name.c_str(), factory.priority, state.c_str());
    std::string details = factory.describe != nullptr ? factory.describe() : "";
    if (!details.empty() && (probe.isOk() || details != probe.status().message())) {
      std::istringstream lines(details);
      for (std::string line; std::getline(lines, line);) std::printf("      %s\n", line.c_str());
    }
  }
}

// The device emulation is a library of its own, for tests (core/device/device_runtime.h):
// say whether this build or installation has it.
void printDeviceEmulation() {
  Result<DeviceRuntime*> emulated = emulatedDeviceRuntime();
  if (emulated.isOk()) {
    std::printf(
        "device emulation: available (%s); COLLIE_DEVICE_EMULATION=1 runs the device path on "
        "it where no GPU is present (tests)\n",
        kDeviceEmulationLibrary);
  } else {
    std::printf("device emulation: unavailable: %s\n", emulated.status().message().c_str());
  }
}

// CUDA devices through the driver library, loaded at run time so that the tool runs
// (and says so) on machines without a GPU.
void printCudaDevices(bool built) {
  std::printf("CUDA: %s\n", built ? "built with CUDA kernels" : "not built with CUDA");
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::printf("  no CUDA driver (libcuda.so.1 not found): no devices\n");
    return;
  }
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  using GetFn = int (*)(int*, int);
  using NameFn = int (*)(char*, int, int);
  using MemFn = int (*)(size_t*, int);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(lib, "cuDeviceGetCount"));
  auto get = reinterpret_cast<GetFn>(dlsym(lib, "cuDeviceGet"));
  auto name = reinterpret_cast<NameFn>(dlsym(lib, "cuDeviceGetName"));
  auto mem = reinterpret_cast<MemFn>(dlsym(lib, "cuDeviceTotalMem_v2"));
  int n = 0;
  if (init == nullptr || count == nullptr || get == nullptr || name == nullptr || init(0) != 0 ||
      count(&n) != 0) {
    std::printf("  the CUDA driver did not initialise: no usable devices\n");
    dlclose(lib);
    return;
  }
  if (n == 0) std::printf("  no CUDA devices\n");
  for (int i = 0; i < n; ++i) {
    int device = 0;
    char text[256] = {};
    size_t bytes = 0;
    if (get(&device, i) != 0 || name(text, sizeof text - 1, device) != 0) continue;
    if (mem != nullptr) mem(&bytes, device);
    std::printf("  %d: %s, %.1f GiB\n", i, text, bytes / double(1u << 30));
  }
  dlclose(lib);
}

}  // namespace

CLI::App* addInfoCommand(CLI::App& app, bool* tuning) {
  CLI::App* cmd = app.add_subcommand("info",
                                     "Print version, build features, transports, network "
                                     "interfaces and configuration");
  cmd->add_flag("--tuning", *tuning, "print the tuner's constants and decision table instead");
  return cmd;
}

namespace {
// A transport's team collectives, for communicators of 2 and 4 ranks on this host: every
// algorithm's predicted time per all-reduce size and the tuner's plan, which
// the table above (ranks on several hosts, no team) does not show.
std::string teamTables(const Config& config, const TransportFactory& factory, TuneLimits limits,
                       const TuneConstants& constants) {
  if (factory.teamOffer == nullptr) return "";
  std::string out;
  for (int n : {2, 4}) {
    limits.team = factory.teamOffer(config, n);
    if (!limits.team.any()) continue;
    out += "\n" + factory.name + " team collectives, " + std::to_string(n) +
           " ranks on this host (board up to " + std::to_string(limits.team.boardBytes) +
           " bytes per rank; plan: the team step's algorithms in the order tried, then the\n"
           "schedule it falls back to when every rank declines them):\n" +
           algorithmTable(limits, constants, n);
  }
  return out;
}

// The decision table a communicator configured by this environment would plan with.
int printTuning() {
  const Config config = Config::fromEnvironment();
  Result<CommunicatorKnobs> communicator = CommunicatorKnobs::parse(config);
  Result<EngineKnobs> engine = EngineKnobs::parse(config);
  Result<TuneKnobs> tune = TuneKnobs::parse(config);
  for (const Status& status : {communicator.status(), engine.status(), tune.status()}) {
    if (!status.isOk()) {
      std::fprintf(stderr, "collie info --tuning: %s\n", status.message().c_str());
      return 1;
    }
  }
  TuneLimits limits;
  limits.maxChannels = communicator->nchannels;
  limits.channelsFixed = communicator->channelsFixed;
  limits.chunkBytes = communicator->chunkBytes;
  limits.forced = communicator->algorithm;
  limits.hostStage = communicator->hostStage;
  limits.measuredCmaMaxBytes = engine->adaptMaxBytes;
  bool printed = false;
  for (const TransportFactory& factory : TransportRegistry::instance().factories()) {
    TuneConstants constants;
    if (!storedTuneConstants(*tune, factory.name, &constants)) continue;
    std::printf("== transport %s\n%s%s\n", factory.name.c_str(),
                decisionTable(limits, constants).c_str(),
                teamTables(config, factory, limits, constants).c_str());
    printed = true;
  }
  if (!printed) {
    std::printf("== no probe cached yet (a communicator probes at creation); model defaults\n%s",
                decisionTable(limits, TuneConstants{}).c_str());
    for (const TransportFactory& factory : TransportRegistry::instance().factories()) {
      std::printf("%s", teamTables(config, factory, limits, TuneConstants{}).c_str());
    }
  }
  return 0;
}
}  // namespace

int runInfo(bool tuning) {
  if (tuning) return printTuning();
  if (startedByLauncher()) return printJobTopology();
  std::printf("collie %s\n", COLLIE_VERSION);
  std::string features = builtinFeatures();
  std::printf("build features: %s\n", features.empty() ? "(none)" : features.c_str());
  std::printf("transports (in order of preference; shm within a host, then the first usable):\n");
  printTransports();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::printf("hostname: %s\n", host);
  std::printf("network interfaces:\n");
  printInterfaces();
  const Config config = Config::fromEnvironment();
  Result<NetKnobs> net = NetKnobs::parse(config);
  const std::string congestion =
      net.isOk() ? net->tcpCongestion : "(" + net.status().message() + ")";
  std::printf("TCP congestion control: system default %s; tcp's and UCX's sockets: %s\n",
              net::systemCongestionControl().c_str(),
              net::setsCongestionControl(congestion) ? congestion.c_str() : "the system default");
  printCudaDevices((" " + features + " ").find(" cuda ") != std::string::npos);
  printDeviceEmulation();
  std::printf(
      "configuration from the environment, by component (value [source]; accepted values;\n"
      "Options::config overrides any knob per communicator except the process-wide ones):\n");
  int invalid = 0;
  for (const KnobTable* table : KnobRegistry::instance().tables()) {
    std::printf(" %s: %s\n", table->component.c_str(), table->about.c_str());
    for (const Knob& knob : table->knobs) {
      std::string value = config.display(knob.name);
      std::printf("  %-24s = %-10s [%s]%s%s\n      %s\n      accepts %s\n", knob.name,
                  value.empty() ? "\"\"" : value.c_str(), config.sourceName(knob.name).c_str(),
                  knob.mustMatch ? " every rank alike" : "",
                  knob.processWide ? " process-wide" : "", knob.meaning, knobRange(knob).c_str());
      const Config::Entry* entry = config.find(knob.name);
      if (entry != nullptr && !entry->accepted) {
        ++invalid;
        std::printf("      INVALID: %s\n", checkKnobValue(knob, entry->value).message().c_str());
      }
    }
  }
  if (invalid > 0) {
    std::printf("%d knob(s) INVALID: communicators refuse to start until they are fixed\n",
                invalid);
  }
  return 0;
}

}  // namespace collie::tools
