// UcxConnection: one (peer, channel) of the ucx transport over UCP tagged messages.
//
// Every collie message is a 24-byte header {magic, sequence, collective tag, length}
// sent with a header tag; messages up to kInlineBytes carry their payload right after
// the header, larger ones follow as a second UCP message with a data tag of the same
// sequence number. The receiver posts the header receive when postRecv() is called,
// checks magic, sequence, tag and length against what it posted, and only then posts
// the data receive into the user's buffer (large) or copies the inline payload
// (small). A tag or length mismatch therefore fails with kMismatch, naming the peer,
// before any byte reaches the user's buffer. The check and the data receive run in
// the header receive's completion callback, inside ucp_worker_progress(), before UCX
// handles the data fragments that follow the header on the wire: posted any later,
// they would land in UCX's unexpected queue and be copied twice. The data message's length is
// checked again on completion (UCX reports a longer one as truncated); a peer that sends a shorter
// data message than its own header announced breaks the protocol, and those bytes have been written
// (only a corrupt or malicious peer can do that).
//
// Sequence numbers make every UCP tag unique per (sender, channel), so FIFO matching
// per connection holds regardless of how UCX orders arrivals across lanes.
// A rank that fails a collective leaves each peer an abandon record (Connection::abandon):
// a 16-byte message {collective tag, status code} with an abandon tag, sent and flushed
// for at most kAbandonFlush. abandoned() probes the worker's unexpected queue for the
// peer's record of that collective (one worker progress round first, no system call
// beyond what progress does) and keeps what it found, so asking again gives the same
// answer.
//
// Operations complete in post order per direction. Any failure (peer gone, mismatch,
// bad header) breaks the connection: pending UCP requests are cancelled, every
// pending operation completes with the error, and later posts return it.
//
// Thread safety: one thread at a time (see core/transport/transport.h).
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "core/transport/transport.h"
#include "transports/ucx/ucx_reducing_receive.h"
#include "transports/ucx/ucx_worker.h"

namespace collie::ucx {

inline constexpr size_t kHeaderBytes = 24;
inline constexpr size_t kInlineBytes = 8192;
inline constexpr uint32_t kHeaderMagic = 0x58435543;  // "CUCX"
inline constexpr size_t kAbandonBytes = 16;           // {collective tag, status code}
inline constexpr std::chrono::milliseconds kAbandonFlush{50};

class UcxConnection final : public Connection {
 public:
  UcxConnection(std::shared_ptr<UcxWorker> worker, int peer, int channel);
  ~UcxConnection() override;

  Status postSend(const void* data, size_t bytes, uint64_t tag, Completion* done) override;
  Status postRecv(void* data, size_t bytes, uint64_t tag, Completion* done) override;
  // Large messages reduce out of UCX's receive buffers through a generic datatype
  // (ReducingReceive); inline ones out of the header buffer.
  bool reducesOnReceive() const override;
  Status postRecvReduce(const ReduceOnReceive& reduce, size_t bytes, uint64_t tag,
                        Completion* done) override;
  Status progress(bool* progressed) override;
  int peer() const override { return peer_; }
  void abandon(uint64_t tag, const Status& why) override;
  Status abandoned(uint64_t tag) const override;

 private:
  enum class Stage { kHeader, kData, kDone };
  struct Op {
    UcxConnection* owner = nullptr;
    Completion* done = nullptr;
    uint8_t* data = nullptr;
    size_t bytes = 0;
    uint64_t tag = 0;
    uint32_t seq = 0;
    Stage stage = Stage::kHeader;
    void* headerRequest = nullptr;  // in flight, else nullptr
    void* dataRequest = nullptr;
    ucp_tag_recv_info_t info{};
    // Receives: set by onHeader() when the header receive completed.
    bool headerArrived = false;
    ucs_status_t headerStatus = UCS_OK;
    // Given up on while UCX may still complete a request into it: kept by the worker.
    bool orphaned = false;
    bool reducing = false;  // postRecvReduce(): the data goes through `reducer`
    ReducingReceive reducer;
    std::vector<uint8_t> buffer;  // header (+ inline payload)
  };

  // The header receive's completion callback (inside ucp_worker_progress, or inside
  // ucp_tag_recv_nbx when the header was already there): records it and, when the
  // header checks out and a data message follows, posts the data receive.
  static void onHeader(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                       void* user);
  void postDataRecv(Op& op);

  Status postRecvOp(void* data, size_t bytes, uint64_t tag, Completion* done,
                    const ReduceOnReceive* reduce);
  Status progressSend(Op& op, bool* progressed);
  Status progressRecv(Op& op, bool* progressed);
  Status checkHeader(Op& op);
  // Records the first failure, cancels every request, completes every pending op.
  Status fail(Status status);
  void releaseRequests(std::deque<std::unique_ptr<Op>>& ops);
  // Empties `ops`; orphaned ops go to the worker, which outlives their requests.
  void dropOps(std::deque<std::unique_ptr<Op>>& ops);
  // Ops (with their header buffers) are recycled: no allocation per message once warm.
  std::unique_ptr<Op> acquireOp();
  void recycle(std::unique_ptr<Op> op);

  // The peer's abandon record, once abandoned() took it off the worker's queue.
  struct AbandonRecord {
    uint64_t tag = 0;
    uint64_t code = 0;
  };
  Status abandonedError(const AbandonRecord& record) const;

  std::shared_ptr<UcxWorker> worker_;
  mutable std::optional<AbandonRecord> peerAbandoned_;
  int peer_;
  int channel_;
  std::optional<ucp_datatype_t> reducingDatatype_;  // empty: reducesOnReceive() is false
  uint32_t sendSeq_ = 0;
  uint32_t recvSeq_ = 0;
  std::deque<std::unique_ptr<Op>> sends_;
  std::deque<std::unique_ptr<Op>> recvs_;
  std::vector<std::unique_ptr<Op>> spare_;
  Status broken_;
  bool releasing_ = false;  // requests are being cancelled: post no data receives
};

}  // namespace collie::ucx
