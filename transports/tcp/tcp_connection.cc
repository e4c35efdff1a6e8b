#include "transports/tcp/tcp_connection.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "core/log/log.h"
#include "core/transport/message_check.h"

namespace collie::tcp {
namespace {

constexpr int kMaxBatch = 16;  // send items gathered into one sendmsg
// Per-socket read-ahead: a small message and the next headers in one readv.
constexpr size_t kReadAheadBytes = 16 * 1024;

std::string hex(uint64_t v) {
  std::ostringstream out;
  out << "0x" << std::hex << v;
  return out.str();
}

}  // namespace

void TcpConnection::OpQueue::stripeDone(uint64_t seq) {
  Op& op = at(seq);
  if (--op.stripesLeft == 0) {
    op.done->complete();
    while (!ops.empty() && ops.front().stripesLeft == 0) {
      ops.popFront();
      ++frontSeq;
    }
  }
}

TcpConnection::TcpConnection(int peer, int channel, std::vector<net::Socket> socks,
                             std::shared_ptr<EpollHandle> epoll)
    : peer_(peer), channel_(channel), epoll_(std::move(epoll)) {
  lanes_.resize(socks.size());
  for (size_t i = 0; i < socks.size(); ++i) lanes_[i].sock = std::move(socks[i]);
}

TcpConnection::~TcpConnection() {
  for (Lane& lane : lanes_) {
    if (lane.sock.valid()) ::epoll_ctl(epoll_->fd.fd(), EPOLL_CTL_DEL, lane.sock.fd(), nullptr);
  }
  // Pending completions are left untouched: their owner is going away with us.
}

Status TcpConnection::postSend(const void* data, size_t bytes, uint64_t tag, Completion* done) {
  if (!broken_.isOk()) return broken_;
  if (done == nullptr || (data == nullptr && bytes > 0)) {
    return invalidArgument("tcp postSend to rank " + std::to_string(peer_) +
                           ": null buffer or completion");
  }
  const int nsocks = static_cast<int>(lanes_.size());
  const int n = stripeCount(bytes, nsocks);
  uint64_t seq = sendQ_.nextSeq++;
  sendQ_.ops.pushBack(Op{static_cast<uint8_t*>(const_cast<void*>(data)), bytes, tag, done, n});
  for (int j = 0; j < n; ++j) {
    size_t offset, stripeBytes;
    stripeRange(bytes, n, j, &offset, &stripeBytes);
    FrameHeader h;
    h.stripe = static_cast<uint8_t>(j);
    h.nstripes = static_cast<uint8_t>(n);
    h.tag = tag;
    h.length = bytes;
    h.offset = offset;
    h.bytes = stripeBytes;
    SendItem item;
    item.seq = seq;
    item.payload = static_cast<const uint8_t*>(data) + (bytes ? offset : 0);
    item.payloadBytes = stripeBytes;
    encodeFrame(h, item.header);
    lanes_[(seq + static_cast<uint64_t>(j)) % static_cast<uint64_t>(nsocks)].sends.pushBack(item);
  }
  return Status();
}

Status TcpConnection::postRecv(void* data, size_t bytes, uint64_t tag, Completion* done) {
  if (!broken_.isOk()) return broken_;
  if (done == nullptr || (data == nullptr && bytes > 0)) {
    return invalidArgument("tcp postRecv from rank " + std::to_string(peer_) +
                           ": null buffer or completion");
  }
  const int nsocks = static_cast<int>(lanes_.size());
  const int n = stripeCount(bytes, nsocks);
  uint64_t seq = recvQ_.nextSeq++;
  recvQ_.ops.pushBack(Op{static_cast<uint8_t*>(data), bytes, tag, done, n});
  for (int j = 0; j < n; ++j) {
    RecvItem item;
    item.seq = seq;
    item.expect.stripe = static_cast<uint8_t>(j);
    item.expect.nstripes = static_cast<uint8_t>(n);
    item.expect.tag = tag;
    item.expect.length = bytes;
    size_t offset, stripeBytes;
    stripeRange(bytes, n, j, &offset, &stripeBytes);
    item.expect.offset = offset;
    item.expect.bytes = stripeBytes;
    lanes_[(seq + static_cast<uint64_t>(j)) % static_cast<uint64_t>(nsocks)].recvs.pushBack(item);
  }
  return Status();
}

Status TcpConnection::progress(bool* progressed) {
  if (!broken_.isOk()) return broken_;
  if (pendingOps() == 0) return Status();
  for (int i = 0; i < static_cast<int>(lanes_.size()); ++i) {
    COLLIE_RETURN_IF_ERROR(progressSends(i, progressed));
    COLLIE_RETURN_IF_ERROR(progressRecvs(i, progressed));
  }
  return Status();
}

Status TcpConnection::progressSends(int laneIndex, bool* progressed) {
  Lane& lane = lanes_[laneIndex];
  while (!lane.sends.empty()) {
    iovec iov[2 * kMaxBatch];
    int niov = 0;
    size_t items = std::min<size_t>(lane.sends.size(), kMaxBatch);
    for (size_t i = 0; i < items; ++i) {
      SendItem& item = lane.sends[i];
      if (item.sent < kFrameHeaderBytes) {
        iov[niov++] = {item.header + item.sent, kFrameHeaderBytes - item.sent};
      }
      size_t payloadSent = item.sent > kFrameHeaderBytes ? item.sent - kFrameHeaderBytes : 0;
      if (payloadSent < item.payloadBytes) {
        iov[niov++] = {const_cast<uint8_t*>(item.payload) + payloadSent,
                       item.payloadBytes - payloadSent};
      }
    }
    size_t requested = 0;
    for (int i = 0; i < niov; ++i) requested += iov[i].iov_len;
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(niov);
    ssize_t rc = ::sendmsg(lane.sock.fd(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (rc < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status();
      return peerClosed(laneIndex, errno);
    }
    *progressed = true;
    size_t left = static_cast<size_t>(rc);
    while (!lane.sends.empty()) {
      SendItem& item = lane.sends.front();
      size_t total = kFrameHeaderBytes + item.payloadBytes;
      size_t take = std::min(left, total - item.sent);
      item.sent += take;
      left -= take;
      if (item.sent < total) break;
      uint64_t seq = item.seq;
      lane.sends.popFront();
      sendQ_.stripeDone(seq);
    }
    if (static_cast<size_t>(rc) < requested) return Status();  // socket buffer full
  }
  return Status();
}

Status TcpConnection::progressRecvs(int laneIndex, bool* progressed) {
  Lane& lane = lanes_[laneIndex];
  while (!lane.recvs.empty()) {
    // Parse what the read-ahead holds first.
    while (!lane.recvs.empty() && lane.rxHead < lane.rxTail) {
      size_t taken = 0;
      COLLIE_RETURN_IF_ERROR(deliver(laneIndex, lane.rx.get() + lane.rxHead,
                                     lane.rxTail - lane.rxHead, &taken, progressed));
      lane.rxHead += taken;
    }
    if (lane.recvs.empty()) break;  // read ahead only for someone who waits
    lane.rxHead = lane.rxTail = 0;  // the read-ahead is empty here
    if (!lane.rx) lane.rx = std::make_unique<uint8_t[]>(kReadAheadBytes);
    // One recvmsg: the rest of the front payload straight into the user's buffer (its
    // header was validated), then what follows (the next headers) into the read-ahead.
    iovec iov[2];
    int niov = 0;
    RecvItem& item = lane.recvs.front();
    size_t direct = 0;
    if (item.got >= kFrameHeaderBytes) {
      size_t payloadGot = item.got - kFrameHeaderBytes;
      direct = item.expect.bytes - payloadGot;
      iov[niov++] = {recvQ_.at(item.seq).data + item.expect.offset + payloadGot, direct};
    }
    iov[niov++] = {lane.rx.get(), kReadAheadBytes};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(niov);
    ssize_t rc = ::recvmsg(lane.sock.fd(), &msg, MSG_DONTWAIT);
    if (rc == 0) return peerClosed(laneIndex, 0);
    if (rc < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status();
      return peerClosed(laneIndex, errno);
    }
    *progressed = true;
    size_t got = static_cast<size_t>(rc);
    size_t toUser = std::min(got, direct);
    if (direct > 0) payloadArrived(laneIndex, toUser, progressed);
    lane.rxTail = got - toUser;
  }
  return Status();
}

Status TcpConnection::deliver(int laneIndex, const uint8_t* from, size_t bytes, size_t* taken,
                              bool* progressed) {
  Lane& lane = lanes_[laneIndex];
  RecvItem& item = lane.recvs.front();
  if (item.got < kFrameHeaderBytes) {
    size_t take = std::min(bytes, kFrameHeaderBytes - item.got);
    std::memcpy(item.header + item.got, from, take);
    item.got += take;
    *taken = take;
    if (item.got < kFrameHeaderBytes) return Status();
    COLLIE_RETURN_IF_ERROR(checkHeader(laneIndex, item, decodeFrame(item.header)));
    if (item.expect.bytes == 0) payloadArrived(laneIndex, 0, progressed);
    return Status();
  }
  size_t payloadGot = item.got - kFrameHeaderBytes;
  size_t take = std::min(bytes, static_cast<size_t>(item.expect.bytes) - payloadGot);
  std::memcpy(recvQ_.at(item.seq).data + item.expect.offset + payloadGot, from, take);
  *taken = take;
  payloadArrived(laneIndex, take, progressed);
  return Status();
}

void TcpConnection::payloadArrived(int laneIndex, size_t bytes, bool* progressed) {
  Lane& lane = lanes_[laneIndex];
  RecvItem& item = lane.recvs.front();
  item.got += bytes;
  if (item.got == kFrameHeaderBytes + item.expect.bytes) {
    uint64_t seq = item.seq;
    lane.recvs.popFront();
    recvQ_.stripeDone(seq);
    *progressed = true;
  }
}

void TcpConnection::abandon(uint64_t tag, const Status& why) {
  FrameHeader record;
  record.magic = kAbandonMagic;
  record.tag = tag;
  record.offset = static_cast<uint64_t>(why.code());
  uint8_t bytes[kFrameHeaderBytes];
  encodeFrame(record, bytes);
  for (Lane& lane : lanes_) {
    // Only between frames: a record inside a half-written frame would read as payload.
    if (!lane.sock.valid() || (!lane.sends.empty() && lane.sends.front().sent > 0)) continue;
    // Best effort: a full socket buffer or a broken socket leaves the peer only EOF.
    (void)::send(lane.sock.fd(), bytes, sizeof(bytes), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
}

Status TcpConnection::abandoned(uint64_t tag) const {
  for (size_t i = 0; i < lanes_.size(); ++i) {
    const Lane& lane = lanes_[i];
    // With no receive pending the read-ahead starts at a frame boundary.
    if (!lane.recvs.empty() || lane.rxTail - lane.rxHead < kFrameHeaderBytes) continue;
    const FrameHeader got = decodeFrame(lane.rx.get() + lane.rxHead);
    if (got.magic == kAbandonMagic && got.tag == tag) {
      return abandonedError(static_cast<int>(i), got);
    }
  }
  return Status();
}

Status TcpConnection::abandonedError(int lane, const FrameHeader& got) const {
  const auto code = static_cast<StatusCode>(got.offset & 0x7f);
  return remoteError("tcp: rank " + std::to_string(peer_) + " failed this collective (tag " +
                         hex(got.tag) + ", " + statusCodeName(code) +
                         ") and closed its connection (channel " + std::to_string(channel_) +
                         ", socket " + std::to_string(lane) +
                         ") before this rank could complete it; no rank reports it a success",
                     peer_);
}

Status TcpConnection::checkHeader(int lane, const RecvItem& item, const FrameHeader& got) {
  // Only on the error paths: a header checked per message must not format (or allocate).
  auto where = [&] {
    return " (channel " + std::to_string(channel_) + ", socket " + std::to_string(lane) + ")";
  };
  if (got.magic == kAbandonMagic && got.zero == 0) return fail(abandonedError(lane, got));
  const FrameCheck check = checkFrame(got, item.expect);
  if (check == FrameCheck::kCorrupt) {
    return fail(remoteError("tcp: rank " + std::to_string(peer_) + " sent a corrupt frame header" +
                                where() + ": bad magic " + hex(got.magic) +
                                "; the stream is out of sync or not collie's",
                            peer_));
  }
  const FrameHeader& want = item.expect;
  if (check == FrameCheck::kMismatch) {
    return fail(checkIncoming(peer_, channel_, {got.tag, got.length}, {want.tag, want.length},
                              recvQ_.at(item.seq).done));
  }
  if (check == FrameCheck::kWrongStripe) {
    // The peer sent another message than the one expected here: an earlier one of the
    // same tag and length was cut short (or sized differently), so the next one's stripes
    // arrive in its place. A mismatch, as the wrong length on the other socket would
    // have said had that socket been read first. (Sockets per peer are agreed at setup.)
    return fail(mismatchError(
        "tcp: rank " + std::to_string(peer_) + " sent stripe " + std::to_string(got.stripe) + "/" +
            std::to_string(got.nstripes) + " at offset " + std::to_string(got.offset) +
            " where stripe " + std::to_string(want.stripe) + "/" + std::to_string(want.nstripes) +
            " was expected" + where() +
            ": the ranks disagree about the messages (one before it was cut short or sized "
            "differently)",
        peer_));
  }
  return Status();
}

Status TcpConnection::peerClosed(int lane, int err) {
  std::string how = err == 0 ? "closed its connection"
                             : std::string("connection failed (") + std::strerror(err) + ")";
  return fail(remoteError("tcp: rank " + std::to_string(peer_) + " " + how + " (channel " +
                              std::to_string(channel_) + ", socket " + std::to_string(lane) +
                              ") with " + std::to_string(pendingOps()) +
                              " operations pending; that rank probably exited or failed, check "
                              "its log",
                          peer_));
}

Status TcpConnection::fail(Status status) {
  if (broken_.isOk()) {
    COLLIE_LOG(WARN, NET) << status.message();
    broken_ = status;
  }
  for (OpQueue* q : {&sendQ_, &recvQ_}) {
    for (size_t i = 0; i < q->ops.size(); ++i) {
      Op& op = q->ops[i];
      if (op.stripesLeft > 0) op.done->complete(broken_);
    }
    q->frontSeq += q->ops.size();
    q->ops.clear();
  }
  for (Lane& lane : lanes_) {
    lane.sends.clear();
    lane.recvs.clear();
    lane.rxHead = lane.rxTail = 0;
  }
  return broken_;
}

}  // namespace collie::tcp
