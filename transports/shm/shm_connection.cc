#include "transports/shm/shm_connection.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/log/log.h"
#include "core/transport/message_check.h"

namespace collie::shm {
namespace {

// Bytes copied between two publications of head/tail: small enough that sender and
// receiver copy concurrently on a large message, large enough to amortise the atomics.
constexpr uint64_t kPublishChunk = 256 * 1024;

void copyIntoRing(const FifoRef& fifo, uint64_t position, const uint8_t* src, size_t n) {
  const uint64_t offset = position & (fifo.bytes - 1);
  const size_t first = static_cast<size_t>(std::min<uint64_t>(n, fifo.bytes - offset));
  std::memcpy(fifo.data + offset, src, first);
  if (n > first) std::memcpy(fifo.data, src + first, n - first);
}

void copyFromRing(const FifoRef& fifo, uint64_t position, uint8_t* dst, size_t n) {
  const uint64_t offset = position & (fifo.bytes - 1);
  const size_t first = static_cast<size_t>(std::min<uint64_t>(n, fifo.bytes - offset));
  std::memcpy(dst, fifo.data + offset, first);
  if (n > first) std::memcpy(dst + first, fifo.data, n - first);
}

}  // namespace

ShmConnection::ShmConnection(std::shared_ptr<ShmShared> shared, PeerState* peer, int channel,
                             FifoRef send, FifoRef recv)
    : shared_(std::move(shared)), peer_(peer), channel_(channel), send_(send), recv_(recv) {
  // Both counters start where the FIFOs were initialised (0); keep them local.
  head_ = send_.control->head.load(std::memory_order_acquire);
  cachedTail_ = send_.control->tail.load(std::memory_order_acquire);
  tail_ = recv_.control->tail.load(std::memory_order_acquire);
  cachedHead_ = tail_;
  sendMapping_ = FifoMapping{head_, head_, head_};
  recvMapping_ = FifoMapping{tail_, tail_, tail_};
  shared_->connections.push_back(this);
}

ShmConnection::~ShmConnection() {
  auto& list = shared_->connections;
  list.erase(std::remove(list.begin(), list.end(), this), list.end());
}

std::string ShmConnection::where() const {
  return "rank " + std::to_string(peer_->rank) + " on channel " + std::to_string(channel_) +
         " (this is rank " + std::to_string(shared_->rank()) + ")";
}

namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// Maps FIFO positions [from, to) (at most one lap) into this process, page-aligned.
// Best effort: a kernel without MADV_POPULATE_WRITE leaves the faults where they were.
void mapRing(const FifoRef& fifo, uint64_t from, uint64_t to) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t data = reinterpret_cast<uintptr_t>(fifo.data);
  auto map = [&](uint64_t offset, uint64_t bytes) {
    const uintptr_t begin = (data + offset) & ~(page - 1);
    (void)madvise(reinterpret_cast<void*>(begin), data + offset + bytes - begin,
                  MADV_POPULATE_WRITE);
  };
  const uint64_t offset = from & (fifo.bytes - 1);
  const uint64_t first = std::min(to - from, fifo.bytes - offset);
  map(offset, first);
  if (to - from > first) map(0, to - from - first);
}

}  // namespace

void ShmConnection::FifoMapping::post(const FifoRef& fifo, size_t bytes) {
  posted += kHeaderBytes + bytes;
  const uint64_t end = start + fifo.bytes;
  if (mapped >= end || (posted <= mapped && bytes < kMapWholeFromBytes)) return;
  const uint64_t window =
      (posted - start + kMapWindowBytes - 1) / kMapWindowBytes * kMapWindowBytes;
  const uint64_t to = bytes >= kMapWholeFromBytes ? end : std::min(end, start + window);
  mapRing(fifo, mapped, to);
  mapped = to;
}

Status ShmConnection::postSend(const void* data, size_t bytes, uint64_t tag, Completion* done) {
  if (done == nullptr || (data == nullptr && bytes != 0)) {
    return invalidArgument("shm: postSend to " + where() + " needs a buffer and a completion");
  }
  if (!broken_.isOk()) {
    done->complete(broken_);
    return broken_;
  }
  sendMapping_.post(send_, bytes);
  sends_.push_back(SendOp{static_cast<const uint8_t*>(data), bytes, tag, done});
  return Status();
}

Status ShmConnection::postRecv(void* data, size_t bytes, uint64_t tag, Completion* done) {
  if (done == nullptr || (data == nullptr && bytes != 0)) {
    return invalidArgument("shm: postRecv from " + where() + " needs a buffer and a completion");
  }
  if (!broken_.isOk()) {
    done->complete(broken_);
    return broken_;
  }
  recvMapping_.post(recv_, bytes);
  recvs_.push_back(RecvOp{static_cast<uint8_t*>(data), bytes, tag, done});
  return Status();
}

Status ShmConnection::progressSends(bool* moved) {
  const uint64_t size = send_.bytes;
  while (!sends_.empty()) {
    SendOp& op = sends_.front();
    const uint64_t need = op.headerWritten ? 1 : kHeaderBytes;
    if (size - (head_ - cachedTail_) < need) {
      cachedTail_ = send_.control->tail.load(std::memory_order_acquire);
      if (head_ - cachedTail_ > size) {
        return remoteError("shm: FIFO to " + where() + " is corrupt (tail beyond head)",
                           peer_->rank);
      }
      if (size - (head_ - cachedTail_) < need) break;
    }
    bool wrote = false;
    if (!op.headerWritten) {
      MessageHeader header{op.tag, op.bytes};
      copyIntoRing(send_, head_, reinterpret_cast<const uint8_t*>(&header), kHeaderBytes);
      head_ += kHeaderBytes;
      op.headerWritten = true;
      wrote = true;
    }
    while (op.sent < op.bytes) {
      uint64_t space = size - (head_ - cachedTail_);
      if (space == 0) {
        cachedTail_ = send_.control->tail.load(std::memory_order_acquire);
        if (head_ - cachedTail_ > size) {
          return remoteError("shm: FIFO to " + where() + " is corrupt (tail beyond head)",
                             peer_->rank);
        }
        space = size - (head_ - cachedTail_);
        if (space == 0) break;
      }
      const size_t n =
          static_cast<size_t>(std::min<uint64_t>({space, op.bytes - op.sent, kPublishChunk}));
      copyIntoRing(send_, head_, op.data + op.sent, n);
      head_ += n;
      op.sent += n;
      send_.control->head.store(head_, std::memory_order_release);
      ringDoorbell(peer_->segment->header());
      wrote = false;
      *moved = true;
    }
    if (wrote) {  // header only (zero-length message, or payload blocked on space)
      send_.control->head.store(head_, std::memory_order_release);
      ringDoorbell(peer_->segment->header());
      *moved = true;
    }
    if (op.sent < op.bytes) break;
    Completion* done = op.done;
    sends_.pop_front();
    done->complete();
  }
  return Status();
}

Status ShmConnection::progressRecvs(bool* moved) {
  const uint64_t size = recv_.bytes;
  while (!recvs_.empty()) {
    RecvOp& op = recvs_.front();
    const uint64_t need = op.headerRead ? 1 : kHeaderBytes;
    if (cachedHead_ - tail_ < need) {
      cachedHead_ = recv_.control->head.load(std::memory_order_acquire);
      if (cachedHead_ - tail_ > size) {
        return remoteError("shm: FIFO from " + where() + " is corrupt (head beyond tail + size)",
                           peer_->rank);
      }
      if (cachedHead_ - tail_ < need) break;
    }
    if (!op.headerRead) {
      MessageHeader header;
      copyFromRing(recv_, tail_, reinterpret_cast<uint8_t*>(&header), kHeaderBytes);
      COLLIE_RETURN_IF_ERROR(checkIncoming(peer_->rank, channel_, {header.tag, header.length},
                                           {op.tag, op.bytes}, op.done));
      tail_ += kHeaderBytes;
      op.headerRead = true;
      *moved = true;
    }
    while (op.received < op.bytes) {
      uint64_t avail = cachedHead_ - tail_;
      if (avail == 0) {
        cachedHead_ = recv_.control->head.load(std::memory_order_acquire);
        if (cachedHead_ - tail_ > size) {
          return remoteError("shm: FIFO from " + where() + " is corrupt (head beyond tail)",
                             peer_->rank);
        }
        avail = cachedHead_ - tail_;
        if (avail == 0) break;
      }
      const size_t n =
          static_cast<size_t>(std::min<uint64_t>({avail, op.bytes - op.received, kPublishChunk}));
      copyFromRing(recv_, tail_, op.data + op.received, n);
      tail_ += n;
      op.received += n;
      recv_.control->tail.store(tail_, std::memory_order_release);
      ringDoorbell(peer_->segment->header());
    }
    if (op.received < op.bytes) break;
    if (op.bytes == 0) {  // publish the consumed header of a zero-length message
      recv_.control->tail.store(tail_, std::memory_order_release);
      ringDoorbell(peer_->segment->header());
    }
    Completion* done = op.done;
    recvs_.pop_front();
    done->complete();
  }
  return Status();
}

Status ShmConnection::goneError() const {
  std::string pending = std::to_string(sends_.size()) + " send(s) and " +
                        std::to_string(recvs_.size()) + " receive(s) pending";
  if (peer_->dead) {
    return remoteError("shm: rank " + std::to_string(peer_->rank) + " (pid " +
                           std::to_string(peer_->pid) + ") died; " + where() + " had " + pending +
                           ". Check that rank's output for the cause",
                       peer_->rank);
  }
  return remoteError("shm: rank " + std::to_string(peer_->rank) +
                         " closed its shm transport (communicator destroyed or aborted); " +
                         where() + " had " + pending,
                     peer_->rank);
}

void ShmConnection::fail(const Status& error) {
  broken_ = error;
  for (SendOp& op : sends_) op.done->complete(error);
  for (RecvOp& op : recvs_) op.done->complete(error);
  sends_.clear();
  recvs_.clear();
  COLLIE_LOG(WARN, SHM) << error.toString();
}

Status ShmConnection::progress(bool* progressed) {
  if (!broken_.isOk()) return broken_;
  if (sends_.empty() && recvs_.empty()) return Status();
  bool moved = false;
  // Bytes sent to a peer that closed would never be read: fail the sends at once.
  Status status = !sends_.empty() && peerGone() ? goneError() : Status();
  if (status.isOk()) status = progressSends(&moved);
  if (status.isOk()) status = progressRecvs(&moved);
  if (status.isOk() && !moved) {
    // The closed flag is one load; the pid check rate-limits itself (100 ms).
    if ((++idlePolls_ & 15) == 0) shared_->checkLiveness(false);
    if (peerGone()) {
      // Whatever the peer wrote before it left is visible now: use it first.
      status = progressSends(&moved);
      if (status.isOk()) status = progressRecvs(&moved);
      if (status.isOk() && !moved && (!sends_.empty() || !recvs_.empty())) status = goneError();
    }
  }
  if (!status.isOk()) {
    fail(status);
    return status;
  }
  if (moved) {
    idlePolls_ = 0;
    if (progressed != nullptr) *progressed = true;
  }
  return Status();
}

}  // namespace collie::shm
