// BoardCollectives' single-copy collectives (direct, cma) and its fingerprint check: the
// paths of a team step that are not the board itself (see board_collectives.h).
#include <cstring>
#include <new>
#include <vector>

#include "core/log/log.h"
#include "core/team/board_collectives.h"
#include "core/team/direct_share.h"

namespace collie {

bool BoardCollectives::wantsCrossMemory(const Call& call, bool hugePages) const {
  // In place it won at every size measured (16-256 MiB, 2 ranks: 1.4-1.8x the ring's
  // busbw); out of place from 128 MiB on the ring's copies through its cache-resident
  // FIFO cost less than pinning twice as many small pages (docs/decisions/
  // single-copy-shm.md), but not buffers in huge pages (docs/decisions/huge-pages-cma.md).
  // A forced cma (no fallback) goes at every size. An exchange pulls each block once,
  // straight into the output (no copy through a FIFO to save): at every size.
  if (!crossMemoryPossible(call)) return false;
  return call.args.kind != CollectiveKind::kAllReduce || call.input == call.output ||
         !call.fallback || hugePages ||
         call.args.count * dataTypeSize(call.args.dtype) <= offer_.cmaMaxBytes;
}

const void* BoardCollectives::exchangeSource(const Call& call, size_t blockBytes) {
  const size_t total = blockBytes * static_cast<size_t>(nranks_);
  if (inPlaceBlocksBytes_ < total) {
    inPlaceBlocks_.reset(new (std::nothrow) uint8_t[total]);
    inPlaceBlocksBytes_ = inPlaceBlocks_ != nullptr ? total : 0;
    if (inPlaceBlocks_ == nullptr) return nullptr;
  }
  // Block p at its place for peer p; this rank's own block is neither copied nor read.
  const auto* input = static_cast<const uint8_t*>(call.input);
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    std::memcpy(inPlaceBlocks_.get() + p * blockBytes, input + p * blockBytes, blockBytes);
  }
  return inPlaceBlocks_.get();
}

bool BoardCollectives::crossMemoryPossible(const Call& call) const {
  return teamSupports(Algorithm::kCma, call.args.kind) &&
         teamHas(call.algorithms, Algorithm::kCma) &&
         crossMemoryStateFor(call.args.kind) != CrossMemoryState::kDenied;
}

bool BoardCollectives::adviseHugePages(const Call& call, size_t bytes) {
  // Before the peers can pin these pages (they read the addresses once published).
  const bool input = peers_.adviseHugePages(call.input, bytes);
  const bool output = call.output == call.input || peers_.adviseHugePages(call.output, bytes);
  return input && output;
}

Result<TeamOutcome> BoardCollectives::declined(const Call& call, const std::string& why) const {
  if (call.fallback) return TeamOutcome{};
  return unsupported("rank " + std::to_string(rank_) + ": " + teamAlgorithmsText(call.algorithms) +
                     " cannot run this " + std::string(collectiveName(call.args.kind)) + ": " +
                     why);
}

Result<TeamOutcome> BoardCollectives::runSingleCopy(const Call& call) {
  const CollectiveArgs& args = call.args;
  const int n = nranks_;
  const int rank = rank_;
  const uint64_t sequence = ++sequence_;
  const int parity = static_cast<int>(sequence & 1);
  const size_t bytes = args.count * dataTypeSize(args.dtype);

  // Publish where this rank's buffers are, if they are registered.
  BoardNote* mine = views_[rank].note[parity];
  SharedWindow send, recv;
  const bool direct =
      args.kind == CollectiveKind::kAllReduce && teamHas(call.algorithms, Algorithm::kDirect);
  const bool registered = direct && findSharedWindow(call.input, bytes, &send) &&
                          findSharedWindow(call.output, bytes, &recv);
  const bool hugePages = args.kind == CollectiveKind::kAllReduce && !registered &&
                         crossMemoryPossible(call) && adviseHugePages(call, bytes);
  bool crossMemory = wantsCrossMemory(call, hugePages);
  // In place, peers must not read blocks this rank overwrites while they pull: they read
  // a copy (the board, its fallback, copies the input onto itself before any output).
  // Without memory for it this rank does not go cma, and every rank declines cma alike.
  const void* source = call.input;
  if (crossMemory && args.kind == CollectiveKind::kAllToAll && call.input == call.output &&
      bytes > 0) {
    source = exchangeSource(call, bytes);
    crossMemory = source != nullptr;
    if (source == nullptr) source = call.input;
  }
  // Neither registered nor cross-memory here: every rank declines (the others once they
  // read this note), so there is nothing to wait for, and not waiting keeps a barrier
  // off every large collective; the fallback's messages carry the tag, so ranks that
  // disagree still fail. Only where this rank's collective cannot complete before every
  // rank has started it (each output needs every input): then slot s % 2, which this
  // rank overwrites at s + 2 once s + 1 completed, is no longer read by anyone. A
  // broadcast root or a reduce leaf could complete alone and lap a slow peer: they wait.
  // Not before the board either: its next publication reuses the slot parity of the
  // collective before this one, which a slow peer may still be reading.
  const bool needsEveryRank =
      args.kind == CollectiveKind::kAllReduce || args.kind == CollectiveKind::kReduceScatter ||
      args.kind == CollectiveKind::kAllGather || args.kind == CollectiveKind::kAllToAll;
  const bool declinesAtOnce = !registered && !crossMemory && needsEveryRank && !call.boardNext;
  mine->tag = call.tag;
  mine->bytes = 0;
  mine->registered = registered ? 1 : 0;
  mine->crossMemory = crossMemory ? 1 : 0;
  mine->waits = declinesAtOnce ? 0 : 1;
  mine->pidNamespace = pidNamespace_;
  mine->send = send;
  mine->recv = recv;
  mine->inputAddress = reinterpret_cast<uint64_t>(source);
  mine->outputAddress = reinterpret_cast<uint64_t>(call.output);
  // A rank that declines at once wakes only the peers that wait for this note, not every
  // sleeping progress thread (on a busy host each needless wake costs a context switch).
  COLLIE_RETURN_IF_ERROR(board_.publish(mine->sequence, sequence, /*wake=*/!declinesAtOnce));
  if (declinesAtOnce) {
    // The ranks that wait read this note and learn the same.
    if (direct) directLikely_ = false;
    std::string why = "rank " + std::to_string(rank);
    if (direct) why += "'s buffers are not both registered (Communicator::registerBuffer)";
    if (teamHas(call.algorithms, Algorithm::kCma)) {
      why += std::string(direct ? " and it" : "") + " cannot use cross-memory attach (denied)";
    }
    return declined(call, why);
  }
  COLLIE_RETURN_IF_ERROR(waitForPeers(sequence, call.tag, 0, false, call.wait));

  // Every rank reads the same notes, so every rank takes the same branch here.
  const bool exchange = isEqualExchange(args.kind) && teamHas(call.algorithms, Algorithm::kCma);
  if (args.kind != CollectiveKind::kAllReduce && !exchange) return TeamOutcome{};  // the check
  int unregistered = -1, noCrossMemory = -1;
  // Every rank reads these notes: each learns whether direct runs now (below).
  if (direct) directLikely_ = false;
  const BoardNote* first = views_[0].note[parity];
  for (int r = 0; r < n; ++r) {
    const BoardNote* note = views_[r].note[parity];
    if (note->pidNamespace != first->pidNamespace) {
      return declined(call, "rank " + std::to_string(r) + " is in another pid namespace");
    }
    if (note->registered != 1 && unregistered < 0) unregistered = r;
    if (note->crossMemory != 1 && noCrossMemory < 0) noCrossMemory = r;
  }
  if (unregistered >= 0) {
    if (noCrossMemory < 0) return runCrossMemory(call, sequence);
    std::string why;
    if (direct) {
      why = "rank " + std::to_string(unregistered) +
            "'s buffers are not both registered (Communicator::registerBuffer)";
    }
    if (teamHas(call.algorithms, Algorithm::kCma)) {
      why += std::string(direct ? " and " : "") + "rank " + std::to_string(noCrossMemory) +
             " cannot use cross-memory attach";
    }
    return declined(call, why);
  }
  std::vector<const uint8_t*>& inputs = directInputs_;
  std::vector<uint8_t*>& outputs = directOutputs_;
  for (int r = 0; r < n; ++r) {
    if (r == rank) {
      inputs[r] = static_cast<const uint8_t*>(call.input);
      outputs[r] = static_cast<uint8_t*>(call.output);
      continue;
    }
    const BoardNote* note = views_[r].note[parity];
    Result<uint8_t*> in = peers_.resolveWindow(r, note->send, bytes);
    if (!in.isOk()) return in.status();
    Result<uint8_t*> out = peers_.resolveWindow(r, note->recv, bytes);
    if (!out.isOk()) return out.status();
    inputs[r] = *in;
    outputs[r] = *out;
  }
  if (direct) directLikely_ = true;
  // Out of place the outputs are not in cache: streaming stores skip reading each line
  // before writing it (docs/decisions/roofline-shm.md). In place they would evict the
  // lines just read, and small outputs are read again soon: plain stores there.
  const bool stream = call.input != call.output && bytes >= kDirectStreamingMinBytes;
  directAllReduceShare(inputs, outputs, args.count, args.dtype, args.op, call.fold, rank,
                       scratch_.get(), &directSources_, stream);

  // Nobody may return (and reuse its buffers) before every share is written.
  COLLIE_RETURN_IF_ERROR(board_.meet(BoardMeeting::kDone, sequence, 0,
                                     "finish its share of the direct all-reduce", call.wait));
  return TeamOutcome{Algorithm::kDirect};
}

Result<TeamOutcome> BoardCollectives::runCrossMemory(const Call& call, uint64_t sequence) {
  const CollectiveArgs& args = call.args;
  const int n = nranks_;
  const int rank = rank_;
  const int parity = static_cast<int>(sequence & 1);
  std::vector<CrossMemoryRank>& ranks = crossMemoryRanks_;
  for (int r = 0; r < n; ++r) {
    const BoardNote* note = views_[r].note[parity];
    ranks[r] = CrossMemoryRank{note->inputAddress, note->outputAddress};
  }
  CrossMemoryState& state = crossMemoryStateFor(args.kind);
  if (state == CrossMemoryState::kUntested) {
    // Before anyone writes an output: can every rank reach every peer it needs?
    std::string why;
    const size_t bytes = args.count * dataTypeSize(args.dtype);
    Result<bool> allowed =
        probeCrossMemory(peers_, rank_, ranks, args.kind, args.root, bytes, &why);
    if (!allowed.isOk()) return allowed.status();
    COLLIE_RETURN_IF_ERROR(board_.meet(BoardMeeting::kProbed, sequence, *allowed ? 1 : 0,
                                       "probe cross-memory attach", call.wait));
    state = CrossMemoryState::kAllowed;
    for (int r = 0; r < n; ++r) {
      if (views_[r].probed->value != 1) {
        state = CrossMemoryState::kDenied;
        COLLIE_LOG(WARN, SHM) << "rank " << rank << ": rank " << r
                              << " cannot use cross-memory attach"
                              << (r == rank ? " (" + why + ")" : std::string())
                              << (args.kind == CollectiveKind::kAllReduce
                                      ? "; all-reduces that would go cma use the board or the "
                                        "FIFO ring (two copies)"
                                      : "; exchanges that would go cma use the board or the "
                                        "FIFO schedules (two copies)");
        return declined(
            call, "rank " + std::to_string(r) + " cannot use cross-memory attach (probed: denied)");
      }
    }
  }
  if (args.kind == CollectiveKind::kAllReduce) {
    COLLIE_RETURN_IF_ERROR(crossMemory_.reduceShare(peers_, rank_, ranks, call.input, call.output,
                                                    args.count, args.dtype, args.op, call.fold));
  } else {
    COLLIE_RETURN_IF_ERROR(pullBlocks(peers_, rank_, ranks, args.kind, args.root, call.input,
                                      call.output, args.count * dataTypeSize(args.dtype)));
  }
  // Nobody may return (and reuse its buffers) before every rank wrote its share or
  // pulled its blocks.
  COLLIE_RETURN_IF_ERROR(board_.meet(BoardMeeting::kDone, sequence, 0,
                                     "finish the cross-memory collective", call.wait));
  return TeamOutcome{Algorithm::kCma};
}

}  // namespace collie
