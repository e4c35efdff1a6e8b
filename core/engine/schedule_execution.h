// Execution: one collective's schedule being run on real connections.
//
// Owned and driven by the engine's progress thread only. advance() posts the
// receives and sends of each channel's current step, runs reductions when data has
// landed (or, where the connection reduces on receive and reduceOnReceive is set, lets
// the transport reduce as the data lands), and never blocks. A step is finished when its receive
// (and reduction) is done; its send may still be in flight and is tracked until it completes, so
// that ranks pushing into each other's full buffers at the same time cannot deadlock. The
// collective is finished when every channel ran all its steps and every send
// completed.
//
// A tagged send or receive (PointToPointTag::tagged) runs the same one-step-per-channel schedule
// as an untagged one, matched by peer and tag instead of by order: each part of a send
// goes behind its envelope (TaggedEnvelope), and a receive hands its parts to the
// executor's TagMatcher (core/engine/tag_matcher.h), which completes each channel's
// receive when its part landed (straight, or from a send it held).
//
// A team step (core/plan/team_step.h) is the Executor's to run before an Execution exists;
// an Execution is made only for a collective whose team declined it, so here the team
// step does nothing and the fallback steps after it run.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/engine/tag_matcher.h"
#include "core/kernel/reduce_backend.h"
#include "core/plan/fingerprint.h"
#include "core/plan/schedule.h"
#include "core/transport/transport.h"

namespace collie {

// Per-channel memory reused across collectives (scratch slots and receive staging).
struct ChannelMemory {
  std::vector<uint8_t> scratch;
  std::vector<uint8_t> staging;
};

class Execution {
 public:
  // `p2p` and `matcher`: a tagged send or receive and the matcher of its receives (which
  // must outlive the execution); untagged by default.
  Execution(std::shared_ptr<const Schedule> schedule, const void* input, void* output, uint64_t tag,
            ConnectionTable* connections, std::vector<ChannelMemory>* memory,
            bool reduceOnReceive = true, const PointToPointTag& p2p = PointToPointTag{},
            TagMatcher* matcher = nullptr);

  // Makes a finished execution run `schedule` from its start, on the same connections,
  // channel memory and matcher, keeping the capacity of its own containers: the engine
  // reuses finished executions so that a small send or receive allocates nothing here.
  // Only once finished() (no transport points at its completions any more).
  void restart(std::shared_ptr<const Schedule> schedule, const void* input, void* output,
               uint64_t tag, bool reduceOnReceive, const PointToPointTag& p2p);

  // One turn: moves every channel as far as it can without blocking, then lists in
  // *active the connections it still has operations in flight on (appended, none twice)
  // and gives each one it adds a progress() call: a connection an execution of the same
  // batch listed earlier in the turn was already progressed by it. The engine waits on
  // *active when nothing moved. *progressed tells whether anything moved. Returns an
  // error (naming the peer) when a step or a connection failed.
  Status advance(bool* progressed, std::vector<Connection*>* active);
  // Whether every channel ran all its steps and every send completed, as of the last
  // advance().
  bool finished() const { return finished_; }

  // Once finished: the error of the first connection this collective received from whose
  // peer left a record that it failed the collective (Connection::abandoned), else OK.
  Status abandonedByPeer() const;
  // "waiting for rank 3 (receive, channel 0, step 5 of 12)" for timeout messages.
  std::string describeWaits() const;
  // The first peer this execution is waiting for, or -1.
  int firstWaitedPeer() const;
  // After a kMismatch: the tag carried by the rejected message and its sender, when a
  // transport recorded it on a receive. False otherwise.
  bool rejectedTag(uint64_t* peerTag, int* peer) const;
  uint64_t tag() const { return tag_; }
  const PointToPointTag& p2p() const { return p2p_; }

 private:
  struct PendingSend {
    Completion done;
    Connection* connection;
    bool fromScratch;
    uint64_t offset;
    uint64_t bytes;
  };
  struct ChannelState {
    size_t next = 0;  // index of the current step
    bool recvPosted = false;
    bool recvReduced = false;  // posted with postRecvReduce(): nothing left to reduce
    Completion recv;
    uint8_t* recvTarget = nullptr;
    std::deque<PendingSend> sends;  // pointer-stable: connections hold &sends[i].done
    // As constructed, keeping the capacity of `sends`.
    void reset();
  };

  uint8_t* pointer(int channel, const Slice& slice) const;
  // Moves the channels (advance()'s first part); whether all are done in *done.
  Status moveChannels(bool* progressed, bool* done);
  // Appends the connections with operations in flight to *out, those not in it yet.
  void activeConnections(std::vector<Connection*>* out) const;
  Status startStep(int channel, const Step& step, bool* started);
  Status finishStep(int channel, const Step& step);
  // One progress() call on every connection this collective has operations on.
  Status progressConnections(int channel, const Step& step);
  // One progress() call on connections[first...].
  static Status progressEach(const std::vector<Connection*>& connections, size_t first,
                             bool* progressed);
  Status postSend(int channel, const Step& step, const uint8_t* data, bool fromScratch,
                  uint64_t offset);
  // A tagged send's part on `channel`: its envelope, then its bytes.
  Status postTaggedSend(int channel, const Step& step);
  // A tagged receive: hands every channel's part to the matcher (once).
  Status postTaggedReceive();
  bool scratchBusy(int channel, uint64_t offset, uint64_t bytes) const;
  Status decorate(const Status& status, int channel, const Step& step) const;

  std::shared_ptr<const Schedule> schedule_;
  const uint8_t* input_;
  uint8_t* output_;
  uint64_t tag_;
  ConnectionTable* connections_;
  std::vector<ChannelMemory>* memory_;
  const ReduceBackend& kernels_;
  size_t elemSize_;
  std::vector<ChannelState> channels_;
  std::vector<Connection*> polled_;  // reused by progressConnections()
  bool reduceOnReceive_;
  PointToPointTag p2p_;
  TagMatcher* matcher_;
  bool finished_ = false;
  bool taggedReceive_ = false;             // p2p_.tagged and a receive
  bool taggedPosted_ = false;              // postTaggedReceive() ran
  std::vector<TaggedEnvelope> envelopes_;  // a tagged send's, per channel
  std::vector<TagMatcher::Part> parts_;    // reused by postTaggedReceive()
};

}  // namespace collie
