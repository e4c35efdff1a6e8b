// Test seam: a Connection that forwards to a real one and injects one fault into what
// this side sends (LevelDB's FaultInjectionTestEnv, for the transport seam), and a
// Transport that wraps every Connection it makes that way. Reliability tests use it
// where a broken link, a late or a damaged message is the point, instead of killing a
// process.
//
// Fault kinds (Fault, all on the sending side of one connection, counted per
// connection):
//   kDrop             the message-th send completes OK here but never reaches the peer
//   kDelay            the message-th send (and every later one, FIFO order holds)
//                     reaches the wire `delay` after it was posted
//   kTruncate         the message-th send goes out with its first keepBytes bytes only
//                     (same tag): the receiver sees a length mismatch
//   kCorrupt          the message-th send goes out with one payload byte flipped (a
//                     copy; the caller's buffer is untouched), or with its tag's lowest
//                     bit flipped (corruptTag, or an empty message): the receiver sees
//                     a tag mismatch
//   kCloseAfterBytes  the send that would take this side past closeAfterBytes payload
//                     bytes closes the connection instead: the wrapped connection is
//                     destroyed (a peer on a stream transport sees it close; others find
//                     out by their timeout), and every operation here, pending or
//                     later, fails with a RemoteError naming the peer
// Receives are forwarded untouched. Fault::armed delays the counting until a flag is set.
//
// FaultyTransport forwards everything to the wrapped transport except
// teamBoard() and deviceWindows() (null: every byte of a collective then
// passes through the connections, where the faults are), and caps each
// waitForActivity() at 1 ms so that a delayed message leaves on time.
//
// armFaultyTransport() puts a "faulty" entry in the process's TransportRegistry that
// wraps another registered transport; a Communicator created with
// Options::transport = "faulty" then runs the engine over faulty connections. Unarmed,
// the entry fails create() (unforced communicators skip it).
//
// Thread safety: a FaultyConnection/FaultyTransport is used like the one it wraps (one
// thread at a time). armFaultyTransport()/disarmFaultyTransport() may race with
// communicator creation on other threads (a mutex guards the plan), but a test arms
// before it creates communicators and disarms after.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/transport/transport.h"

namespace collie::testing {

struct Fault {
  enum class Kind { kNone, kDrop, kDelay, kTruncate, kCorrupt, kCloseAfterBytes };
  Kind kind = Kind::kNone;
  uint64_t message = 0;  // the send it hits, counted from 0 (all kinds but kCloseAfterBytes)
  std::chrono::milliseconds delay{0};  // kDelay
  size_t keepBytes = 0;                // kTruncate
  size_t corruptOffset = 0;            // kCorrupt: the byte flipped (the last if beyond)
  bool corruptTag = false;             // kCorrupt: flip the tag instead
  size_t closeAfterBytes = 0;          // kCloseAfterBytes
  // When set, sends are counted (and the fault can hit) only while it is true, so that
  // a test can let a communicator's creation traffic pass first.
  const std::atomic<bool>* armed = nullptr;

  static Fault none() { return {}; }
  static Fault drop(uint64_t message) { return {Kind::kDrop, message}; }
  static Fault delayed(uint64_t message, std::chrono::milliseconds delay) {
    Fault f{Kind::kDelay, message};
    f.delay = delay;
    return f;
  }
  static Fault truncate(uint64_t message, size_t keepBytes) {
    Fault f{Kind::kTruncate, message};
    f.keepBytes = keepBytes;
    return f;
  }
  static Fault corrupt(uint64_t message, size_t offset, bool tag = false) {
    Fault f{Kind::kCorrupt, message};
    f.corruptOffset = offset;
    f.corruptTag = tag;
    return f;
  }
  static Fault closeAfter(size_t bytes) {
    Fault f{Kind::kCloseAfterBytes};
    f.closeAfterBytes = bytes;
    return f;
  }
};

class FaultyConnection : public Connection {
 public:
  FaultyConnection(std::unique_ptr<Connection> inner, int channel, Fault fault)
      : inner_(std::move(inner)),
        peer_(inner_->peer()),
        channel_(channel),
        reduces_(inner_->reducesOnReceive()),
        fault_(fault) {}

  Status postSend(const void* data, size_t bytes, uint64_t tag, Completion* done) override {
    if (!closed_.isOk()) return closed_;
    const bool counted = fault_.armed == nullptr || fault_.armed->load();
    const uint64_t index = counted ? sends_++ : UINT64_MAX;
    if (counted && fault_.kind == Fault::Kind::kCloseAfterBytes) {
      if (sentBytes_ + bytes > fault_.closeAfterBytes) return close();
      sentBytes_ += bytes;
    }
    Held held{static_cast<const uint8_t*>(data), bytes, tag, done, Clock::now(), false};
    if (index == fault_.message) {
      switch (fault_.kind) {
        case Fault::Kind::kDrop:
          held.dropped = true;
          break;
        case Fault::Kind::kDelay:
          held.due += fault_.delay;
          break;
        case Fault::Kind::kTruncate:
          held.bytes = std::min(fault_.keepBytes, bytes);
          break;
        case Fault::Kind::kCorrupt:
          if (fault_.corruptTag || bytes == 0) {
            held.tag ^= 1;
          } else {
            auto& copy = copies_.emplace_back(held.data, held.data + bytes);
            copy[std::min(fault_.corruptOffset, bytes - 1)] ^= 0xFF;
            held.data = copy.data();
          }
          break;
        default:
          break;
      }
    }
    track(done);
    held_.push_back(held);
    return release(/*inProgress=*/false);
  }

  Status postRecv(void* data, size_t bytes, uint64_t tag, Completion* done) override {
    if (!closed_.isOk()) return closed_;
    track(done);
    return inner_->postRecv(data, bytes, tag, done);
  }

  bool reducesOnReceive() const override { return reduces_; }

  Status postRecvReduce(const ReduceOnReceive& reduce, size_t bytes, uint64_t tag,
                        Completion* done) override {
    if (!closed_.isOk()) return closed_;
    track(done);
    return inner_->postRecvReduce(reduce, bytes, tag, done);
  }

  Status progress(bool* progressed) override {
    if (!closed_.isOk()) return closed_;
    const size_t before = held_.size();
    Status st = release(/*inProgress=*/true);
    if (held_.size() != before) *progressed = true;
    if (!st.isOk()) return st;
    return inner_->progress(progressed);
  }

  int peer() const override { return peer_; }
  void abandon(uint64_t tag, const Status& why) override {
    if (closed_.isOk()) inner_->abandon(tag, why);
  }
  Status abandoned(uint64_t tag) const override { return inner_->abandoned(tag); }

 private:
  struct Held {
    const uint8_t* data;
    size_t bytes;
    uint64_t tag;
    Completion* done;
    Clock::time_point due;
    bool dropped;
  };

  // Hands the held sends that are due to the wrapped connection, in order. A dropped
  // send completes (only inside progress(), as the contract says) without leaving.
  Status release(bool inProgress) {
    while (!held_.empty()) {
      Held& h = held_.front();
      if (h.dropped) {
        if (!inProgress) break;
        h.done->complete();
      } else {
        if (Clock::now() < h.due) break;
        COLLIE_RETURN_IF_ERROR(inner_->postSend(h.data, h.bytes, h.tag, h.done));
      }
      held_.pop_front();
    }
    return Status();
  }

  void track(Completion* done) {
    if (tracked_.size() > 256) {
      std::erase_if(tracked_, [](Completion* c) { return c->done; });
    }
    tracked_.push_back(done);
  }

  Status close() {
    closed_ = remoteError("fault injection closed the connection to rank " + std::to_string(peer_) +
                              " on channel " + std::to_string(channel_) + " after " +
                              std::to_string(sentBytes_) + " bytes",
                          peer_);
    inner_.reset();  // the wrapped connection touches no completion after this
    held_.clear();
    for (Completion* c : tracked_) {
      if (!c->done) c->complete(closed_);
    }
    tracked_.clear();
    return closed_;
  }

  std::unique_ptr<Connection> inner_;
  const int peer_;
  const int channel_;
  const bool reduces_;
  const Fault fault_;
  uint64_t sends_ = 0;
  size_t sentBytes_ = 0;
  Status closed_;
  std::deque<Held> held_;
  std::deque<std::vector<uint8_t>> copies_;  // corrupted payloads, alive until we are
  std::vector<Completion*> tracked_;         // everything posted, for close()
};

class FaultyTransport : public Transport {
 public:
  // The fault of this rank's connection to `peer` on `channel`.
  using FaultOf = std::function<Fault(int peer, int channel)>;

  FaultyTransport(std::unique_ptr<Transport> inner, int nchannels, FaultOf faultOf)
      : inner_(std::move(inner)), nchannels_(nchannels), faultOf_(std::move(faultOf)) {}

  const char* name() const override { return inner_->name(); }
  TransportCaps caps() const override { return inner_->caps(); }
  bool canConnect(int peer, const std::string& peerHostId) const override {
    return inner_->canConnect(peer, peerHostId);
  }
  Result<std::vector<std::unique_ptr<Connection>>> connect(const std::vector<int>& peers) override {
    auto conns = inner_->connect(peers);
    if (!conns.isOk()) return conns.status();
    for (size_t i = 0; i < conns->size(); ++i) {
      const int channel = static_cast<int>(i % nchannels_);
      (*conns)[i] = std::make_unique<FaultyConnection>(std::move((*conns)[i]), channel,
                                                       faultOf_(peers[i / nchannels_], channel));
    }
    return conns;
  }
  void waitForActivity(std::chrono::microseconds maxWait) override {
    inner_->waitForActivity(
        std::min<std::chrono::microseconds>(maxWait, std::chrono::milliseconds(1)));
  }

 private:
  std::unique_ptr<Transport> inner_;
  const int nchannels_;
  const FaultOf faultOf_;
};

// The fault of rank `rank`'s connection to `peer` on `channel`.
using FaultPlan = std::function<Fault(int rank, int peer, int channel)>;

namespace faulty_detail {
struct Armed {
  std::mutex mutex;
  std::string inner;
  FaultPlan plan;
};
inline Armed& armed() {
  static Armed* a = new Armed;
  return *a;
}
inline Result<std::unique_ptr<Transport>> create(const TransportContext& ctx) {
  Armed& a = armed();
  std::string inner;
  FaultPlan plan;
  {
    std::lock_guard<std::mutex> lock(a.mutex);
    inner = a.inner;
    plan = a.plan;
  }
  if (!plan) return unsupported("faulty: no fault plan armed");
  const TransportFactory* factory = TransportRegistry::instance().find(inner);
  if (factory == nullptr) return invalidArgument("faulty: no transport '" + inner + "'");
  auto transport = factory->create(ctx);
  if (!transport.isOk()) return transport.status();
  const int rank = ctx.rank;
  return std::unique_ptr<Transport>(new FaultyTransport(
      std::move(*transport), ctx.nchannels,
      [plan, rank](int peer, int channel) { return plan(rank, peer, channel); }));
}
}  // namespace faulty_detail

// Makes Options::transport = "faulty" run `inner` with the faults of `plan`; returns
// "faulty". Registers the entry on first use.
inline std::string armFaultyTransport(const std::string& inner, FaultPlan plan) {
  static const bool registered = [] {
    TransportRegistry::instance().add(TransportFactory{"faulty", INT_MAX, &faulty_detail::create});
    return true;
  }();
  (void)registered;
  auto& a = faulty_detail::armed();
  std::lock_guard<std::mutex> lock(a.mutex);
  a.inner = inner;
  a.plan = std::move(plan);
  return "faulty";
}

inline void disarmFaultyTransport() {
  auto& a = faulty_detail::armed();
  std::lock_guard<std::mutex> lock(a.mutex);
  a.plan = nullptr;
}

}  // namespace collie::testing
