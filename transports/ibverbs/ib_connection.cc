#include "transports/ibverbs/ib_connection.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "core/net/handshake.h"
#include "core/transport/message_check.h"

namespace collie::ib {
namespace {

constexpr uint64_t kRecvWr = uint64_t{1} << 62;
constexpr uint64_t kCtlWr = uint64_t{2} << 62;
constexpr uint64_t kDataWr = uint64_t{3} << 62;
constexpr uint64_t kWrKindMask = uint64_t{3} << 62;
constexpr size_t kMaxWrite = size_t{1} << 30;

}  // namespace

IbShared::~IbShared() {
  mrs.reset();
  if (channel != nullptr) ibv_destroy_comp_channel(channel);
}

Result<std::unique_ptr<IbConnection>> IbConnection::create(std::shared_ptr<IbShared> shared,
                                                           int peer, int channel) {
  std::unique_ptr<IbConnection> c(new IbConnection(shared, peer, channel));
  IbPort& port = *shared->port;
  c->cq_ = ibv_create_cq(port.context, kRecvDepth + kSendDepth, nullptr, shared->channel, 0);
  if (c->cq_ == nullptr) return systemError("ibverbs: ibv_create_cq", errno);
  ibv_req_notify_cq(c->cq_, 0);
  ibv_qp_init_attr init{};
  init.send_cq = c->cq_;
  init.recv_cq = c->cq_;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = kSendDepth;
  init.cap.max_recv_wr = kRecvDepth;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  c->qp_ = ibv_create_qp(port.pd, &init);
  if (c->qp_ == nullptr) return systemError("ibverbs: ibv_create_qp", errno);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = static_cast<uint8_t>(port.port);
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  if (ibv_modify_qp(c->qp_, &attr,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    return systemError("ibverbs: queue pair to INIT", errno);
  }
  // The control slots live in this object (heap, never moves): one registration.
  auto* begin = reinterpret_cast<uint8_t*>(c->recvSlots_.data());
  auto* end = reinterpret_cast<uint8_t*>(c->sendSlots_.data() + kSendDepth);
  // An int, not the enum: verbs.h's ibv_reg_mr macro ands it with another enum's value.
  c->ctlMr_ = ibv_reg_mr(port.pd, begin, end - begin, static_cast<int>(IBV_ACCESS_LOCAL_WRITE));
  if (c->ctlMr_ == nullptr) return systemError("ibverbs: registering control slots", errno);
  for (int slot = 0; slot < kRecvDepth; ++slot) COLLIE_RETURN_IF_ERROR(c->postReceiveSlot(slot));
  c->local_.qpn = c->qp_->qp_num;
  c->local_.psn = std::random_device{}() & 0xffffff;
  c->local_.lid = port.lid;
  std::memcpy(c->local_.gid, port.gid.raw, 16);
  return c;
}

IbConnection::~IbConnection() {
  for (Op& op : sends_) shared_->mrs->release(op.mr);
  for (Op& op : recvs_) shared_->mrs->release(op.mr);
  if (qp_ != nullptr) ibv_destroy_qp(qp_);
  if (cq_ != nullptr) ibv_destroy_cq(cq_);
  if (ctlMr_ != nullptr) ibv_dereg_mr(ctlMr_);
}

Status IbConnection::connectTo(const QpInfo& remote) {
  const IbPort& port = *shared_->port;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = port.mtu;
  attr.dest_qp_num = remote.qpn;
  attr.rq_psn = remote.psn;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = static_cast<uint8_t>(port.port);
  attr.ah_attr.dlid = remote.lid;
  if (port.ethernet || remote.lid == 0) {
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, remote.gid, 16);
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(port.gidIndex);
    attr.ah_attr.grh.hop_limit = 255;
  }
  if (ibv_modify_qp(qp_, &attr,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
    return systemError("ibverbs: queue pair to rank " + std::to_string(peer_) + " to RTR", errno);
  }
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.sq_psn = local_.psn;
  attr.max_rd_atomic = 1;
  if (ibv_modify_qp(qp_, &attr,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
    return systemError("ibverbs: queue pair to rank " + std::to_string(peer_) + " to RTS", errno);
  }
  return Status();
}

Status IbConnection::postReceiveSlot(int slot) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(&recvSlots_[slot]), sizeof(CtlMsg), ctlMr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = kRecvWr | static_cast<uint64_t>(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (ibv_post_recv(qp_, &wr, &bad) != 0) return systemError("ibverbs: ibv_post_recv", errno);
  return Status();
}

Status IbConnection::sendCtl(CtlMsg msg, bool creditMessage) {
  // One credit stays reserved for credit messages (see the header).
  if (sendCredits_ < (creditMessage ? 1 : 2) || sendsInFlight_ >= kSendDepth - 1) {
    return Status(StatusCode::kTimeout, "no credit");  // caller retries later
  }
  msg.credits = static_cast<uint32_t>(creditsOwed_);
  creditsOwed_ = 0;
  int slot = nextSendSlot_;
  nextSendSlot_ = (nextSendSlot_ + 1) % kSendDepth;
  sendSlots_[slot] = msg;
  ibv_sge sge{reinterpret_cast<uintptr_t>(&sendSlots_[slot]), sizeof(CtlMsg), ctlMr_->lkey};
  ibv_send_wr wr{};
  wr.wr_id = kCtlWr | static_cast<uint64_t>(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(qp_, &wr, &bad) != 0) return systemError("ibverbs: ibv_post_send", errno);
  --sendCredits_;
  ++sendsInFlight_;
  return Status();
}

Status IbConnection::writeData(Op& op, const CtlMsg& cts) {
  size_t chunks = op.bytes == 0 ? 1 : (op.bytes + kMaxWrite - 1) / kMaxWrite;
  if (sendCredits_ < 2 || sendsInFlight_ + static_cast<int>(chunks) >= kSendDepth - 1) {
    return Status(StatusCode::kTimeout, "no credit");
  }
  for (size_t i = 0; i < chunks; ++i) {
    size_t offset = i * kMaxWrite;
    size_t length = std::min(kMaxWrite, op.bytes - offset);
    ibv_sge sge{};
    ibv_send_wr wr{};
    if (length > 0) {
      sge = ibv_sge{reinterpret_cast<uintptr_t>(op.data + offset), static_cast<uint32_t>(length),
                    op.mr->lkey};
      wr.sg_list = &sge;
      wr.num_sge = 1;
    }
    bool last = i + 1 == chunks;
    wr.wr_id = kDataWr | op.seq;
    wr.opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.imm_data = htonl(op.seq);
    wr.send_flags = last ? IBV_SEND_SIGNALED : 0;
    wr.wr.rdma.remote_addr = cts.addr + offset;
    wr.wr.rdma.rkey = cts.rkey;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp_, &wr, &bad) != 0) return systemError("ibverbs: RDMA write", errno);
  }
  --sendCredits_;  // only the write with immediate consumes a receive WR
  ++sendsInFlight_;
  op.written = true;
  return Status();
}

Status IbConnection::fail(Status status) {
  if (broken_.isOk()) broken_ = std::move(status);
  for (auto* queue : {&sends_, &recvs_}) {
    for (Op& op : *queue) {
      shared_->mrs->release(op.mr);
      op.mr = nullptr;
      if (!op.done->done) op.done->complete(broken_);
    }
    queue->clear();
  }
  // Stop the peer from writing into buffers we no longer own. Not on a mismatch: no
  // write is coming then, and the error state would flush the mismatch notice to the
  // peer before it left.
  if (broken_.code() != StatusCode::kMismatch) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(qp_, &attr, IBV_QP_STATE);
  }
  return broken_;
}

Status IbConnection::postSend(const void* data, size_t bytes, uint64_t tag, Completion* done) {
  if (!broken_.isOk()) return broken_;
  Op op{static_cast<uint8_t*>(const_cast<void*>(data)), bytes, tag, sendSeq_++, done};
  if (bytes > 0) {
    Result<ibv_mr*> mr = shared_->mrs->acquire(data, bytes);
    if (!mr.isOk()) return mr.status();
    op.mr = *mr;
  }
  sends_.push_back(op);
  return Status();
}

Status IbConnection::postRecv(void* data, size_t bytes, uint64_t tag, Completion* done) {
  if (!broken_.isOk()) return broken_;
  Op op{static_cast<uint8_t*>(data), bytes, tag, recvSeq_++, done};
  if (bytes > 0) {
    Result<ibv_mr*> mr = shared_->mrs->acquire(data, bytes);
    if (!mr.isOk()) return mr.status();
    op.mr = *mr;
  }
  recvs_.push_back(op);
  return Status();
}

Status IbConnection::handleCtl(const CtlMsg& msg) {
  sendCredits_ += static_cast<int>(msg.credits);
  switch (static_cast<CtlKind>(msg.kind)) {
    case CtlKind::kHello:
      helloSeen_ = true;
      hello_ = msg;
      return Status();
    case CtlKind::kHelloProof:
      proofSeen_ = true;
      proof_ = msg;
      return Status();
    case CtlKind::kCredit:
      return Status();
    case CtlKind::kClearToSend:
      clearToSends_.push_back(msg);
      return Status();
    case CtlKind::kMismatch: {
      const Op* op = recvs_.empty() ? nullptr : &recvs_.front();
      return messageMismatch(peer_, channel_, {msg.tag, msg.bytes},
                             {op ? op->tag : 0, op ? op->bytes : 0}, op ? op->done : nullptr);
    }
  }
  return remoteError("ibverbs: unknown control message from rank " + std::to_string(peer_), peer_);
}

Status IbConnection::handleCompletion(const ibv_wc& wc, bool* progressed) {
  if (wc.status != IBV_WC_SUCCESS) {
    return remoteError("ibverbs: work request to rank " + std::to_string(peer_) + " failed (" +
                           ibv_wc_status_str(wc.status) + "): the peer exited or the link failed",
                       peer_);
  }
  *progressed = true;
  uint64_t kind = wc.wr_id & kWrKindMask;
  if (kind == kCtlWr || kind == kDataWr) {
    --sendsInFlight_;
    if (kind == kDataWr) {
      uint32_t seq = static_cast<uint32_t>(wc.wr_id);
      for (Op& op : sends_) {
        if (op.seq == seq) op.finished = true;
      }
    }
    return Status();
  }
  int slot = static_cast<int>(wc.wr_id & 0xffff);
  if (slot >= kRecvDepth) return internalError("ibverbs: bad receive slot");
  Status st;
  if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    uint32_t seq = ntohl(wc.imm_data);
    if (recvs_.empty() || !recvs_.front().ctsSent || recvs_.front().seq != seq ||
        wc.byte_len != recvs_.front().bytes) {
      st = remoteError("ibverbs: unexpected data from rank " + std::to_string(peer_) +
                           " (sequence " + std::to_string(seq) + ", " +
                           std::to_string(wc.byte_len) + " bytes)",
                       peer_);
    } else {
      recvs_.front().finished = true;
    }
  } else if (wc.opcode == IBV_WC_RECV && wc.byte_len == sizeof(CtlMsg)) {
    st = handleCtl(recvSlots_[slot]);
  } else {
    st = remoteError("ibverbs: malformed message from rank " + std::to_string(peer_), peer_);
  }
  COLLIE_RETURN_IF_ERROR(st);
  ++creditsOwed_;
  return postReceiveSlot(slot);
}

Status IbConnection::progress(bool* progressed) {
  if (!broken_.isOk()) return broken_;
  ibv_wc wcs[32];
  int n = ibv_poll_cq(cq_, 32, wcs);
  if (n < 0) return fail(systemError("ibverbs: ibv_poll_cq", errno));
  for (int i = 0; i < n; ++i) {
    Status st = handleCompletion(wcs[i], progressed);
    if (!st.isOk()) return fail(st);
  }
  // Receives: announce buffers (clear-to-send) in order.
  for (Op& op : recvs_) {
    if (op.ctsSent) continue;
    CtlMsg cts;
    cts.kind = static_cast<uint32_t>(CtlKind::kClearToSend);
    cts.seq = op.seq;
    cts.addr = reinterpret_cast<uintptr_t>(op.data);
    cts.rkey = op.mr ? op.mr->rkey : 0;
    cts.tag = op.tag;
    cts.bytes = op.bytes;
    Status st = sendCtl(cts);
    if (st.code() == StatusCode::kTimeout) break;  // out of credits: later
    if (!st.isOk()) return fail(st);
    op.ctsSent = true;
    *progressed = true;
  }
  // Sends: pair clear-to-sends with sends in order.
  for (Op& op : sends_) {
    if (op.written) continue;
    if (clearToSends_.empty()) break;
    const CtlMsg& cts = clearToSends_.front();
    if (cts.seq != op.seq) {
      return fail(remoteError("ibverbs: rank " + std::to_string(peer_) + " announced receive " +
                                  std::to_string(cts.seq) + ", expected " + std::to_string(op.seq),
                              peer_));
    }
    if (cts.tag != op.tag || cts.bytes != op.bytes) {
      CtlMsg nack;
      nack.kind = static_cast<uint32_t>(CtlKind::kMismatch);
      nack.seq = op.seq;
      nack.tag = op.tag;
      nack.bytes = op.bytes;
      (void)sendCtl(nack, /*creditMessage=*/true);
      return fail(sendMismatch(peer_, channel_, {op.tag, op.bytes}, {cts.tag, cts.bytes}));
    }
    Status st = writeData(op, cts);
    if (st.code() == StatusCode::kTimeout) break;
    if (!st.isOk()) return fail(st);
    clearToSends_.pop_front();
    *progressed = true;
  }
  if (creditsOwed_ >= kRecvDepth / 2) {
    CtlMsg credit;
    credit.kind = static_cast<uint32_t>(CtlKind::kCredit);
    Status st = sendCtl(credit, /*creditMessage=*/true);
    if (!st.isOk() && st.code() != StatusCode::kTimeout) return fail(st);
  }
  for (auto* queue : {&sends_, &recvs_}) {
    while (!queue->empty() && queue->front().finished) {
      shared_->mrs->release(queue->front().mr);
      queue->front().done->complete();
      queue->pop_front();
    }
  }
  return Status();
}

// The proof travels in the control message's three 8-byte fields: the first 24 bytes
// of the HMAC-SHA-256 (a truncation RFC 2104 section 5 allows).
constexpr size_t kProofBytesSent = 24;

Status IbConnection::awaitCtl(const bool& seen, const char* what, Deadline deadline) {
  while (!seen) {
    if (Clock::now() > deadline) {
      return timeoutError("ibverbs: rank " + std::to_string(peer_) + " did not send its " + what +
                              " before the deadline",
                          peer_);
    }
    bool progressed = false;
    COLLIE_RETURN_IF_ERROR(progress(&progressed));
  }
  return Status();
}

Status IbConnection::sendHelloNonce(const net::Nonce& mine, uint64_t jobHash) {
  CtlMsg hello;
  hello.kind = static_cast<uint32_t>(CtlKind::kHello);
  std::memcpy(&hello.addr, mine.data(), 8);
  std::memcpy(&hello.tag, mine.data() + 8, 8);
  hello.bytes = jobHash;
  return sendCtl(hello, true);
}

Status IbConnection::sendHelloProof(const JobSecret& secret, int myRank, uint64_t jobHash,
                                    const net::Nonce& mine, Deadline deadline) {
  COLLIE_RETURN_IF_ERROR(awaitCtl(helloSeen_, "handshake nonce", deadline));
  if (hello_.bytes != jobHash) {
    return fail(unauthenticated("ibverbs: rank " + std::to_string(peer_) +
                                    " belongs to another communicator (job key differs)",
                                peer_));
  }
  net::Nonce theirs;
  std::memcpy(theirs.data(), &hello_.addr, 8);
  std::memcpy(theirs.data() + 8, &hello_.tag, 8);
  Sha256Digest proof =
      net::peerProof(secret, myRank, peer_, static_cast<uint32_t>(channel_), jobHash, mine, theirs);
  CtlMsg msg;
  msg.kind = static_cast<uint32_t>(CtlKind::kHelloProof);
  std::memcpy(&msg.addr, proof.data(), 8);
  std::memcpy(&msg.tag, proof.data() + 8, 8);
  std::memcpy(&msg.bytes, proof.data() + 16, 8);
  return sendCtl(msg, true);
}

Status IbConnection::checkHelloProof(const JobSecret& secret, int myRank, uint64_t jobHash,
                                     const net::Nonce& mine, Deadline deadline) {
  COLLIE_RETURN_IF_ERROR(awaitCtl(proofSeen_, "handshake proof", deadline));
  net::Nonce theirs;
  std::memcpy(theirs.data(), &hello_.addr, 8);
  std::memcpy(theirs.data() + 8, &hello_.tag, 8);
  Sha256Digest expected =
      net::peerProof(secret, peer_, myRank, static_cast<uint32_t>(channel_), jobHash, theirs, mine);
  uint8_t got[kProofBytesSent];
  std::memcpy(got, &proof_.addr, 8);
  std::memcpy(got + 8, &proof_.tag, 8);
  std::memcpy(got + 16, &proof_.bytes, 8);
  if (!net::secretsEqual(got, expected.data(), kProofBytesSent)) {
    return fail(unauthenticated("ibverbs: rank " + std::to_string(peer_) +
                                    " did not prove the job secret; check COLLIE_JOB_SECRET",
                                peer_));
  }
  return Status();
}

}  // namespace collie::ib
