// IbConnection: one (peer, channel) of the ibverbs transport over an RC queue pair.
//
// Receiver-driven rendezvous, as NCCL's net_ib does it:
//  1. postRecv() registers the user's buffer (MrCache) and sends the sender a
//     clear-to-send control message {seq, addr, rkey, tag, length} (IBV_WR_SEND).
//  2. The sender matches clear-to-sends with its sends in FIFO order (RC delivers in
//     order). Tag and length equal: it RDMA-writes the payload straight into the
//     receiver's buffer, the last write carrying the sequence number as immediate
//     data. They differ: it writes nothing, sends a mismatch message with its own tag
//     and length, and both sides fail with kMismatch naming the peer.
//  3. The receiver completes on IBV_WC_RECV_RDMA_WITH_IMM after checking the
//     immediate (sequence) and byte count.
// Every SEND and WRITE_WITH_IMM consumes one receive WR on the peer. Flow control is
// credit-based: each side pre-posts kRecvDepth receive WRs and may only send while it
// holds credits; reposted WRs are returned to the peer piggybacked on control
// messages, or in an explicit credit message once half the window is owed (one credit
// is reserved for that message so the two sides can never deadlock).
//
// Thread safety: one thread at a time (see core/transport/transport.h).
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <deque>
#include <memory>
#include <vector>

#include "core/net/handshake.h"
#include "core/transport/transport.h"
#include "transports/ibverbs/ib_device.h"
#include "transports/ibverbs/ib_mr_cache.h"

namespace collie::ib {

inline constexpr int kRecvDepth = 64;
inline constexpr int kSendDepth = 256;

// Shared by the transport and all its connections.
struct IbShared {
  std::unique_ptr<IbPort> port;
  ibv_comp_channel* channel = nullptr;
  std::unique_ptr<MrCache> mrs;
  ~IbShared();
};

enum class CtlKind : uint32_t {
  kHello = 1,
  kClearToSend = 2,
  kMismatch = 3,
  kCredit = 4,
  kHelloProof = 5
};

struct CtlMsg {
  uint32_t kind = 0;
  uint32_t seq = 0;
  uint64_t addr = 0;  // kHello: first half of the nonce; kHelloProof: proof bytes 0-7
  uint32_t rkey = 0;
  uint32_t credits = 0;  // receive WRs the sender reposted since its last message
  uint64_t tag = 0;      // kHello: second half of the nonce; kHelloProof: proof bytes 8-15
  uint64_t bytes = 0;    // kHello: the job-key hash; kHelloProof: proof bytes 16-23
};
static_assert(sizeof(CtlMsg) == 40);

// What the peer needs to connect to one queue pair (exchanged through the store).
struct QpInfo {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  uint8_t gid[16] = {};
};

class IbConnection final : public Connection {
 public:
  static Result<std::unique_ptr<IbConnection>> create(std::shared_ptr<IbShared> shared, int peer,
                                                      int channel);
  ~IbConnection() override;

  QpInfo localInfo() const { return local_; }
  // INIT -> RTR -> RTS against the peer's queue pair.
  Status connectTo(const QpInfo& remote);
  // The handshake, in three calls so that the transport makes every call on every
  // connection before the next (no rank waits on a peer that waits on a third): the
  // symmetric challenge-response of core/net/handshake.h, which never sends the secret.
  // 1. Sends this rank's fresh nonce and the job-key hash.
  Status sendHelloNonce(const net::Nonce& mine, uint64_t jobHash);
  // 2. Waits (with the deadline) for the peer's nonce, then sends this rank's proof
  //    (net::peerProof, its first 24 bytes). Unauthenticated when the job differs.
  Status sendHelloProof(const JobSecret& secret, int myRank, uint64_t jobHash,
                        const net::Nonce& mine, Deadline deadline);
  // 3. Waits for the peer's proof and checks it; Unauthenticated when it does not hold.
  Status checkHelloProof(const JobSecret& secret, int myRank, uint64_t jobHash,
                         const net::Nonce& mine, Deadline deadline);

  Status postSend(const void* data, size_t bytes, uint64_t tag, Completion* done) override;
  Status postRecv(void* data, size_t bytes, uint64_t tag, Completion* done) override;
  Status progress(bool* progressed) override;
  int peer() const override { return peer_; }

 private:
  struct Op {
    uint8_t* data = nullptr;
    size_t bytes = 0;
    uint64_t tag = 0;
    uint32_t seq = 0;
    Completion* done = nullptr;
    ibv_mr* mr = nullptr;
    bool ctsSent = false;  // receive: clear-to-send went out
    bool written = false;  // send: writes posted
    bool finished = false;
  };

  IbConnection(std::shared_ptr<IbShared> shared, int peer, int channel)
      : shared_(std::move(shared)), peer_(peer), channel_(channel) {}
  Status postReceiveSlot(int slot);
  Status sendCtl(CtlMsg msg, bool creditMessage = false);
  Status writeData(Op& op, const CtlMsg& cts);
  Status handleCompletion(const ibv_wc& wc, bool* progressed);
  Status handleCtl(const CtlMsg& msg);
  Status fail(Status status);

  std::shared_ptr<IbShared> shared_;
  int peer_;
  int channel_;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  QpInfo local_;
  ibv_mr* ctlMr_ = nullptr;
  std::array<CtlMsg, kRecvDepth> recvSlots_{};
  std::array<CtlMsg, kSendDepth> sendSlots_{};
  int nextSendSlot_ = 0;
  int sendCredits_ = kRecvDepth;
  int creditsOwed_ = 0;
  int sendsInFlight_ = 0;
  uint32_t sendSeq_ = 0;
  uint32_t recvSeq_ = 0;
  std::deque<Op> sends_;
  std::deque<Op> recvs_;
  std::deque<CtlMsg> clearToSends_;  // arrived before their send was posted
  Status awaitCtl(const bool& seen, const char* what, Deadline deadline);

  bool helloSeen_ = false;
  CtlMsg hello_{};
  bool proofSeen_ = false;
  CtlMsg proof_{};
  Status broken_;
};

}  // namespace collie::ib
