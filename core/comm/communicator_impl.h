// Communicator::Impl: everything a Communicator holds, kept out of the public header
// so that changing it changes neither the size nor the layout of the public class
// (the ABI of libcollie.so and of the libnccl.so.2 drop-in). The public class holds one
// pointer to it; tests/install/abi_check.sh builds a consumer against the installed
// headers and runs it on a library built with COLLIE_ABI_CHECK_PADDING, which adds a
// member here.
//
// Its members are set once by Communicator::create (core/comm/communicator_create.cc) and
// createFromEnvironment/shrink (the store server, the rendezvous file), then only read,
// except the split and shrink counters, which the owning rank's calls to split() and
// shrink() advance (those calls are collective, so they are not made concurrently).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "collie/communicator.h"
#include "core/comm/topology.h"
#include "core/config/config.h"
#include "core/device/device_comm.h"
#include "core/device/device_knobs.h"
#include "core/device/device_staging.h"
#include "core/engine/engine.h"
#include "core/transport/device_windows.h"

namespace collie {

struct Communicator::Impl {
#ifdef COLLIE_ABI_CHECK_PADDING
  // First, so that every other member moves: a consumer that depended on this layout
  // would read the wrong bytes.
  char abiCheckPadding[64] = {};
#endif
  int rank = 0;
  int nranks = 1;
  std::unique_ptr<Engine> engine;
  Topology topology;  // hosts and local ranks of this communicator, from create
  // The device path: kernels over IPC when every rank shares a host (device), else
  // staging through host memory (staging); both null without a device runtime.
  DeviceRuntime* deviceRuntime = nullptr;
  // Whether a buffer can be device memory at all: a device runtime, or a CUDA device the
  // runtime did not take. False on a host without one, so that every collective's
  // buffer check costs a load instead of two calls into the CUDA probe.
  bool devicePointersPossible = false;
  int deviceOrdinal = -1;  // the device current at creation; -1 without a device runtime
  std::unique_ptr<DeviceComm> device;
  std::unique_ptr<DeviceStaging> staging;
  // Kept for split() and shrink(): the job id, its store and this communicator's
  // configuration snapshot (defaults, environment and Options at creation).
  UniqueId id;
  std::shared_ptr<Store> store;
  Config config;
  int splits = 0;
  int shrinks = 0;
  // Set when this rank hosts the job's rendezvous store (torchrun, mpirun starts).
  std::shared_ptr<StoreServer> storeServer;
  std::string cleanupFile;  // removed at destruction (the rendezvous file of rank 0)

  // Communicator::create once the configuration is resolved (communicator_create.cc): joins the
  // job `id` as `rank` of `nranks` with the snapshot `config` (validated) over `store`
  // (null: the TCP store the unique id names). Used by create, createFromEnvironment,
  // split and shrink.
  static Result<std::unique_ptr<Communicator>> create(const UniqueId& id, int rank, int nranks,
                                                      const Config& config,
                                                      std::shared_ptr<Store> store);

  // Argument checks shared by the collectives: OK, or InvalidArgument/Unsupported
  // naming `what`, this rank and the bad argument. `op` and `root` may be null (not
  // checked).
  Status check(const char* what, const void* send, const void* recv, size_t count, DataType dtype,
               const ReduceOp* op, const int* root) const;
  Status checkPeer(const char* what, int peer) const;
  bool isDeviceBuffer(const void* ptr) const;
  // An all-to-all's buffers: apart, or in place (send == recv) on host memory.
  Status checkInPlace(const char* what, int rank, const void* send, size_t sendBytes,
                      const void* recv, size_t recvBytes) const;
  // Sets up device or staging from deviceRuntime, engine and the windows (null: none
  // opened); nothing without a device runtime. Part of create (communicator_create.cc).
  Status openDevicePath(const EngineConfig& config, const DeviceKnobs& knobs,
                        std::unique_ptr<DeviceWindows> windows);
  // Queues a checked collective on the engine, or on the device path when its buffers
  // are device memory. `p2pTag`: a send's or receive's user tag (Engine::submit).
  Result<Work> submit(const CollectiveArgs& args, const void* send, void* recv,
                      void* stream = nullptr, std::optional<int64_t> p2pTag = std::nullopt);
  // Communicator::send and recv (kind kSend or kRecv), tagged or not: checked, then
  // submitted.
  Result<Work> pointToPoint(CollectiveKind kind, void* buf, size_t count, DataType dtype, int peer,
                            std::optional<int64_t> tag);
  // Sends and receives on device buffers (Communicator::sendRecv, or one send or
  // receive): checked here, then DeviceComm::submitPointToPoint on `stream`.
  Result<Work> devicePointToPoint(const std::vector<PointToPoint>& ops, void* stream);
  // Reads a premulsum factor that lives in device memory (ReduceScalar::device) into
  // its bytes, synchronously, for a collective that runs no multiply kernel.
  Status readDeviceScalar(ReduceScalar* scalar, DataType dtype) const;
};

// kPreMulSum needs a scalar and no other op takes one: InvalidArgument naming `what`
// and `rank` otherwise.
Status checkScalar(const char* what, int rank, ReduceOp op, const ReduceScalar& scalar);

}  // namespace collie
