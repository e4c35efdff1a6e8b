// emulatedDeviceRuntime() (core/device/device_runtime.h) and the emulation's test hooks
// (emulated_runtime.h), in libcollie: the emulated runtime itself lives in
// libcollie_device_emulation.so, loaded here on first use and never unloaded.
#include <dlfcn.h>

#include <string>
#include <vector>

#include "core/device/device_runtime.h"
#include "kernels/cuda/emulation/emulated_runtime.h"

namespace collie {
namespace {

// The folder of the shared object that holds this code (libcollie), with a trailing
// '/', or "" when the loader cannot tell.
std::string ownFolder() {
  static const int anchor = 0;
  Dl_info info{};
  if (dladdr(&anchor, &info) == 0 || info.dli_fname == nullptr) return "";
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

Result<const DeviceEmulation*> load() {
  std::vector<std::string> candidates;
  const std::string folder = ownFolder();
  if (!folder.empty()) candidates.push_back(folder + kDeviceEmulationLibrary);
  candidates.push_back(kDeviceEmulationLibrary);  // LD_LIBRARY_PATH, the run path
  std::string tried;
  for (const std::string& path : candidates) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried += (tried.empty() ? "" : "; ") + std::string(why != nullptr ? why : path.c_str());
      continue;
    }
    auto entry = reinterpret_cast<DeviceEmulationEntry>(dlsym(handle, kDeviceEmulationEntry));
    const DeviceEmulation* emulation = entry != nullptr ? entry() : nullptr;
    if (emulation == nullptr || emulation->runtime == nullptr) {
      return internalError(path + " does not provide " + kDeviceEmulationEntry +
                           "; it is not the device emulation of this collie");
    }
    return emulation;
  }
  return notFound(
      "the device emulation is not built into this collie (" + tried +
      "); it is the component libcollie_device_emulation.so, built next to libcollie with the "
      "CMake option COLLIE_BUILD_DEVICE_EMULATION=ON (on with the tests) and never installed");
}

const Result<const DeviceEmulation*>& loaded() {
  static const Result<const DeviceEmulation*> emulation = load();
  return emulation;
}

}  // namespace

Result<DeviceRuntime*> emulatedDeviceRuntime() {
  const Result<const DeviceEmulation*>& emulation = loaded();
  if (!emulation.isOk()) return emulation.status();
  return (*emulation)->runtime;
}

uint64_t emulatedKernelLaunches() {
  const Result<const DeviceEmulation*>& emulation = loaded();
  return emulation.isOk() ? (*emulation)->kernelLaunches() : 0;
}

uint64_t emulatedCopies() {
  const Result<const DeviceEmulation*>& emulation = loaded();
  return emulation.isOk() ? (*emulation)->copies() : 0;
}

}  // namespace collie
