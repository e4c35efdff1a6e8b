#include "transports/shm/shm_transport.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "core/log/log.h"
#include "core/transport/wait_policy.h"
#include "transports/shm/shm_board.h"
#include "transports/shm/shm_connection.h"
#include "transports/shm/shm_knobs.h"
#include "transports/shm/shm_names.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define COLLIE_CPU_RELAX() _mm_pause()
#else
#define COLLIE_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace collie {
namespace {

using shm::FifoRef;
using shm::PeerState;
using shm::Segment;
using shm::ShmConnection;
using shm::ShmShared;

// The FIFOs of one segment together stay under this; larger jobs get smaller FIFOs.
constexpr uint64_t kMaxSegmentFifoBytes = uint64_t{64} << 20;
constexpr uint64_t kMinFifoBytes = 4096;
constexpr uint64_t kMinCappedFifoBytes = 64 * 1024;
constexpr auto kMaxSleep = std::chrono::milliseconds(100);

uint64_t floorPowerOfTwo(uint64_t v) {
  uint64_t p = 1;
  while (p <= v / 2) p *= 2;
  return p;
}

uint64_t chooseFifoBytes(const ShmKnobs& knobs, size_t fifos) {
  const int64_t configured = knobs.fifoBytes;
  uint64_t bytes = floorPowerOfTwo(std::clamp<uint64_t>(
      static_cast<uint64_t>(std::max<int64_t>(configured, 0)), kMinFifoBytes, uint64_t{1} << 30));
  if (fifos > 0 && bytes * fifos > kMaxSegmentFifoBytes) {
    uint64_t capped = std::max(kMinCappedFifoBytes, floorPowerOfTwo(kMaxSegmentFifoBytes / fifos));
    if (capped < bytes) {
      COLLIE_LOG(INFO, SHM) << "shm FIFOs capped at " << capped
                            << " bytes (COLLIE_BUFFSIZE=" << configured << ", " << fifos
                            << " FIFOs per rank)";
      bytes = capped;
    }
  }
  return bytes;
}

int openPidfd(int pid) {
#ifdef SYS_pidfd_open
  long fd = syscall(SYS_pidfd_open, pid, 0);
  return fd >= 0 ? static_cast<int>(fd) : -1;
#else
  return -1;
#endif
}

class ShmTransport final : public Transport {
 public:
  ShmTransport(const TransportContext& ctx, const ShmKnobs& knobs, const WaitKnobs& waitKnobs)
      : ctx_(ctx), knobs_(knobs), waitKnobs_(waitKnobs) {}

  const char* name() const override { return "shm"; }

  TransportCaps caps() const override {
    TransportCaps caps;
    caps.sameHostOnly = true;
    return caps;
  }

  bool canConnect(int peer, const std::string& peerHostId) const override {
    return peer != ctx_.rank && !ctx_.hostId.empty() && peerHostId == ctx_.hostId;
  }

  Result<std::vector<std::unique_ptr<Connection>>> connect(const std::vector<int>& peers) override;
  void waitForActivity(std::chrono::microseconds maxWait) override;
  TeamBoard* teamBoard() override { return board_.get(); }

 private:
  std::string storeKey(int rank) const { return ctx_.jobKey + "/shm/" + std::to_string(rank); }
  Status mapPeer(int peer, Deadline deadline);
  Status waitForAttach(const std::vector<int>& peers, Deadline deadline);
  // Publishes this rank's segment, maps every peer's, waits until every peer mapped ours.
  Status publishAndAttach(const std::vector<int>& peers, Deadline deadline);
  bool anyReady() const;

  TransportContext ctx_;
  const ShmKnobs knobs_;
  const WaitKnobs waitKnobs_;
  bool connected_ = false;
  std::shared_ptr<ShmShared> shared_;
  WaitPolicy wait_;                    // COLLIE_SHM_SPIN, adapted to ranks outnumbering CPUs
  std::unique_ptr<shm::Board> board_;  // when every rank of the job is local
};

Status ShmTransport::mapPeer(int peer, Deadline deadline) {
  Result<Bytes> value = ctx_.store->get(storeKey(peer), deadline);
  if (!value.isOk()) {
    if (value.status().code() == StatusCode::kTimeout) {
      return timeoutError("shm: rank " + std::to_string(peer) +
                              " did not publish its shared-memory segment before the deadline "
                              "(is it running and on this host? raise COLLIE_TIMEOUT if slow)",
                          peer);
    }
    return value.status().withContext("shm: reading rank " + std::to_string(peer) + "'s segment");
  }
  std::string text(value->begin(), value->end());
  size_t space = text.find(' ');
  if (space == std::string::npos) {
    return remoteError("shm: rank " + std::to_string(peer) + " published a malformed entry", peer);
  }
  shm::SegmentGeometry expected{peer, ctx_.nranks, ctx_.nchannels, 0};
  Result<std::unique_ptr<Segment>> seg =
      Segment::open(text.substr(0, space), text.substr(space + 1), expected);
  if (!seg.isOk()) return seg.status();
  const int slot = (*seg)->slotOf(ctx_.rank);
  if (slot < 0) {
    return remoteError("shm: rank " + std::to_string(peer) + " has no FIFO for rank " +
                           std::to_string(ctx_.rank) +
                           ": the ranks disagree on which pairs use shm",
                       peer);
  }
  for (int ch = 0; ch < ctx_.nchannels; ++ch) {
    (*seg)->fifoControl(slot, ch)->attached.store(1, std::memory_order_release);
  }
  auto state = std::make_unique<PeerState>();
  state->rank = peer;
  state->pid = (*seg)->header()->pid;
  const bool samePidNs = (*seg)->header()->pidNamespace == shm::currentPidNamespace() &&
                         (*seg)->header()->pidNamespace != 0;
  state->checkPid = samePidNs && state->pid > 0 && state->pid != getpid();
  if (state->checkPid) state->pidfd = openPidfd(state->pid);
  state->segment = std::move(*seg);
  shared_->peers.push_back(std::move(state));
  return Status();
}

Status ShmTransport::waitForAttach(const std::vector<int>& peers, Deadline deadline) {
  Segment& mine = *shared_->mine;
  for (int peer : peers) {
    const int slot = mine.slotOf(peer);
    for (int ch = 0; ch < ctx_.nchannels; ++ch) {
      while (mine.fifoControl(slot, ch)->attached.load(std::memory_order_acquire) == 0) {
        if (Clock::now() > deadline) {
          return timeoutError("shm: rank " + std::to_string(peer) + " did not map rank " +
                                  std::to_string(ctx_.rank) +
                                  "'s segment before the deadline (did it fail to start, or "
                                  "is it on another host with the same host id?)",
                              peer);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }
  return Status();
}

Status ShmTransport::publishAndAttach(const std::vector<int>& peers, Deadline deadline) {
  const std::string entry = shared_->mine->name() + " " + shared_->mine->nonceHex();
  COLLIE_RETURN_IF_ERROR(ctx_.store->set(storeKey(ctx_.rank), Bytes(entry.begin(), entry.end())));
  for (int peer : peers) COLLIE_RETURN_IF_ERROR(mapPeer(peer, deadline));
  return waitForAttach(peers, deadline);
}

Result<std::vector<std::unique_ptr<Connection>>> ShmTransport::connect(
    const std::vector<int>& peers) {
  if (connected_) return unsupported("shm: connect() may be called once per transport");
  connected_ = true;
  for (size_t i = 0; i < peers.size(); ++i) {
    if (peers[i] < 0 || peers[i] >= ctx_.nranks || peers[i] == ctx_.rank ||
        (i > 0 && peers[i] <= peers[i - 1])) {
      return invalidArgument("shm: connect() needs sorted distinct peer ranks other than " +
                             std::to_string(ctx_.rank));
    }
  }
  if (ctx_.nchannels < 1 || !ctx_.store) {
    return invalidArgument("shm: the transport context needs a store and nchannels >= 1");
  }
  const auto timeout = std::chrono::duration_cast<Clock::duration>(ctx_.timeout);
  const Deadline deadline = Clock::now() + timeout;
  std::vector<std::unique_ptr<Connection>> connections;
  shared_ = std::make_shared<ShmShared>(ctx_.rank);
  if (peers.empty()) return connections;

  const uint64_t fifoBytes = chooseFifoBytes(knobs_, peers.size() * ctx_.nchannels);
  Result<std::unique_ptr<Segment>> mine =
      Segment::create({ctx_.rank, ctx_.nranks, ctx_.nchannels, fifoBytes}, peers,
                      shm::jobScopeTag(ctx_.secret, ctx_.launcher));
  if (!mine.isOk()) return mine.status();
  shared_->mine = std::move(*mine);
  const Status attached = publishAndAttach(peers, deadline);
  // Every peer has it mapped, or connecting failed: either way the name goes now, not
  // when the transport is destroyed (a launcher may SIGTERM this rank before that).
  shared_->mine->unlink();
  if (!attached.isOk()) return attached;

  for (size_t i = 0; i < peers.size(); ++i) {
    PeerState* peer = shared_->peers[i].get();
    const Segment& theirs = *peer->segment;
    const int sendSlot = theirs.slotOf(ctx_.rank);
    const int recvSlot = shared_->mine->slotOf(peer->rank);
    for (int ch = 0; ch < ctx_.nchannels; ++ch) {
      FifoRef send{theirs.fifoControl(sendSlot, ch), theirs.fifoData(sendSlot, ch),
                   theirs.fifoBytes()};
      FifoRef recv{shared_->mine->fifoControl(recvSlot, ch), shared_->mine->fifoData(recvSlot, ch),
                   shared_->mine->fifoBytes()};
      connections.push_back(std::make_unique<ShmConnection>(shared_, peer, ch, send, recv));
    }
  }
  // Ranks outnumbering the CPUs (core/transport/wait_policy.h): waits yield from the start,
  // and the board's crossover moves, which every rank's board then agrees on (the
  // largest wins).
  wait_ = waitPolicyFor(knobs_.spin, static_cast<int>(peers.size()) + 1, cpusAvailable(waitKnobs_));
  const bool oversubscribed = wait_.oversubscribed;
  if (static_cast<int>(peers.size()) == ctx_.nranks - 1 && knobs_.oneShotMaxBytes > 0) {
    Result<std::unique_ptr<shm::Board>> board = shm::Board::connect(ctx_, knobs_, shared_, wait_);
    if (!board.isOk()) return board.status();
    board_ = std::move(*board);
  }
  COLLIE_LOG(INFO, SHM) << "rank " << ctx_.rank << ": shm connected to " << peers.size()
                        << " peer(s) x " << ctx_.nchannels << " channel(s), FIFO " << fifoBytes
                        << " bytes, spin " << wait_.busyPoll.count() << " us"
                        << (oversubscribed ? " (yielding: more ranks than CPUs)" : "");
  return connections;
}

bool ShmTransport::anyReady() const {
  for (const ShmConnection* conn : shared_->connections) {
    if (conn->mayProgress()) return true;
  }
  return false;
}

void ShmTransport::waitForActivity(std::chrono::microseconds maxWait) {
  if (maxWait.count() <= 0) return;
  if (!shared_ || !shared_->mine || shared_->connections.empty()) {
    std::this_thread::sleep_for(std::min<std::chrono::microseconds>(maxWait, kMaxSleep));
    return;
  }
  shared_->checkLiveness(false);
  if (anyReady()) return;
  const auto start = Clock::now();
  const auto spinEnd = start + std::min(wait_.busyPoll, maxWait);
  const auto pureEnd = start + wait_.pureSpin;
  while (true) {
    const auto now = Clock::now();
    if (now >= spinEnd) break;
    for (int i = 0; i < 32; ++i) COLLIE_CPU_RELAX();
    if (anyReady()) return;
    // Let a peer queued on this core run (see the engine's busy poll).
    if (now > pureEnd) sched_yield();
  }
  shm::SegmentHeader* header = shared_->mine->header();
  header->sleepers.fetch_add(1, std::memory_order_seq_cst);
  // Orders our `sleepers` increment before the FIFO reads in anyReady(); pairs with the
  // fence in ringDoorbell() (a peer either sees us sleeping or we see its data).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint32_t seen = header->doorbell.load(std::memory_order_seq_cst);
  if (!anyReady()) {
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(
        start + std::min<std::chrono::microseconds>(maxWait, kMaxSleep) - Clock::now());
    shm::waitDoorbell(header, seen, left.count());
  }
  header->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  shared_->checkLiveness(false);
}

Result<std::unique_ptr<Transport>> createShm(const TransportContext& ctx) {
  return createShmTransport(ctx);
}

// For `collie info --tuning` and `collie sim`: knobs a table does not declare (a bug the
// unit tests catch) offer nothing.
TeamOffer shmTeamOffer(const Config& config, int nranks) {
  Result<ShmKnobs> knobs = ShmKnobs::parse(config);
  Result<WaitKnobs> waitKnobs = WaitKnobs::parse(config);
  if (!knobs.isOk() || !waitKnobs.isOk()) return TeamOffer{};
  return shm::boardTeamOffer(*knobs, nranks, nranks > cpusAvailable(*waitKnobs));
}

// What the ranks of one `collie run` launcher left in /dev/shm: the names of their tag.
std::vector<std::string> removeShmLeftovers(const LauncherScope& scope) {
  return shm::removeJobShm(shm::launcherShmTag(scope.secret, scope.nodeRank));
}

}  // namespace

Result<std::unique_ptr<Transport>> createShmTransport(const TransportContext& ctx) {
  if (ctx.rank < 0 || ctx.rank >= ctx.nranks || ctx.jobKey.empty()) {
    return invalidArgument("shm: transport context needs 0 <= rank < nranks and a job key");
  }
  Result<ShmKnobs> knobs = ShmKnobs::parse(ctx.config);
  if (!knobs.isOk()) return knobs.status().withContext("shm transport");
  Result<WaitKnobs> waitKnobs = WaitKnobs::parse(ctx.config);
  if (!waitKnobs.isOk()) return waitKnobs.status().withContext("shm transport");
  return std::unique_ptr<Transport>(new ShmTransport(ctx, *knobs, *waitKnobs));
}

void registerShmTransport(TransportRegistry& registry) {
  TransportFactory factory{"shm", 100, &createShm};
  factory.teamOffer = &shmTeamOffer;
  factory.removeLauncherLeftovers = &removeShmLeftovers;
  registry.add(std::move(factory));
}

}  // namespace collie
