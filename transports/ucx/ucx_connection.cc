#include "transports/ucx/ucx_connection.h"

#include <array>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "core/log/log.h"
#include "core/transport/message_check.h"

namespace collie::ucx {
namespace {

void putLe(uint8_t* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}
uint64_t getLe(const uint8_t* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

// Whether a send request finished; frees it. `request` may be nullptr (done) or an
// error pointer.
bool sendFinished(void*& request, ucs_status_t* status) {
  *status = UCS_OK;
  if (request == nullptr) return true;
  if (UCS_PTR_IS_ERR(request)) {
    *status = UCS_PTR_STATUS(request);
    request = nullptr;
    return true;
  }
  ucs_status_t st = ucp_request_check_status(request);
  if (st == UCS_INPROGRESS) return false;
  *status = st;
  ucp_request_free(request);
  request = nullptr;
  return true;
}

// The same for receives; fills `info` (length) when the receive finished.
bool recvFinished(void*& request, ucp_tag_recv_info_t* info, ucs_status_t* status) {
  *status = UCS_OK;
  if (request == nullptr) return true;  // completed at post time; info already set
  if (UCS_PTR_IS_ERR(request)) {
    *status = UCS_PTR_STATUS(request);
    request = nullptr;
    return true;
  }
  ucs_status_t st = ucp_tag_recv_request_test(request, info);
  if (st == UCS_INPROGRESS) return false;
  *status = st;
  ucp_request_free(request);
  request = nullptr;
  return true;
}

// The sequence field of an abandon record's UCP tag: the collective tag folded to 32 bits.
uint32_t abandonSeq(uint64_t tag) { return static_cast<uint32_t>(tag ^ (tag >> 32)); }

// Progresses `worker` until `request` is no longer in flight or `until`; frees it.
// False when it was still in flight (UCX releases it when it completes).
bool settle(UcxWorker& worker, void* request, Clock::time_point until) {
  if (!UCS_PTR_IS_PTR(request)) return !UCS_PTR_IS_ERR(request);
  while (ucp_request_check_status(request) == UCS_INPROGRESS && Clock::now() < until) {
    worker.progress();
  }
  const bool done = ucp_request_check_status(request) != UCS_INPROGRESS;
  ucp_request_free(request);
  return done;
}

}  // namespace

UcxConnection::UcxConnection(std::shared_ptr<UcxWorker> worker, int peer, int channel)
    : worker_(std::move(worker)), peer_(peer), channel_(channel) {
  // Looked up once here, not on every receive the engine posts.
  if (Result<ucp_datatype_t> datatype = reducingDatatype(); datatype.isOk()) {
    reducingDatatype_ = *datatype;
  }
}

UcxConnection::~UcxConnection() {
  releaseRequests(sends_);
  releaseRequests(recvs_);
  dropOps(sends_);
  dropOps(recvs_);
}

void UcxConnection::releaseRequests(std::deque<std::unique_ptr<Op>>& ops) {
  // Cancel and give UCX a moment to finish them, so no buffer is written after the
  // owner was told the operation ended. A request still running after that is freed
  // (UCX releases it when it completes) and its op, whose header buffer and callback
  // state UCX may still use, is orphaned: dropOps() hands it to the worker.
  releasing_ = true;
  auto until = Clock::now() + std::chrono::milliseconds(200);
  for (auto& op : ops) {
    for (void** request : {&op->headerRequest, &op->dataRequest}) {
      if (*request == nullptr || UCS_PTR_IS_ERR(*request)) continue;
      if (ucp_request_check_status(*request) == UCS_INPROGRESS) {
        ucp_request_cancel(worker_->worker(), *request);
        worker_->markAbandoned(peer_);  // sends cannot be cancelled: force-close later
      }
      while (ucp_request_check_status(*request) == UCS_INPROGRESS && Clock::now() < until) {
        worker_->progress();
      }
      if (ucp_request_check_status(*request) == UCS_INPROGRESS) op->orphaned = true;
      ucp_request_free(*request);
      *request = nullptr;
    }
  }
}

void UcxConnection::dropOps(std::deque<std::unique_ptr<Op>>& ops) {
  for (auto& op : ops) {
    if (op->orphaned) worker_->keepUntilDestroyed(std::shared_ptr<Op>(std::move(op)));
  }
  ops.clear();
}

Status UcxConnection::fail(Status status) {
  if (broken_.isOk()) broken_ = status;
  releaseRequests(sends_);
  releaseRequests(recvs_);
  for (auto* queue : {&sends_, &recvs_}) {
    for (auto& op : *queue) {
      if (!op->done->done) op->done->complete(broken_);
    }
    dropOps(*queue);
  }
  return broken_;
}

std::unique_ptr<UcxConnection::Op> UcxConnection::acquireOp() {
  std::unique_ptr<Op> op;
  if (spare_.empty()) {
    op = std::make_unique<Op>();
  } else {
    op = std::move(spare_.back());
    spare_.pop_back();
  }
  op->owner = this;
  return op;
}

void UcxConnection::recycle(std::unique_ptr<Op> op) {
  if (spare_.size() >= 64) return;  // more than a burst ever needs
  std::vector<uint8_t> buffer = std::move(op->buffer);
  ReducingReceive reducer = std::move(op->reducer);
  *op = Op{};
  op->buffer = std::move(buffer);    // keeps its capacity
  op->reducer = std::move(reducer);  // start() resets it; its side list keeps its capacity
  spare_.push_back(std::move(op));
}

Status UcxConnection::postSend(const void* data, size_t bytes, uint64_t tag, Completion* done) {
  if (!broken_.isOk()) return broken_;
  auto op = acquireOp();
  op->done = done;
  op->data = static_cast<uint8_t*>(const_cast<void*>(data));
  op->bytes = bytes;
  op->tag = tag;
  op->seq = sendSeq_++;
  const bool inlined = bytes <= kInlineBytes;
  op->buffer.resize(kHeaderBytes + (inlined ? bytes : 0));
  putLe(op->buffer.data(), kHeaderMagic, 4);
  putLe(op->buffer.data() + 4, op->seq, 4);
  putLe(op->buffer.data() + 8, tag, 8);
  putLe(op->buffer.data() + 16, bytes, 8);
  if (inlined && bytes > 0) std::memcpy(op->buffer.data() + kHeaderBytes, data, bytes);

  ucp_ep_h ep = worker_->endpoint(peer_, channel_);
  ucp_request_param_t param{};
  op->headerRequest =
      ucp_tag_send_nbx(ep, op->buffer.data(), op->buffer.size(),
                       makeTag(TagKind::kHeader, channel_, worker_->rank(), op->seq), &param);
  if (!inlined) {
    op->stage = Stage::kData;
    op->dataRequest = ucp_tag_send_nbx(
        ep, data, bytes, makeTag(TagKind::kData, channel_, worker_->rank(), op->seq), &param);
  }
  sends_.push_back(std::move(op));
  return Status();
}

Status UcxConnection::postRecv(void* data, size_t bytes, uint64_t tag, Completion* done) {
  return postRecvOp(data, bytes, tag, done, nullptr);
}

bool UcxConnection::reducesOnReceive() const { return reducingDatatype_.has_value(); }

Status UcxConnection::postRecvReduce(const ReduceOnReceive& reduce, size_t bytes, uint64_t tag,
                                     Completion* done) {
  if (!reducesOnReceive()) return unsupported("ucx: the reducing datatype could not be created");
  if (reduce.kernels == nullptr || bytes % dataTypeSize(reduce.dtype) != 0) {
    return invalidArgument("ucx: a reducing receive needs kernels and whole elements");
  }
  return postRecvOp(nullptr, bytes, tag, done, &reduce);
}

Status UcxConnection::postRecvOp(void* data, size_t bytes, uint64_t tag, Completion* done,
                                 const ReduceOnReceive* reduce) {
  if (!broken_.isOk()) return broken_;
  auto op = acquireOp();
  op->done = done;
  op->data = static_cast<uint8_t*>(data);
  op->bytes = bytes;
  op->tag = tag;
  op->seq = recvSeq_++;
  if (reduce != nullptr) {
    op->reducing = true;
    op->reducer.start(*reduce, bytes);
  }
  op->buffer.resize(kHeaderBytes + kInlineBytes);
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = &UcxConnection::onHeader;
  param.user_data = op.get();
  // onHeader() may run inside this call (the header was already there).
  void* request =
      ucp_tag_recv_nbx(worker_->worker(), op->buffer.data(), op->buffer.size(),
                       makeTag(TagKind::kHeader, channel_, peer_, op->seq), kFullMask, &param);
  if (UCS_PTR_IS_ERR(request)) {
    op->headerArrived = true;
    op->headerStatus = UCS_PTR_STATUS(request);
    request = nullptr;
  }
  op->headerRequest = request;
  recvs_.push_back(std::move(op));
  return Status();
}

void UcxConnection::onHeader(void* /*request*/, ucs_status_t status,
                             const ucp_tag_recv_info_t* info, void* user) {
  Op& op = *static_cast<Op*>(user);
  op.headerArrived = true;
  op.headerStatus = status;
  if (status == UCS_OK) op.info = *info;
  // An orphan's connection may be gone; a failing one posts nothing more.
  if (op.orphaned || status != UCS_OK || op.bytes <= kInlineBytes) return;
  UcxConnection& self = *op.owner;
  if (self.releasing_ || !self.checkHeader(op).isOk()) return;  // progressRecv() reports it
  self.postDataRecv(op);
}

void UcxConnection::postDataRecv(Op& op) {
  op.stage = Stage::kData;
  op.info = ucp_tag_recv_info_t{};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.recv_info.tag_info = &op.info;
  void* buffer = op.data;
  if (op.reducing) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
    param.datatype = *reducingDatatype_;  // postRecvReduce() checked it
    buffer = &op.reducer;
  }
  op.dataRequest =
      ucp_tag_recv_nbx(worker_->worker(), buffer, op.bytes,
                       makeTag(TagKind::kData, channel_, peer_, op.seq), kFullMask, &param);
}

Status UcxConnection::progressSend(Op& op, bool* progressed) {
  ucs_status_t st = UCS_OK;
  bool header = op.headerRequest == nullptr || sendFinished(op.headerRequest, &st);
  if (st != UCS_OK) {
    return remoteError(
        "ucx: sending to rank " + std::to_string(peer_) + " failed: " + ucs_status_string(st),
        peer_);
  }
  bool data = op.dataRequest == nullptr || sendFinished(op.dataRequest, &st);
  if (st != UCS_OK) {
    return remoteError(
        "ucx: sending to rank " + std::to_string(peer_) + " failed: " + ucs_status_string(st),
        peer_);
  }
  if (header && data && op.stage != Stage::kDone) {
    op.stage = Stage::kDone;
    *progressed = true;
  }
  return Status();
}

Status UcxConnection::checkHeader(Op& op) {
  const uint8_t* h = op.buffer.data();
  const size_t got = op.info.length;
  if (got < kHeaderBytes || getLe(h, 4) != kHeaderMagic || getLe(h + 4, 4) != op.seq) {
    return remoteError("ucx: corrupt message header from rank " + std::to_string(peer_) + " (" +
                           std::to_string(got) + " bytes)",
                       peer_);
  }
  uint64_t tag = getLe(h + 8, 8);
  uint64_t bytes = getLe(h + 16, 8);
  COLLIE_RETURN_IF_ERROR(checkIncoming(peer_, channel_, {tag, bytes}, {op.tag, op.bytes}, op.done));
  bool inlined = bytes <= kInlineBytes;
  if (got != kHeaderBytes + (inlined ? bytes : 0)) {
    return remoteError("ucx: message from rank " + std::to_string(peer_) + " is " +
                           std::to_string(got) + " bytes, its header announces " +
                           std::to_string(bytes),
                       peer_);
  }
  return Status();
}

Status UcxConnection::progressRecv(Op& op, bool* progressed) {
  if (!op.headerArrived) return Status();
  if (op.headerRequest != nullptr) {
    ucp_request_free(op.headerRequest);
    op.headerRequest = nullptr;
  }
  if (op.stage == Stage::kHeader) {  // onHeader() found no data receive to post
    const ucs_status_t st = op.headerStatus;
    if (st != UCS_OK) {
      return remoteError("ucx: receiving from rank " + std::to_string(peer_) +
                             " failed: " + ucs_status_string(st) +
                             (st == UCS_ERR_MESSAGE_TRUNCATED ? " (header too long)" : ""),
                         peer_);
    }
    *progressed = true;
    COLLIE_RETURN_IF_ERROR(checkHeader(op));
    if (op.bytes <= kInlineBytes) {
      const uint8_t* payload = op.buffer.data() + kHeaderBytes;
      if (op.reducing) {
        op.reducer.apply(0, payload, op.bytes);
      } else if (op.bytes > 0) {
        std::memcpy(op.data, payload, op.bytes);
      }
      op.stage = Stage::kDone;
      return Status();
    }
    postDataRecv(op);
  }
  if (op.stage == Stage::kData) {
    ucs_status_t st = UCS_OK;
    if (!recvFinished(op.dataRequest, &op.info, &st)) return Status();
    *progressed = true;
    if (st != UCS_OK || op.info.length != op.bytes ||
        (op.reducing && op.reducer.pendingElements() != 0)) {
      return remoteError("ucx: data from rank " + std::to_string(peer_) +
                             " does not match its header (" + std::to_string(op.info.length) +
                             " of " + std::to_string(op.bytes) + " bytes, " +
                             ucs_status_string(st) + ")",
                         peer_);
    }
    op.stage = Stage::kDone;
  }
  return Status();
}

Status UcxConnection::progress(bool* progressed) {
  if (!broken_.isOk()) return broken_;
  if (sends_.empty() && recvs_.empty()) return Status();
  if (worker_->progress()) *progressed = true;
  // A failed peer may have delivered everything we wait for before it left (it flushes,
  // then closes): finish what arrived first, fail only what cannot complete any more.
  for (int round = 0; round < 2; ++round) {
    for (auto& op : sends_) {
      Status st = progressSend(*op, progressed);
      if (!st.isOk()) return fail(st);
    }
    for (auto& op : recvs_) {
      Status st = progressRecv(*op, progressed);
      if (!st.isOk()) return fail(st);
    }
    // Complete in post order.
    for (auto* queue : {&sends_, &recvs_}) {
      while (!queue->empty() && queue->front()->stage == Stage::kDone) {
        queue->front()->done->complete();
        recycle(std::move(queue->front()));
        queue->pop_front();
      }
    }
    if ((sends_.empty() && recvs_.empty()) || worker_->peerStatus(peer_).isOk()) break;
    if (round == 1) return fail(worker_->peerStatus(peer_));
    worker_->progress();
  }
  return Status();
}

void UcxConnection::abandon(uint64_t tag, const Status& why) {
  if (!broken_.isOk() || !worker_->peerStatus(peer_).isOk()) return;  // nobody to tell
  // Best effort and bounded: the record is sent, then the endpoint flushed (force-closing
  // it later drops what has not left), for at most kAbandonFlush in all. The buffer lives
  // with the worker in case UCX still holds it then.
  auto record = std::make_shared<std::array<uint8_t, kAbandonBytes>>();
  putLe(record->data(), tag, 8);
  putLe(record->data() + 8, static_cast<uint64_t>(why.code()), 8);
  const auto until = Clock::now() + kAbandonFlush;
  ucp_ep_h ep = worker_->endpoint(peer_, channel_);
  ucp_request_param_t param{};
  void* send = ucp_tag_send_nbx(
      ep, record->data(), record->size(),
      makeTag(TagKind::kAbandon, channel_, worker_->rank(), abandonSeq(tag)), &param);
  if (!settle(*worker_, send, until)) {
    worker_->keepUntilDestroyed(std::move(record));
    return;
  }
  settle(*worker_, ucp_ep_flush_nbx(ep, &param), until);
}

Status UcxConnection::abandoned(uint64_t tag) const {
  if (peerAbandoned_) {
    return peerAbandoned_->tag == tag ? abandonedError(*peerAbandoned_) : Status();
  }
  const ucp_tag_t want = makeTag(TagKind::kAbandon, channel_, peer_, abandonSeq(tag));
  ucp_tag_recv_info_t info{};
  ucp_tag_message_h message = ucp_tag_probe_nb(worker_->worker(), want, kFullMask, 1, &info);
  if (message == nullptr) {
    // A record that reached the socket after the collective's last message may not be
    // in the unexpected queue yet.
    worker_->progress();
    message = ucp_tag_probe_nb(worker_->worker(), want, kFullMask, 1, &info);
  }
  if (message == nullptr) return Status();
  // Received into a buffer that outlives this call in case UCX has not copied it yet.
  auto bytes = std::make_shared<std::array<uint8_t, kAbandonBytes>>();
  ucp_request_param_t param{};
  void* request =
      ucp_tag_msg_recv_nbx(worker_->worker(), bytes->data(), bytes->size(), message, &param);
  AbandonRecord record{tag, static_cast<uint64_t>(StatusCode::kRemoteError)};
  if (!settle(*worker_, request, Clock::now() + kAbandonFlush)) {
    worker_->keepUntilDestroyed(std::move(bytes));
  } else if (info.length == kAbandonBytes && getLe(bytes->data(), 8) == tag) {
    record.code = getLe(bytes->data() + 8, 8);
  }
  peerAbandoned_ = record;
  return abandonedError(record);
}

Status UcxConnection::abandonedError(const AbandonRecord& record) const {
  const auto code = static_cast<StatusCode>(record.code & 0x7f);
  char tag[19];
  std::snprintf(tag, sizeof(tag), "0x%" PRIx64, record.tag);
  return remoteError("ucx: rank " + std::to_string(peer_) + " failed this collective (tag " + tag +
                         ", " + statusCodeName(code) + ") and closed its connection (channel " +
                         std::to_string(channel_) +
                         ") before this rank could complete it; no rank reports it a success",
                     peer_);
}

}  // namespace collie::ucx
