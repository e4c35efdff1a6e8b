// `collie perf --device 1`: the memory bound of each size, from a device copy measured
// in the same run.
//
// A device copy reads and writes every byte once, so its rate in bytes of memory
// traffic per second (2 x bytes / time) is what the device's memory sustains. The least
// traffic of a collective is every rank reading its input once and writing its output
// once; where k ranks share a device (one GPU under MPS) that device carries k ranks'
// traffic: 4S bytes for a 2-rank all-reduce of S bytes on one GPU, 8S for 4 ranks, 2S
// per GPU when each rank has its own. The bound of a size is the time the busiest device
// needs for its ranks' traffic at its copy's rate; a row's fraction of the bound is that
// time over the measured time (1.0: at the memory's speed). Links between devices
// (NVLink) are not in the bound: it is the memory's alone.
//
// Bounds are given for all-reduce, reduce-scatter, all-gather and all-to-all, whose
// ranks all read and write their whole buffers; the rooted collectives get none.
//
// Pure functions, and the copy measurement (runs on the caller's thread).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "collie/status.h"
#include "collie/types.h"
#include "core/device/device_runtime.h"
#include "tools/perf_args.h"
#include "tools/perf_report.h"

namespace collie::tools {

// One device as the ranks saw it: its key (host, ordinal, visible devices), the copy
// rate its ranks measured (the fastest, each rank alone on it) and how many ranks use it.
struct DeviceShare {
  std::string key;
  double trafficBytesPerSec = 0;
  int ranks = 0;
};

struct DeviceBound {
  std::vector<DeviceShare> devices;
  size_t copyBytes = 0;  // bytes of each timed copy
};

// Waits for everything queued on `stream`, yielding between polls (no deadline: perf
// queues only copies there, which always finish).
Status drainStream(DeviceRuntime& runtime, DeviceStream stream);

// The copy's rate on `runtime`'s current device: the fastest of `reps` copies of `bytes`
// between two device buffers (after one unmeasured copy), in bytes of memory traffic
// (read + write) per second.
Result<double> measureDeviceCopy(DeviceRuntime& runtime, size_t bytes, int reps);

// Merges every rank's (key, rate) into devices: ranks with the same key share a device,
// whose rate is the fastest any of them measured.
DeviceBound groupDevices(const std::vector<std::pair<std::string, double>>& perRank,
                         size_t copyBytes);

// Whether `kind` gets a bound (every rank reads and writes its whole buffers).
bool hasDeviceBound(CollectiveKind kind);

// The bound of one size in microseconds: the busiest device's traffic at its rate.
double deviceBoundUs(const DeviceBound& bound, const PerfShape& shape, size_t elemSize);

// The '#' lines after the table: the copy's rate, the ranks per device and, per size,
// the bound and each placement's fraction of it.
std::string formatDeviceBound(const PerfArgs& args, const DeviceBound& bound,
                              const std::vector<PerfRow>& rows, const std::vector<double>& boundUs);

// The JSON of the bound: the devices, and per size its bound and fractions.
nlohmann::json deviceBoundJson(const DeviceBound& bound, const std::vector<PerfRow>& rows,
                               const std::vector<double>& boundUs);

}  // namespace collie::tools
