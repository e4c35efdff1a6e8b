// The transport seam: how bytes move between two ranks.
//
// A Transport is created once per communicator by its factory. connect() builds one
// Connection per (peer, channel) for the peers this transport was chosen for. A
// Connection carries whole messages in FIFO order in each direction: the n-th
// postSend on one side matches the n-th postRecv on the other side of the same
// (peer, channel). Every message carries a 64-bit tag (the collective's fingerprint)
// and its length; the receiver checks both against what it posted and fails the
// receive with kMismatch (naming the peer) when they differ, before any byte of a
// mismatched message is written to the receive buffer.
//
// Operations are asynchronous: post*() queues the operation and returns at once; the
// operation advances only inside progress() and completes by setting its Completion.
// Buffers must stay valid and unmodified (send) or untouched (recv) until then.
// Zero-length messages are legal and are still matched and tag-checked.
//
// A transport may also reduce a message as it lands (postRecvReduce, when
// reducesOnReceive()): instead of storing the incoming bytes it combines them with a
// local vector, straight out of its own receive buffers, which saves the engine a copy
// into staging and a pass over it. The same matching, tag check and ordering apply.
//
// Thread safety: a Transport and its Connections are used by one thread at a time
// (the communicator's progress thread) except where a method says otherwise.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collie/status.h"
#include "collie/store.h"
#include "collie/unique_id.h"
#include "core/config/config.h"
#include "core/kernel/reduce_backend.h"
#include "core/plan/team_step.h"

namespace collie {

class DeviceRuntime;         // core/device/device_runtime.h
class DeviceWindowProvider;  // core/transport/device_windows.h
class TeamBoard;             // core/transport/team_board.h

// Set by a transport when an operation ends. `status` is OK on success. A receive
// that failed with kMismatch because the peer's message carried another tag also
// records that tag (peerTag, hasPeerTag) so that the engine can name the fields of the
// collective the ranks disagree on.
struct Completion {
  bool done = false;
  bool hasPeerTag = false;
  uint64_t peerTag = 0;
  Status status;
  void complete(Status s = Status()) {
    status = std::move(s);
    done = true;
  }
  void mismatch(uint64_t tagOfPeer) {
    peerTag = tagOfPeer;
    hasPeerTag = true;
  }
};

// What a transport can do (UCX-style capability flags); the planner may read these.
struct TransportCaps {
  bool deviceMemory = false;  // accepts CUDA device pointers
  bool oneSidedWrite = false;
  bool sameHostOnly = false;
  size_t maxMessageBytes = SIZE_MAX;
  // Channels (connections per peer) beyond this many only add messages on this
  // transport's wire, not bandwidth; 0: no such limit. The engine plans with fewer
  // channels when every rank's transports agree (see core/engine/tune_probe.h).
  int usefulChannels = 0;
  // connect() refuses a peer that does not prove ctx.secret (kUnauthenticated naming
  // it). False where the medium admits only this job otherwise (shm: segment names come
  // from the secret-protected store, /dev/shm permissions do the rest).
  bool authenticatesPeers = false;
};

// What postRecvReduce() does with the incoming elements b[i]: dst[i] = op(own[i], b[i])
// (op(b[i], own[i]) when incomingFirst), with `kernels`, `divisor` and the aliasing
// rules of ReduceBackend::reduce (dst may be own). dst and own must stay valid, and own
// unmodified, until the receive completes.
struct ReduceOnReceive {
  uint8_t* dst = nullptr;
  const uint8_t* own = nullptr;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int divisor = 0;
  bool incomingFirst = false;
  const ReduceBackend* kernels = nullptr;
};

class Connection {
 public:
  virtual ~Connection() = default;
  virtual Status postSend(const void* data, size_t bytes, uint64_t tag, Completion* done) = 0;
  virtual Status postRecv(void* data, size_t bytes, uint64_t tag, Completion* done) = 0;
  // Whether postRecvReduce() works on this connection.
  virtual bool reducesOnReceive() const { return false; }
  // A receive of `bytes` (a whole number of elements) that reduces the message into
  // reduce.dst as described at ReduceOnReceive instead of storing it. Matching, the tag
  // and length check (nothing reaches dst for a mismatched message) and completion are
  // those of postRecv().
  virtual Status postRecvReduce(const ReduceOnReceive& reduce, size_t bytes, uint64_t tag,
                                Completion* done) {
    (void)reduce, (void)bytes, (void)tag, (void)done;
    return unsupported("this transport cannot reduce on receive");
  }
  // Advances queued operations without blocking. Sets *progressed when anything moved.
  // An error means the connection is broken (peer gone, bad data); the status names
  // the peer, and every pending operation on it has been completed with that error.
  virtual Status progress(bool* progressed) = 0;
  virtual int peer() const = 0;

  // One outcome per collective (the engine's rule, core/engine/executor.h). A rank that
  // fails collective `tag` calls abandon() on each connection before destroying it: the
  // transport leaves the peer a record saying so (with why.code()), best effort and
  // without blocking, and none where a message is half written (the peer then sees a
  // truncated message). A peer about to report `tag` a success asks abandoned(tag): an
  // error naming this connection's peer when such a record for `tag` is already here,
  // OK otherwise. Non-blocking and cheap (no system call): it looks only at bytes the
  // connection has already read. The defaults do nothing: a transport without records
  // gives no such guarantee (its peers still fail once the connection is closed, if
  // they wait for it).
  virtual void abandon(uint64_t tag, const Status& why) { (void)tag, (void)why; }
  virtual Status abandoned(uint64_t tag) const {
    (void)tag;
    return Status();
  }
};

// The launcher that started this process (`collie run`), as the shm transport names its
// segments after it.
struct LauncherScope {
  JobSecret secret{};  // the secret of the launcher's unique id
  int nodeRank = 0;    // this host's launcher among the job's hosts
};

// What a transport learns about the communicator when it is created.
struct TransportContext {
  int rank = 0;
  int nranks = 1;
  int nchannels = 1;
  std::string hostId;  // ranks with equal hostId share a host (and /dev/shm)
  std::string jobKey;  // unique per communicator; prefix for store keys, shm names
  JobSecret secret{};  // every connection between ranks must prove it
  std::shared_ptr<Store> store;
  // The communicator's COLLIE_TIMEOUT (its default when a test builds the context): the
  // deadline of connection setup and of every blocking wait the transport makes.
  std::chrono::milliseconds timeout{300'000};
  bool forced = false;  // the user forced this transport for every pair (COLLIE_TRANSPORT)
  // The communicator's device runtime (null when device buffers are not supported):
  // what a transport offering device windows allocates and maps them with.
  DeviceRuntime* deviceRuntime = nullptr;
  // Set when `collie run` started this process: the secret of its unique id and this
  // host's node rank, which name the job's shared-memory segments so that the launcher
  // can remove what a killed rank left (transports/shm/shm_names.h).
  std::optional<LauncherScope> launcher;
  // The communicator's configuration snapshot, never the environment: a transport parses
  // its own knob table from it when it is created (`ShmKnobs::parse`, ...), and the
  // lower layers' tables it shares (core/net/net_knobs.h, core/transport/wait_policy.h).
  // Values other components own come typed, in the fields above. Default-constructed:
  // every knob at its default.
  Config config;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual TransportCaps caps() const = 0;

  // Whether this transport can connect this rank to `peer` whose host id is given.
  virtual bool canConnect(int peer, const std::string& peerHostId) const = 0;

  // Connects to every peer in `peers` (sorted, without this rank) on every channel.
  // Called collectively: every rank calls it with the peers that chose this transport
  // for it, in the same order of transports. Returns connections indexed
  // [i * nchannels + channel] for peers[i]. Fails with Timeout naming the missing peer
  // when a peer does not show up before ctx.timeout.
  virtual Result<std::vector<std::unique_ptr<Connection>>> connect(
      const std::vector<int>& peers) = 0;

  // Blocks until any connection of this transport may be able to progress, or until
  // `maxWait` passed. May return early spuriously. Used after spinning found no work.
  virtual void waitForActivity(std::chrono::microseconds maxWait) = 0;

  // The transport's team board (core/transport/team_board.h: memory every rank maps, on
  // which core/team runs the team collectives), or null. Only meaningful after connect()
  // and only when this transport serves every peer of the communicator.
  virtual TeamBoard* teamBoard() { return nullptr; }

  // The transport's device windows (core/transport/device_windows.h), or null. Asked
  // right after create(), whether or not connect() was called: a transport may offer
  // device windows without carrying any host message (canConnect() false for all).
  virtual DeviceWindowProvider* deviceWindows() { return nullptr; }
};

// A transport's entry in the registry. Lower `priority` is tried first.
struct TransportFactory {
  std::string name;
  int priority = 100;
  Result<std::unique_ptr<Transport>> (*create)(const TransportContext& ctx) = nullptr;
  // Optional, for `collie info`: what this transport sees on this host (devices, wires),
  // one item per line; nullptr when there is nothing to add.
  std::string (*describe)() = nullptr;
  // The transport may offer device windows: it is created (for them) even when
  // COLLIE_TRANSPORT forces another transport for host messages.
  bool offersDeviceWindows = false;
  // Optional, for `collie info --tuning` and `collie sim`: the team offer
  // (core/plan/team_step.h) a communicator of `nranks` ranks, all on this host and served by
  // this transport alone, would get with `config`; nullptr when the transport has no
  // team collectives.
  TeamOffer (*teamOffer)(const Config& config, int nranks) = nullptr;
  // Optional, for `collie run`: once every rank a launcher started on this host is gone
  // (exited or killed), removes what those ranks left on the host that a live rank would
  // have removed itself (shm: the job's /dev/shm names); only what `scope` names, only
  // this user's. Returns the names removed. nullptr when the transport leaves nothing.
  std::vector<std::string> (*removeLauncherLeftovers)(const LauncherScope& scope) = nullptr;
};

// The ordered registry. Transports register through registerBuiltinTransports(), a
// function generated at build time from the transports that were configured, so core
// never names a concrete transport.
class TransportRegistry {
 public:
  static TransportRegistry& instance();
  void add(TransportFactory factory);
  // Sorted by priority.
  std::vector<TransportFactory> factories() const;
  const TransportFactory* find(const std::string& name) const;

 private:
  std::vector<TransportFactory> factories_;
};

// Defined by the generated file transports/builtin_transports.cc.
void registerBuiltinTransports(TransportRegistry& registry);

}  // namespace collie
