// DeviceComm, part 2 (device_comm.h): point-to-point groups and all-to-all on device
// buffers, as messages of one slot each between the ranks' device windows.
//
// Point-to-point over the inboxes. A message is one chunk of at most slotBytes; the
// chunks to and from each peer are numbered in the order of the operations. Round j
// launches the j-th message to every peer, then receives the j-th message from every
// peer. With two slots per pair, the j-th send waits only for the peer to have read
// message j - 2, which it did in round j - 2, so every rank finishes its sends of
// round j and then its receives: no order of operations across ranks can deadlock.
#include <algorithm>
#include <string>
#include <vector>

#include "core/device/device_comm.h"
#include "core/device/device_comm_parts.h"
#include "core/plan/fingerprint.h"

namespace collie {

// Sends to this rank must pair up with receives from it, in order and by size.
Status DeviceComm::checkSelfMoves(const std::vector<Move>& moves) const {
  std::vector<size_t> sends, recvs;
  for (const Move& move : moves) {
    if (move.peer == config_.rank && move.bytes > 0) {
      (move.isSend ? sends : recvs).push_back(move.bytes);
    }
  }
  if (sends.size() != recvs.size()) {
    return invalidArgument(std::to_string(sends.size()) + " send(s) to this rank but " +
                           std::to_string(recvs.size()) + " receive(s) from it");
  }
  for (size_t i = 0; i < sends.size(); ++i) {
    if (sends[i] != recvs[i]) {
      return invalidArgument("send " + std::to_string(i) + " to this rank has " +
                             std::to_string(sends[i]) + " bytes but its receive has " +
                             std::to_string(recvs[i]));
    }
  }
  return Status();
}

Status DeviceComm::launchMoves(const std::vector<Move>& moves, DeviceStream stream) {
  const int n = config_.nranks;
  const int self = config_.rank;
  struct Chunk {
    uint8_t* at;
    size_t bytes;
  };
  std::vector<std::vector<Chunk>> out(n), in(n);
  std::vector<const Move*> selfSends, selfRecvs;
  for (const Move& move : moves) {
    if (move.bytes == 0) continue;
    if (move.peer == self) {
      (move.isSend ? selfSends : selfRecvs).push_back(&move);
      continue;
    }
    std::vector<Chunk>& chunks = (move.isSend ? out : in)[move.peer];
    for (size_t offset = 0; offset < move.bytes; offset += config_.slotBytes) {
      chunks.push_back({move.buffer + offset, std::min(config_.slotBytes, move.bytes - offset)});
    }
  }
  for (size_t i = 0; i < selfSends.size() && i < selfRecvs.size(); ++i) {
    COLLIE_RETURN_IF_ERROR(runtime_->memcpyAsync(selfRecvs[i]->buffer, selfSends[i]->buffer,
                                                 selfSends[i]->bytes, stream));
  }
  size_t rounds = 0;
  for (int p = 0; p < n; ++p) rounds = std::max({rounds, out[p].size(), in[p].size()});
  Launcher launcher(*this);
  for (size_t j = 0; j < rounds; ++j) {
    for (int p = 0; p < n; ++p) {
      if (j >= out[p].size()) continue;
      DeviceCopyStep copy{out[p][j].at, nullptr, nullptr, out[p][j].bytes, launcher.baseSync()};
      copy.peerOut = launcher.send(p, &copy.sync, 0);
      COLLIE_RETURN_IF_ERROR(runtime_->launchCopy(copy, stream));
    }
    for (int p = 0; p < n; ++p) {
      if (j >= in[p].size()) continue;
      DeviceCopyStep copy{nullptr, in[p][j].at, nullptr, in[p][j].bytes, launcher.baseSync()};
      copy.src = launcher.recv(p, &copy.sync, 0);
      COLLIE_RETURN_IF_ERROR(runtime_->launchCopy(copy, stream));
    }
  }
  return Status();
}

Result<Work> DeviceComm::submitPointToPoint(const std::vector<PointToPoint>& ops,
                                            DeviceStream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string what =
      "send/recv group on rank " + std::to_string(config_.rank) + " (device buffers)";
  DeviceScope onDevice(*runtime_, device_);
  Result<bool> captured = begin(onDevice, stream);
  if (!captured.isOk()) return captured.status().withContext(what);
  std::vector<Move> moves;
  moves.reserve(ops.size());
  for (const PointToPoint& op : ops) {
    moves.push_back(
        {op.isSend, static_cast<uint8_t*>(op.buffer), op.count * dataTypeSize(op.dtype), op.peer});
  }
  COLLIE_RETURN_IF_ERROR(checkSelfMoves(moves).withContext(what));
  Result<DeviceStream> ordered = orderAfterPrevious(stream, *captured);
  if (!ordered.isOk()) return ordered.status().withContext(what);
  return complete(launchMoves(moves, *ordered), *ordered, what, *captured);
}

// The messages of an exchange on this rank: block p of the input to rank p and block p
// of the output from it (all-to-all, all-to-all v with this rank's layout), every
// rank's block to the root (gather), the root's block p to rank p (scatter). The
// root's own block is a send to itself and its receive, i.e. one device copy (none in
// place).
std::vector<DeviceComm::Move> DeviceComm::exchangeMoves(const CollectiveArgs& args,
                                                        const void* input, void* output) const {
  const size_t es = dataTypeSize(args.dtype);
  const size_t block = args.count * es;
  auto in = [&](size_t at) {
    return const_cast<uint8_t*>(static_cast<const uint8_t*>(input)) + at;
  };
  auto out = [&](size_t at) { return static_cast<uint8_t*>(output) + at; };
  const int n = config_.nranks;
  const int me = config_.rank;
  std::vector<Move> moves;
  switch (args.kind) {
    case CollectiveKind::kAllToAll:
      for (int p = 0; p < n; ++p) {
        moves.push_back({true, in(p * block), block, p});
        moves.push_back({false, out(p * block), block, p});
      }
      break;
    case CollectiveKind::kAllToAllV:
      for (int p = 0; p < n; ++p) {
        const ExchangeLayout& l = *args.layout;
        moves.push_back({true, in(l.sendOffsets[p] * es), l.sendCounts[p] * es, p});
        moves.push_back({false, out(l.recvOffsets[p] * es), l.recvCounts[p] * es, p});
      }
      break;
    case CollectiveKind::kGather:
      if (me != args.root || in(0) != out(me * block)) {
        moves.push_back({true, in(0), block, args.root});
      }
      for (int p = 0; me == args.root && p < n; ++p) {
        if (p != me || in(0) != out(me * block)) moves.push_back({false, out(p * block), block, p});
      }
      break;
    case CollectiveKind::kScatter:
      for (int p = 0; me == args.root && p < n; ++p) {
        if (p != me || in(me * block) != out(0)) moves.push_back({true, in(p * block), block, p});
      }
      if (me != args.root || in(me * block) != out(0)) {
        moves.push_back({false, out(0), block, args.root});
      }
      break;
    default:
      break;
  }
  return moves;
}

// An exchange: the fingerprint check (every rank agrees on kind, count, dtype and root
// before a byte moves), then its messages.
Result<Work> DeviceComm::submitExchange(const CollectiveArgs& args, const void* input, void* output,
                                        DeviceStream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string what = std::string(collectiveName(args.kind)) + " on rank " +
                           std::to_string(config_.rank) + " (device buffers)";
  if (!movesAsMessages(args.kind) || (args.kind == CollectiveKind::kAllToAllV && !args.layout)) {
    return internalError(what + ": not an exchange of messages");
  }
  DeviceScope onDevice(*runtime_, device_);
  Result<bool> captured = begin(onDevice, stream);
  if (!captured.isOk()) return captured.status().withContext(what);
  // An all-to-all whose inputs lie in user windows: one direct kernel (device_direct.cc).
  DeviceDirectStep direct;
  uint64_t directMark = 0;
  const bool onDirect = args.kind == CollectiveKind::kAllToAll &&
                        directStepOf(args, input, output, &direct, &directMark);
  Result<DeviceStream> ordered = orderAfterPrevious(stream, *captured);
  if (!ordered.isOk()) return ordered.status().withContext(what);
  stream = *ordered;
  const uint64_t fingerprint = makeFingerprint(0, args) | directMark;
  if (onDirect) return complete(launchDirect(direct, fingerprint, stream), stream, what, *captured);
  Status launched = launchCheck(fingerprint, stream);
  if (launched.isOk()) launched = launchMoves(exchangeMoves(args, input, output), stream);
  return complete(launched, stream, what, *captured);
}

}  // namespace collie
