#include "core/engine/tag_matcher.h"

#include <cerrno>
#include <cstring>
#include <new>
#include <string>

namespace collie {

TagMatcher::TagMatcher(int rank, int nranks, int nchannels, ConnectionTable* connections)
    : rank_(rank), nchannels_(nchannels), connections_(connections), peers_(nranks) {
  for (Peer& peer : peers_) peer.channels.resize(nchannels);
}

void TagMatcher::reset() {
  for (Peer& peer : peers_) {
    peer.receives.clear();
    peer.held.clear();
    peer.channels.assign(nchannels_, Channel{});
  }
}

std::string TagMatcher::whose(int peer, const Key& key) const {
  return "tagged send/recv #" + std::to_string(key.second) + " with tag " +
         std::to_string(key.first) + " between rank " + std::to_string(rank_) + " and its peer " +
         std::to_string(peer);
}

Status TagMatcher::fail(int peer, Status status) {
  return status.withContext("tagged receives from peer " + std::to_string(peer) + " on rank " +
                            std::to_string(rank_));
}

Status TagMatcher::post(int peer, const PointToPointTag& tag, DataType dtype, size_t count,
                        uint8_t* buffer, const std::vector<Part>& parts) {
  Peer& p = peers_[peer];
  const Key key{tag.value, tag.sequence};
  auto held = p.held.find(key);
  if (held != p.held.end() && (held->second.count != count || held->second.dtype != dtype)) {
    return mismatchError(whose(peer, key) + ": peer " + std::to_string(peer) + " sent " +
                             std::to_string(held->second.count) + " elements of " +
                             std::string(dataTypeName(held->second.dtype)) +
                             ", this rank receives " + std::to_string(count) + " elements of " +
                             std::string(dataTypeName(dtype)),
                         peer);
  }
  auto [it, inserted] = p.receives.try_emplace(key);
  if (!inserted) return internalError(whose(peer, key) + ": posted twice");
  Receive& receive = it->second;
  receive.count = count;
  receive.dtype = dtype;
  receive.buffer = buffer;
  std::vector<int> landed;
  for (const Part& part : parts) {
    bool bound = false;
    if (held != p.held.end()) {
      for (const Held::HeldPart& hp : held->second.parts) {
        if (hp.channel != part.channel) continue;
        bound = true;
        if (hp.landed) landed.push_back(part.channel);
      }
    }
    receive.parts.push_back(Receive::RecvPart{part, bound, false});
    if (!bound) ++p.channels[part.channel].expecting;
  }
  // Parts still in flight into the held buffer are delivered when they land (onPayload).
  for (int channel : landed) deliverHeld(p, key, channel);
  return Status();
}

void TagMatcher::completePart(Peer& p, const Key& key, int channel, Status status) {
  auto it = p.receives.find(key);
  if (it == p.receives.end()) return;
  bool all = true;
  for (Receive::RecvPart& rp : it->second.parts) {
    if (rp.part.channel == channel && !rp.done) {
      rp.done = true;
      rp.part.done->complete(status);
    }
    all = all && rp.done;
  }
  if (all) p.receives.erase(it);
}

void TagMatcher::deliverHeld(Peer& p, const Key& key, int channel) {
  auto held = p.held.find(key);
  auto receive = p.receives.find(key);
  if (held == p.held.end() || receive == p.receives.end()) return;
  auto& parts = held->second.parts;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].channel != channel || !parts[i].landed) continue;
    if (parts[i].bytes > 0) {
      std::memcpy(receive->second.buffer + parts[i].offset,
                  held->second.data.get() + parts[i].offset, parts[i].bytes);
    }
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(i));
    break;
  }
  if (parts.empty()) p.held.erase(held);
  completePart(p, key, channel, Status());
}

Status TagMatcher::onEnvelope(int peer, int channel) {
  Peer& p = peers_[peer];
  Channel& ch = p.channels[channel];
  if (!ch.envelopeDone.status.isOk()) {
    Status status = ch.envelopeDone.status;
    if (ch.envelopeDone.hasPeerTag && status.code() == StatusCode::kMismatch) {
      const std::string what =
          describeDisagreement(envelopeFingerprint(), ch.envelopeDone.peerTag, rank_, peer);
      if (!what.empty()) status = mismatchError(what + ". " + status.message(), peer);
    }
    return fail(peer, status);
  }
  const TaggedEnvelope& e = ch.envelope;
  const Key key{e.tag, e.sequence};
  const DataType dtype = static_cast<DataType>(e.dtype);
  const uint64_t total = isValid(dtype) ? e.count * dataTypeSize(dtype) : 0;
  if (!isValid(dtype) || e.offset > total || e.bytes > total - e.offset) {
    return fail(
        peer,
        mismatchError("peer " + std::to_string(peer) + " sent a malformed envelope " + "(dtype " +
                          std::to_string(e.dtype) + ", count " + std::to_string(e.count) +
                          ", part of " + std::to_string(e.bytes) + " bytes at " +
                          std::to_string(e.offset) + ") on channel " + std::to_string(channel),
                      peer));
  }
  uint8_t* target = nullptr;
  auto receive = p.receives.find(key);
  if (receive != p.receives.end()) {
    Receive& r = receive->second;
    if (r.count != e.count || r.dtype != dtype) {
      return mismatchError(whose(peer, key) + ": peer " + std::to_string(peer) + " sends " +
                               std::to_string(e.count) + " elements of " +
                               std::string(dataTypeName(dtype)) + ", this rank receives " +
                               std::to_string(r.count) + " elements of " +
                               std::string(dataTypeName(r.dtype)),
                           peer);
    }
    Receive::RecvPart* match = nullptr;
    for (Receive::RecvPart& rp : r.parts) {
      if (rp.part.channel == channel && !rp.bound) match = &rp;
    }
    if (match == nullptr || match->part.offset != e.offset || match->part.bytes != e.bytes) {
      return mismatchError(whose(peer, key) + ": the peer's part on channel " +
                               std::to_string(channel) + " (" + std::to_string(e.bytes) +
                               " bytes at " + std::to_string(e.offset) +
                               ") is not one this rank's schedule expects there",
                           peer);
    }
    match->bound = true;
    --ch.expecting;
    ch.held = false;
    target = r.buffer + e.offset;
  } else {
    auto [it, created] = p.held.try_emplace(key);
    Held& h = it->second;
    if (created) {
      h.count = e.count;
      h.dtype = dtype;
      h.data.reset(new (std::nothrow) uint8_t[total > 0 ? total : 1]);
      if (h.data == nullptr) {
        p.held.erase(it);
        return fail(peer, systemError("holding the " + std::to_string(total) + "-byte " +
                                          whose(peer, key) + " until its receive is posted",
                                      ENOMEM));
      }
    } else if (h.count != e.count || h.dtype != dtype) {
      return fail(peer,
                  mismatchError(whose(peer, key) + ": its parts disagree on the count", peer));
    }
    h.parts.push_back(Held::HeldPart{channel, e.offset, e.bytes, false});
    ch.held = true;
    target = h.data.get() + e.offset;
  }
  ch.key = key;
  ch.payloadDone = Completion{};
  ch.state = Channel::State::kPayload;
  Connection* connection = (*connections_)[peer][channel].get();
  Status posted = connection->postRecv(
      target, e.bytes, makeTaggedFingerprint(e.sequence, dtype, e.count), &ch.payloadDone);
  if (!posted.isOk()) return fail(peer, posted);
  // The part usually came with its envelope: take it now rather than a turn later.
  bool moved = false;
  posted = connection->progress(&moved);
  return posted.isOk() ? posted : fail(peer, posted);
}

Status TagMatcher::onPayload(int peer, int channel) {
  Peer& p = peers_[peer];
  Channel& ch = p.channels[channel];
  ch.state = Channel::State::kIdle;
  if (!ch.payloadDone.status.isOk()) {
    return fail(peer, ch.payloadDone.status.withContext(whose(peer, ch.key)));
  }
  if (!ch.held) {
    completePart(p, ch.key, channel, Status());
    return Status();
  }
  auto held = p.held.find(ch.key);
  if (held == p.held.end()) return internalError(whose(peer, ch.key) + ": held part lost");
  for (Held::HeldPart& hp : held->second.parts) {
    if (hp.channel == channel) hp.landed = true;
  }
  // Its receive may have been posted while the part was on its way.
  if (p.receives.count(ch.key) != 0) deliverHeld(p, ch.key, channel);
  return Status();
}

Status TagMatcher::pump(int peer, bool* progressed) {
  Peer& p = peers_[peer];
  bool moved = true;
  while (moved) {
    moved = false;
    for (int c = 0; c < nchannels_; ++c) {
      Channel& ch = p.channels[c];
      switch (ch.state) {
        case Channel::State::kEnvelope:
          if (!ch.envelopeDone.done) break;
          COLLIE_RETURN_IF_ERROR(onEnvelope(peer, c));
          moved = true;
          break;
        case Channel::State::kPayload:
          if (!ch.payloadDone.done) break;
          COLLIE_RETURN_IF_ERROR(onPayload(peer, c));
          moved = true;
          break;
        case Channel::State::kIdle: {
          if (ch.expecting <= 0) break;
          ch.envelopeDone = Completion{};
          ch.state = Channel::State::kEnvelope;
          Connection* connection = (*connections_)[peer][c].get();
          Status posted = connection->postRecv(&ch.envelope, sizeof(TaggedEnvelope),
                                               envelopeFingerprint(), &ch.envelopeDone);
          if (!posted.isOk()) return fail(peer, posted);
          bool arrived = false;  // an envelope already on the wire lands now
          posted = connection->progress(&arrived);
          if (!posted.isOk()) return fail(peer, posted);
          moved = true;
          break;
        }
      }
    }
    *progressed = *progressed || moved;
  }
  return Status();
}

}  // namespace collie
