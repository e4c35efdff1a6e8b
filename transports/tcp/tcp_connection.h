// TcpConnection: one (peer, channel) of the tcp transport over K non-blocking sockets.
//
// Messages are striped (frame.h): the n-th send's stripes go out on sockets
// (n + j) % K, the n-th receive expects them on the same sockets, so FIFO matching
// per connection holds while a large message uses every socket at once. Operations
// live in preallocated rings; progress() moves bytes with sendmsg (header + payload
// in one call). Receives read with one recvmsg into a small per-socket read-ahead
// buffer, so a small message (header + payload) costs one system call; frames are
// parsed from it, and payload bytes are copied to the user's buffer only after the
// stripe's header was validated. A large payload's remainder is read straight into
// the user's buffer (the same call catches the next header in the read-ahead). Any failure (peer
// closed, corrupt header, tag/length mismatch, the peer's abandon record) breaks the connection:
// every pending operation completes with that error, which names the peer, and later posts return
// it.
//
// Thread safety: one thread at a time (see core/transport/transport.h).
#pragma once

#include <memory>
#include <vector>

#include "core/net/socket.h"
#include "core/transport/transport.h"
#include "transports/tcp/frame.h"
#include "transports/tcp/ring_queue.h"

namespace collie::tcp {

// The transport's epoll descriptor, shared so connections may outlive the transport.
struct EpollHandle {
  net::Socket fd;
};

class TcpConnection final : public Connection {
 public:
  // `socks` are connected, handshaken sockets in socket-index order.
  TcpConnection(int peer, int channel, std::vector<net::Socket> socks,
                std::shared_ptr<EpollHandle> epoll);
  ~TcpConnection() override;

  Status postSend(const void* data, size_t bytes, uint64_t tag, Completion* done) override;
  Status postRecv(void* data, size_t bytes, uint64_t tag, Completion* done) override;
  Status progress(bool* progressed) override;
  int peer() const override { return peer_; }
  // Abandon records (frame.h): written on every socket that is between frames, found in
  // the read-ahead of any socket (where the read that brought the collective's last
  // bytes also brings a record that had already arrived).
  void abandon(uint64_t tag, const Status& why) override;
  Status abandoned(uint64_t tag) const override;

 private:
  struct Op {
    uint8_t* data = nullptr;
    size_t bytes = 0;
    uint64_t tag = 0;
    Completion* done = nullptr;
    int stripesLeft = 0;
  };
  struct SendItem {
    uint64_t seq = 0;
    const uint8_t* payload = nullptr;
    size_t payloadBytes = 0;
    size_t sent = 0;  // of header + payload
    uint8_t header[kFrameHeaderBytes];
  };
  struct RecvItem {
    uint64_t seq = 0;
    FrameHeader expect;
    size_t got = 0;  // of header + payload
    uint8_t header[kFrameHeaderBytes];
  };
  struct Lane {
    net::Socket sock;
    RingQueue<SendItem> sends;
    RingQueue<RecvItem> recvs;
    std::unique_ptr<uint8_t[]> rx;  // read-ahead, kReadAheadBytes, allocated on first use
    size_t rxHead = 0;              // [rxHead, rxTail) are read, not yet parsed
    size_t rxTail = 0;
  };
  struct OpQueue {
    RingQueue<Op> ops;
    uint64_t frontSeq = 0;  // sequence number of ops.front()
    uint64_t nextSeq = 0;
    Op& at(uint64_t seq) { return ops[seq - frontSeq]; }
    void stripeDone(uint64_t seq);
  };

  Status progressSends(int lane, bool* progressed);
  Status progressRecvs(int lane, bool* progressed);
  // Moves up to `bytes` received bytes at `from` into the front receive of `lane`
  // (header first, validated once complete, then payload); *taken says how many.
  Status deliver(int lane, const uint8_t* from, size_t bytes, size_t* taken, bool* progressed);
  // Accounts `bytes` just read into the front receive's payload; completes it when full.
  void payloadArrived(int lane, size_t bytes, bool* progressed);
  Status checkHeader(int lane, const RecvItem& item, const FrameHeader& got);
  // The error for the peer's abandon record `got`, read on `lane`.
  Status abandonedError(int lane, const FrameHeader& got) const;
  Status fail(Status status);
  Status peerClosed(int lane, int err);
  size_t pendingOps() const { return sendQ_.ops.size() + recvQ_.ops.size(); }

  int peer_;
  int channel_;
  std::shared_ptr<EpollHandle> epoll_;
  std::vector<Lane> lanes_;
  OpQueue sendQ_;
  OpQueue recvQ_;
  Status broken_;
};

}  // namespace collie::tcp
