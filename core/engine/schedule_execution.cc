#include "core/engine/schedule_execution.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/plan/fingerprint.h"

namespace collie {

namespace {
// Reductions larger than this are cut into slices with transport progress in between.
constexpr size_t kReduceSliceBytes = 256 * 1024;

bool receives(StepKind kind) {
  return kind != StepKind::kSend && kind != StepKind::kCopy && kind != StepKind::kTeam;
}
bool reduces(StepKind kind) {
  return kind == StepKind::kRecvReduceSend || kind == StepKind::kRecvReduceCopy;
}
}  // namespace

Execution::Execution(std::shared_ptr<const Schedule> schedule, const void* input, void* output,
                     uint64_t tag, ConnectionTable* connections, std::vector<ChannelMemory>* memory,
                     bool reduceOnReceive, const PointToPointTag& p2p, TagMatcher* matcher)
    : connections_(connections), memory_(memory), kernels_(hostReduceBackend()), matcher_(matcher) {
  restart(std::move(schedule), input, output, tag, reduceOnReceive, p2p);
}

void Execution::restart(std::shared_ptr<const Schedule> schedule, const void* input, void* output,
                        uint64_t tag, bool reduceOnReceive, const PointToPointTag& p2p) {
  schedule_ = std::move(schedule);
  input_ = static_cast<const uint8_t*>(input);
  output_ = static_cast<uint8_t*>(output);
  tag_ = tag;
  elemSize_ = dataTypeSize(schedule_->args.dtype);
  reduceOnReceive_ = reduceOnReceive;
  p2p_ = p2p;
  finished_ = false;
  taggedReceive_ = false;
  taggedPosted_ = false;
  envelopes_.clear();
  const size_t channels = schedule_->channels.size();
  if (channels_.size() > channels) channels_.resize(channels);
  for (ChannelState& state : channels_) state.reset();
  channels_.resize(channels);
  if (p2p_.tagged) {
    taggedReceive_ = schedule_->args.kind == CollectiveKind::kRecv;
    if (!taggedReceive_) envelopes_.resize(schedule_->channels.size());
  }
  // Size the reusable channel memory for this schedule.
  for (size_t c = 0; c < schedule_->channels.size(); ++c) {
    ChannelMemory& mem = (*memory_)[c];
    if (mem.scratch.size() < schedule_->scratchBytesPerChannel) {
      mem.scratch.resize(schedule_->scratchBytesPerChannel);
    }
    uint64_t staging = 0;
    for (const Step& step : schedule_->channels[c]) {
      if (reduces(step.kind) && step.dst.buffer != BufferId::kScratch) {
        staging = std::max(staging, step.bytes);
      }
    }
    if (mem.staging.size() < staging) mem.staging.resize(staging);
  }
}

void Execution::ChannelState::reset() {
  next = 0;
  recvPosted = false;
  recvReduced = false;
  recv = Completion{};
  recvTarget = nullptr;
  sends.clear();
}

uint8_t* Execution::pointer(int channel, const Slice& slice) const {
  switch (slice.buffer) {
    case BufferId::kInput:
      return const_cast<uint8_t*>(input_) + slice.offset;
    case BufferId::kOutput:
      return output_ + slice.offset;
    case BufferId::kScratch:
      return (*memory_)[channel].scratch.data() + slice.offset;
  }
  return nullptr;
}

bool Execution::scratchBusy(int channel, uint64_t offset, uint64_t bytes) const {
  for (const PendingSend& send : channels_[channel].sends) {
    if (send.fromScratch && !send.done.done && send.offset < offset + bytes &&
        offset < send.offset + send.bytes) {
      return true;
    }
  }
  return false;
}

Status Execution::decorate(const Status& status, int channel, const Step& step) const {
  std::string where = describeOperation(tag_, schedule_->args, p2p_) + " (" +
                      std::to_string(schedule_->args.count * elemSize_) + " bytes, " +
                      std::string(algorithmName(schedule_->algorithm)) + ", channel " +
                      std::to_string(channel) + ", step " +
                      std::to_string(channels_[channel].next) + " " + stepKindName(step.kind) +
                      ") on rank " + std::to_string(schedule_->rank);
  return status.withContext(where);
}

Status Execution::postSend(int channel, const Step& step, const uint8_t* data, bool fromScratch,
                           uint64_t offset) {
  Connection* connection = (*connections_)[step.sendPeer][channel].get();
  ChannelState& state = channels_[channel];
  state.sends.push_back(PendingSend{Completion{}, connection, fromScratch, offset, step.bytes});
  Status posted = connection->postSend(data, step.bytes, tag_, &state.sends.back().done);
  return posted.isOk() ? posted : decorate(posted, channel, step);
}

Status Execution::postTaggedSend(int channel, const Step& step) {
  Connection* connection = (*connections_)[step.sendPeer][channel].get();
  ChannelState& state = channels_[channel];
  TaggedEnvelope& envelope = envelopes_[channel];
  envelope.tag = p2p_.value;
  envelope.sequence = p2p_.sequence;
  envelope.count = schedule_->args.count;
  envelope.offset = step.src.offset;
  envelope.bytes = step.bytes;
  envelope.dtype = static_cast<uint32_t>(schedule_->args.dtype);
  // Two sends on one connection complete in order: the envelope's entry retires first.
  state.sends.push_back(PendingSend{Completion{}, connection, false, 0, sizeof(envelope)});
  Status posted = connection->postSend(&envelope, sizeof(envelope), envelopeFingerprint(),
                                       &state.sends.back().done);
  if (!posted.isOk()) return decorate(posted, channel, step);
  return postSend(channel, step, pointer(channel, step.src), false, step.src.offset);
}

Status Execution::postTaggedReceive() {
  taggedPosted_ = true;
  std::vector<TagMatcher::Part>& parts = parts_;
  parts.clear();
  for (size_t c = 0; c < channels_.size(); ++c) {
    for (const Step& step : schedule_->channels[c]) {
      ChannelState& state = channels_[c];
      state.recv = Completion{};
      state.recvTarget = pointer(static_cast<int>(c), step.dst);
      state.recvPosted = true;
      parts.push_back(
          TagMatcher::Part{static_cast<int>(c), step.dst.offset, step.bytes, &state.recv});
    }
  }
  Status posted = matcher_->post(schedule_->args.peer, p2p_, schedule_->args.dtype,
                                 schedule_->args.count, output_, parts);
  if (!posted.isOk()) {
    return posted.withContext(describeOperation(tag_, schedule_->args, p2p_) + " on rank " +
                              std::to_string(schedule_->rank));
  }
  return Status();
}

Status Execution::startStep(int channel, const Step& step, bool* started) {
  ChannelState& state = channels_[channel];
  *started = false;
  if (step.kind == StepKind::kTeam) {  // the team declined it: the fallback follows
    *started = true;
    return Status();
  }
  if (step.kind == StepKind::kCopy) {
    uint8_t* src = pointer(channel, step.src);
    uint8_t* dst = pointer(channel, step.dst);
    if (step.divisor > 1) {
      kernels_.divide(dst, src, step.bytes / elemSize_, schedule_->args.dtype, step.divisor);
    } else if (src != dst && step.bytes > 0) {
      std::memmove(dst, src, step.bytes);
    }
    *started = true;
    return Status();
  }
  if (step.kind == StepKind::kSend) {
    if (p2p_.tagged) {
      COLLIE_RETURN_IF_ERROR(postTaggedSend(channel, step));
      *started = true;
      return Status();
    }
    COLLIE_RETURN_IF_ERROR(postSend(channel, step, pointer(channel, step.src),
                                    step.src.buffer == BufferId::kScratch, step.src.offset));
    *started = true;
    return Status();
  }
  // A receive. Reductions receive into staging (or straight into their scratch slot,
  // which must not still be the source of an unfinished send), or let a transport that
  // can reduce the data into the destination as it lands.
  Connection* connection = (*connections_)[step.recvPeer][channel].get();
  const bool reduceOnReceive = reduces(step.kind) && reduceOnReceive_ &&
                               connection->reducesOnReceive() && step.bytes % elemSize_ == 0;
  uint8_t* target;
  if (reduces(step.kind)) {
    if (step.dst.buffer == BufferId::kScratch) {
      if (scratchBusy(channel, step.dst.offset, step.bytes)) return Status();
      target = pointer(channel, step.dst);
    } else {
      target = reduceOnReceive ? nullptr : (*memory_)[channel].staging.data();
    }
  } else {
    target = pointer(channel, step.dst);
  }
  state.recv = Completion{};
  state.recvTarget = target;
  state.recvReduced = reduceOnReceive;
  Status posted;
  if (reduceOnReceive) {
    ReduceOnReceive reduce;
    reduce.dst = pointer(channel, step.dst);
    reduce.own = pointer(channel, step.src);
    reduce.dtype = schedule_->args.dtype;
    reduce.op = schedule_->args.op;
    reduce.divisor = step.divisor;
    reduce.incomingFirst = step.incomingFirst;
    reduce.kernels = &kernels_;
    posted = connection->postRecvReduce(reduce, step.bytes, tag_, &state.recv);
  } else {
    posted = connection->postRecv(target, step.bytes, tag_, &state.recv);
  }
  if (!posted.isOk()) return decorate(posted, channel, step);
  state.recvPosted = true;
  if (step.kind == StepKind::kSendRecv) {
    COLLIE_RETURN_IF_ERROR(postSend(channel, step, pointer(channel, step.src),
                                    step.src.buffer == BufferId::kScratch, step.src.offset));
  }
  *started = true;
  return Status();
}

Status Execution::progressConnections(int channel, const Step& step) {
  polled_.clear();
  activeConnections(&polled_);
  bool progressed = false;
  Status status = progressEach(polled_, 0, &progressed);
  return status.isOk() ? status : decorate(status, channel, step);
}

Status Execution::progressEach(const std::vector<Connection*>& connections, size_t first,
                               bool* progressed) {
  for (size_t i = first; i < connections.size(); ++i) {
    bool moved = false;
    COLLIE_RETURN_IF_ERROR(connections[i]->progress(&moved));
    *progressed = *progressed || moved;
  }
  return Status();
}

Status Execution::finishStep(int channel, const Step& step) {
  ChannelState& state = channels_[channel];
  state.recvPosted = false;
  if (reduces(step.kind)) {
    uint8_t* dst = pointer(channel, step.dst);
    if (state.recvReduced) {  // the transport reduced it as it landed
      state.recvReduced = false;
      if (step.kind == StepKind::kRecvReduceSend) {
        return postSend(channel, step, dst, step.dst.buffer == BufferId::kScratch, step.dst.offset);
      }
      return Status();
    }
    const uint8_t* own = pointer(channel, step.src);
    const uint8_t* incoming = state.recvTarget;
    if (step.incomingFirst) std::swap(own, incoming);
    // Large reductions run in slices with a progress pass over this collective's
    // connections in between: transports that move bytes only inside progress() (ucx
    // over tcp) keep their wires busy while the CPU reduces.
    const size_t count = step.bytes / elemSize_;
    const size_t slice = std::max<size_t>(1, kReduceSliceBytes / elemSize_);
    for (size_t done = 0; done < count; done += slice) {
      const size_t n = std::min(slice, count - done);
      const size_t at = done * elemSize_;
      kernels_.reduce(dst + at, own + at, incoming + at, n, schedule_->args.dtype,
                      schedule_->args.op, step.divisor);
      if (done + n < count) COLLIE_RETURN_IF_ERROR(progressConnections(channel, step));
    }
    if (step.kind == StepKind::kRecvReduceSend) {
      return postSend(channel, step, dst, step.dst.buffer == BufferId::kScratch, step.dst.offset);
    }
  } else if (step.kind == StepKind::kRecvCopySend) {
    return postSend(channel, step, pointer(channel, step.dst),
                    step.dst.buffer == BufferId::kScratch, step.dst.offset);
  }
  return Status();
}

Status Execution::advance(bool* progressed, std::vector<Connection*>* active) {
  bool done = false;
  COLLIE_RETURN_IF_ERROR(moveChannels(progressed, &done));
  finished_ = done;
  const size_t listed = active->size();
  activeConnections(active);
  Status status = progressEach(*active, listed, progressed);
  if (status.isOk()) return status;
  return status.withContext(describeOperation(tag_, schedule_->args, p2p_) + " on rank " +
                            std::to_string(schedule_->rank));
}

Status Execution::moveChannels(bool* progressed, bool* done) {
  if (taggedReceive_) {
    // Its channels' receives are the matcher's to post and complete.
    if (!taggedPosted_) {
      COLLIE_RETURN_IF_ERROR(postTaggedReceive());
      *progressed = true;
    }
    Status pumped = matcher_->pump(schedule_->args.peer, progressed);
    if (!pumped.isOk()) {
      return pumped.withContext(describeOperation(tag_, schedule_->args, p2p_) + " on rank " +
                                std::to_string(schedule_->rank));
    }
  }
  *done = true;
  for (size_t c = 0; c < channels_.size(); ++c) {
    ChannelState& state = channels_[c];
    const auto& steps = schedule_->channels[c];
    // Retire completed sends (they complete in order per connection, not across).
    while (!state.sends.empty() && state.sends.front().done.done) {
      if (!state.sends.front().done.status.isOk()) {
        return decorate(state.sends.front().done.status, c,
                        steps[std::min(state.next, steps.size() - 1)]);
      }
      state.sends.pop_front();
      *progressed = true;
    }
    for (const PendingSend& send : state.sends) {
      if (send.done.done && !send.done.status.isOk()) {
        return decorate(send.done.status, c, steps[std::min(state.next, steps.size() - 1)]);
      }
    }
    while (state.next < steps.size()) {
      const Step& step = steps[state.next];
      if (!state.recvPosted) {
        bool started = false;
        COLLIE_RETURN_IF_ERROR(startStep(c, step, &started));
        if (!started) break;
        *progressed = true;
        if (!receives(step.kind)) {
          ++state.next;
          continue;
        }
      }
      if (!state.recv.done) break;
      if (!state.recv.status.isOk()) return decorate(state.recv.status, c, step);
      COLLIE_RETURN_IF_ERROR(finishStep(c, step));
      ++state.next;
      *progressed = true;
    }
    *done = *done && state.next == steps.size() && state.sends.empty();
  }
  return Status();
}

Status Execution::abandonedByPeer() const {
  for (size_t c = 0; c < channels_.size(); ++c) {
    const Connection* last = nullptr;
    for (const Step& step : schedule_->channels[c]) {
      if (!receives(step.kind)) continue;
      const Connection* connection = (*connections_)[step.recvPeer][c].get();
      if (connection == last) continue;
      last = connection;
      COLLIE_RETURN_IF_ERROR(connection->abandoned(tag_));
    }
  }
  return Status();
}

void Execution::activeConnections(std::vector<Connection*>* out) const {
  auto add = [out](Connection* connection) {
    for (Connection* known : *out) {
      if (known == connection) return;
    }
    out->push_back(connection);
  };
  for (size_t c = 0; c < channels_.size(); ++c) {
    const ChannelState& state = channels_[c];
    const auto& steps = schedule_->channels[c];
    if (state.next < steps.size()) {
      const Step& step = steps[state.next];
      if (receives(step.kind)) add((*connections_)[step.recvPeer][c].get());
    }
    for (const PendingSend& send : state.sends) {
      if (!send.done.done) add(send.connection);
    }
  }
}

std::string Execution::describeWaits() const {
  std::string text;
  for (size_t c = 0; c < channels_.size(); ++c) {
    const ChannelState& state = channels_[c];
    const auto& steps = schedule_->channels[c];
    if (state.next < steps.size() && receives(steps[state.next].kind)) {
      if (!text.empty()) text += "; ";
      text += "waiting for rank " + std::to_string(steps[state.next].recvPeer) + " to send" +
              (p2p_.tagged ? " tag " + std::to_string(p2p_.value) : std::string()) + " (channel " +
              std::to_string(c) + ", step " + std::to_string(state.next + 1) + " of " +
              std::to_string(steps.size()) + ")";
    }
    for (const PendingSend& send : state.sends) {
      if (!send.done.done) {
        if (!text.empty()) text += "; ";
        text += "waiting for rank " + std::to_string(send.connection->peer()) +
                " to receive (channel " + std::to_string(c) + ")";
        break;
      }
    }
  }
  return text;
}

int Execution::firstWaitedPeer() const {
  for (size_t c = 0; c < channels_.size(); ++c) {
    const auto& steps = schedule_->channels[c];
    if (channels_[c].next < steps.size() && receives(steps[channels_[c].next].kind)) {
      return steps[channels_[c].next].recvPeer;
    }
    for (const PendingSend& send : channels_[c].sends) {
      if (!send.done.done) return send.connection->peer();
    }
  }
  return -1;
}

bool Execution::rejectedTag(uint64_t* peerTag, int* peer) const {
  for (size_t c = 0; c < channels_.size(); ++c) {
    const ChannelState& state = channels_[c];
    const auto& steps = schedule_->channels[c];
    if (state.recv.done && state.recv.hasPeerTag && state.next < steps.size()) {
      *peerTag = state.recv.peerTag;
      *peer = steps[state.next].recvPeer;
      return true;
    }
  }
  return false;
}

}  // namespace collie
