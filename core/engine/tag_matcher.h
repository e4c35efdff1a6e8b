// TagMatcher: the receive side of tagged point-to-point messages, per peer.
//
// A connection delivers messages in the sender's order, but a tagged receive matches the
// n-th send from its peer with its own tag (docs/decisions/p2p-tags.md): the n-th send to
// rank P with tag t meets P's n-th receive from this rank with tag t, whatever order the
// receives of different tags were posted in. So each part of a tagged send (one per
// channel the schedule uses, as untagged) travels behind an envelope (TaggedEnvelope: the
// tag, the sequence number among the sends with that tag, the count, dtype and the part's
// place), and the matcher reads the envelopes of each (peer, channel) and lands each part
// either in the posted receive with that tag and sequence number, or, when none is posted
// yet, in a buffer it holds for it (MPI's unexpected messages). A receive posted later
// takes its parts from there. Sends need no matcher: Execution puts the envelope first.
//
// The matcher reads a channel only while a posted receive still expects a part on it (a
// receive of count elements expects one where its own schedule has one: the sender's
// schedule of the same count and dtype has the same), one envelope at a time, so that
// nothing is left posted on a connection once the tagged receives finished, and
// collectives (or untagged point-to-point, when the pair uses no tags) can use it after.
// So the connections a tagged receive waits on are those of its own unfinished parts
// (Execution::activeConnections): a channel is read only for them.
// A receive whose send never arrives is what the engine's timeout catches; a send whose
// count or dtype differs from its receive's fails the receive with Mismatch naming the
// peer, the tag and both counts (the sender learns it from the receiver's failure).
//
// Thread safety: used only by the thread holding the engine's running claim, like the
// connections it reads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collie/status.h"
#include "core/plan/fingerprint.h"
#include "core/transport/transport.h"

namespace collie {

// Connections indexed [peer][channel]; null for this rank itself.
using ConnectionTable = std::vector<std::vector<std::unique_ptr<Connection>>>;

// What travels ahead of each part of a tagged send (host byte order: both ends run on
// one architecture, as every other header collie writes).
struct TaggedEnvelope {
  int64_t tag = 0;
  uint64_t sequence = 0;  // among this pair's sends with this tag
  uint64_t count = 0;     // elements of the whole send
  uint64_t offset = 0;    // bytes: where this part starts
  uint64_t bytes = 0;     // bytes in this part (the message behind the envelope)
  uint32_t dtype = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(TaggedEnvelope) == 48);

class TagMatcher {
 public:
  // `connections` ([peer][channel]) must outlive the matcher's use (reset() before
  // they are destroyed).
  TagMatcher(int rank, int nranks, int nchannels, ConnectionTable* connections);

  // One part of a receive: `bytes` at `offset` of its buffer arrive on `channel`, and
  // `done` completes (OK, or the error) when they landed.
  struct Part {
    int channel;
    uint64_t offset;
    uint64_t bytes;
    Completion* done;
  };
  // Registers a tagged receive of `count` elements of `dtype` into `buffer` from `peer`
  // (tag.value, tag.sequence). Parts already held land at once; the others when their
  // envelopes arrive (pump()). Mismatch when a held send of that tag and sequence
  // number has another count or dtype. `buffer` and each `done` must stay valid until
  // every part completed (or the connections are closed).
  Status post(int peer, const PointToPointTag& tag, DataType dtype, size_t count, uint8_t* buffer,
              const std::vector<Part>& parts);
  // Moves what arrived from `peer` as far as it goes without blocking: finished envelope
  // and part receives are bound or landed, the next envelope is posted where a receive
  // still expects a part. *progressed tells whether anything moved. An error (a broken
  // connection, a message of the other kind, a count or dtype that differs) names the
  // peer and the tag; the receives of that peer then fail with it.
  Status pump(int peer, bool* progressed);
  // Forgets everything (the connections are about to be destroyed after a failure).
  void reset();

 private:
  using Key = std::pair<int64_t, uint64_t>;  // tag, sequence
  // A send that arrived (or is arriving) before its receive was posted.
  struct Held {
    uint64_t count = 0;
    DataType dtype = DataType::kUint8;
    std::unique_ptr<uint8_t[]> data;
    struct HeldPart {
      int channel;
      uint64_t offset;
      uint64_t bytes;
      bool landed;
    };
    std::vector<HeldPart> parts;
  };
  struct Receive {
    uint64_t count = 0;
    DataType dtype = DataType::kUint8;
    uint8_t* buffer = nullptr;
    struct RecvPart {
      Part part;
      bool bound;  // its envelope arrived (or it was held): no longer expected
      bool done;
    };
    std::vector<RecvPart> parts;
  };
  // What one (peer, channel) is reading.
  struct Channel {
    enum class State { kIdle, kEnvelope, kPayload } state = State::kIdle;
    TaggedEnvelope envelope;
    Completion envelopeDone;
    Completion payloadDone;
    Key key;            // the part being read: of this send
    bool held = false;  // into a Held buffer (else straight into the Receive's)
    int expecting = 0;  // parts of posted receives whose envelope has not arrived
  };
  struct Peer {
    std::map<Key, Receive> receives;
    std::map<Key, Held> held;
    std::vector<Channel> channels;
  };

  Status onEnvelope(int peer, int channel);
  Status onPayload(int peer, int channel);
  // Copies the held part (channel c) of `key` into its receive and completes it; drops
  // the held send once every part is copied, and the receive once every part is done.
  void deliverHeld(Peer& p, const Key& key, int channel);
  void completePart(Peer& p, const Key& key, int channel, Status status);
  Status fail(int peer, Status status);
  std::string whose(int peer, const Key& key) const;

  const int rank_;
  const int nchannels_;
  ConnectionTable* connections_;
  std::vector<Peer> peers_;
};

}  // namespace collie
