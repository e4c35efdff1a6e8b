// ShmConnection: one (peer, channel) of the shared-memory transport.
//
// A connection sends by writing {tag, length} + payload into its FIFO in the peer's
// segment and receives from the FIFO the peer writes in this rank's segment. Messages
// larger than the FIFO stream through it in pieces; the receiver checks the header
// against the posted receive before it copies any payload byte (kMismatch otherwise).
// Sends complete once their last byte is in the FIFO. A connection whose peer closed
// its transport or died (pidfd / kill(pid, 0), checked at most every 100 ms while
// idle) fails every pending operation with kRemoteError naming the peer, once the
// data the peer left in the FIFO cannot satisfy them. Sends to a peer that closed
// fail at once (nobody would read them).
//
// Thread safety: as Connection (one thread at a time).
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <vector>

#include "core/transport/transport.h"
#include "transports/shm/shm_segment.h"
#include "transports/shm/shm_shared.h"

namespace collie::shm {

// One end of a FIFO as this rank sees it.
struct FifoRef {
  FifoControl* control = nullptr;
  uint8_t* data = nullptr;
  uint64_t bytes = 0;  // power of two
};

class ShmConnection final : public Connection {
 public:
  ShmConnection(std::shared_ptr<ShmShared> shared, PeerState* peer, int channel, FifoRef send,
                FifoRef recv);
  ~ShmConnection() override;

  Status postSend(const void* data, size_t bytes, uint64_t tag, Completion* done) override;
  Status postRecv(void* data, size_t bytes, uint64_t tag, Completion* done) override;
  Status progress(bool* progressed) override;
  int peer() const override { return peer_->rank; }

  // Whether progress() may now move something or report an error: the transport's
  // waitForActivity() asks it of every connection in its spin loop, so it is inline.
  bool mayProgress() const {
    if (!broken_.isOk() || (sends_.empty() && recvs_.empty())) return false;
    if (peerGone()) return true;
    if (!recvs_.empty() && recv_.control->head.load(std::memory_order_acquire) != tail_) {
      return true;
    }
    if (!sends_.empty()) {
      const uint64_t need = sends_.front().headerWritten ? 1 : kHeaderBytes;
      const uint64_t tail = send_.control->tail.load(std::memory_order_acquire);
      if (send_.bytes - (head_ - tail) >= need) return true;
    }
    return false;
  }

 private:
  struct SendOp {
    const uint8_t* data;
    size_t bytes;
    uint64_t tag;
    Completion* done;
    bool headerWritten = false;
    size_t sent = 0;
  };
  struct RecvOp {
    uint8_t* data;
    size_t bytes;
    uint64_t tag;
    Completion* done;
    bool headerRead = false;
    size_t received = 0;
  };

  Status progressSends(bool* moved);
  Status progressRecvs(bool* moved);
  bool peerGone() const {
    return peer_->dead || peer_->segment->header()->closed.load(std::memory_order_acquire) != 0;
  }
  Status goneError() const;
  // Completes every pending operation with `error` and remembers it.
  void fail(const Status& error);
  std::string where() const;

  std::shared_ptr<ShmShared> shared_;
  PeerState* peer_;
  int channel_;
  FifoRef send_;             // in the peer's segment
  FifoRef recv_;             // in this rank's segment
  uint64_t head_ = 0;        // send side: bytes written (this rank is the only writer)
  uint64_t cachedTail_ = 0;  // send side: last tail read from the receiver
  uint64_t tail_ = 0;        // recv side: bytes consumed (this rank is the only writer)
  uint64_t cachedHead_ = 0;  // recv side: last head read from the sender
  std::deque<SendOp> sends_;
  std::deque<RecvOp> recvs_;
  Status broken_;
  uint32_t idlePolls_ = 0;
  // Maps each end's FIFO into this process ahead of the messages posted to it, a window
  // of kMapWindowBytes at a time (MADV_POPULATE_WRITE), during the FIFO's first lap:
  // one call per window instead of a minor fault per 4 KiB page, which cost an 8 KiB ring
  // all-reduce 6 us per call over its first 510 calls. The first message of
  // kMapWholeFromBytes or more maps the rest of the FIFO at once: a 512 KiB ring would
  // otherwise pay a window or two in each of its first calls, which the engine times
  // (core/engine/single_copy_choice.h). Small traffic that never reaches the end leaves
  // the rest unmapped.
  struct FifoMapping {
    uint64_t start = 0;   // position of the first byte of the first lap
    uint64_t posted = 0;  // position just past the last message posted
    uint64_t mapped = 0;  // positions [start, mapped) are mapped
    // Counts a posted message of `bytes` (plus its header) and maps what it reaches.
    void post(const FifoRef& fifo, size_t bytes);
  };
  static constexpr uint64_t kMapWindowBytes = 256 * 1024;
  static constexpr uint64_t kMapWholeFromBytes = 64 * 1024;
  FifoMapping sendMapping_;
  FifoMapping recvMapping_;
};

}  // namespace collie::shm
