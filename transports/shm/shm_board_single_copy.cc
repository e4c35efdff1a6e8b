// The board's single-copy all-reduces (direct, cma) and its fingerprint check: the
// paths of a team step that are not the board itself (see shm_board.h).
#include <unistd.h>

#include <vector>

#include "core/common/process_id.h"
#include "core/log/log.h"
#include "transports/shm/shm_board.h"
#include "transports/shm/shm_board_layout.h"
#include "transports/shm/shm_cma_exchange.h"

namespace collie::shm {

bool Board::wantsCrossMemory(const Call& call, bool hugePages) const {
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

bool Board::crossMemoryPossible(const Call& call) const {
  return teamSupports(Algorithm::kCma, call.args.kind) &&
         teamHas(call.algorithms, Algorithm::kCma) &&
         crossMemoryStateFor(call.args.kind) != CrossMemoryState::kDenied;
}

bool Board::adviseHugePages(const Call& call, size_t bytes) {
  // Before the peers can pin these pages (they read the addresses once published).
  const bool input = hugePages_.advise(call.input, bytes);
  const bool output = call.output == call.input || hugePages_.advise(call.output, bytes);
  return input && output;
}

Result<TeamOutcome> Board::declined(const Call& call, const std::string& why) const {
  if (call.fallback) return TeamOutcome{};
  return unsupported("rank " + std::to_string(ctx_.rank) + ": " +
                     teamAlgorithmsText(call.algorithms) + " cannot run this " +
                     std::string(collectiveName(call.args.kind)) + ": " + why);
}

Result<TeamOutcome> Board::runSingleCopy(const Call& call) {
  const CollectiveArgs& args = call.args;
  const int n = ctx_.nranks;
  const int rank = ctx_.rank;
  const uint64_t sequence = ++sequence_;
  const int parity = static_cast<int>(sequence & 1);
  const size_t bytes = args.count * dataTypeSize(args.dtype);

  // Publish where this rank's buffers are, if they are registered.
  SlotControl* mine = control(boards_[rank].base, parity);
  SharedWindow send, recv;
  const bool direct =
      args.kind == CollectiveKind::kAllReduce && teamHas(call.algorithms, Algorithm::kDirect);
  const bool registered = direct && findSharedWindow(call.input, bytes, &send) &&
                          findSharedWindow(call.output, bytes, &recv);
  mine->tag = call.tag;
  mine->bytes = 0;
  mine->registered = registered ? 1 : 0;
  mine->pidNamespace = pidNamespace_;
  mine->send = send;
  mine->recv = recv;
  const bool hugePages = args.kind == CollectiveKind::kAllReduce && !registered &&
                         crossMemoryPossible(call) && adviseHugePages(call, bytes);
  mine->crossMemory = wantsCrossMemory(call, hugePages) ? 1 : 0;
  mine->inputAddress = reinterpret_cast<uint64_t>(call.input);
  mine->outputAddress = reinterpret_cast<uint64_t>(call.output);
  COLLIE_RETURN_IF_ERROR(publish(mine->sequence, sequence));
  // Neither registered nor cross-memory here: every rank declines (the others once they
  // read this header), so there is nothing to wait for, and not waiting keeps a barrier
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
  if (!registered && mine->crossMemory == 0 && needsEveryRank && !call.boardNext) {
    // The ranks that wait read this header and learn the same.
    if (direct) directLikely_ = false;
    // Only a peer that could go single copy waits for this header: wake just those, not
    // every sleeping progress thread (on a busy host each needless wake costs a context
    // switch). Dekker with the peer's publish, fence, check of ours before it sleeps.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (const auto& peer : shared_->peers) {
      const SlotControl* theirs = control(boards_[peer->rank].base, parity);
      if (theirs->sequence.load(std::memory_order_acquire) == sequence &&
          (theirs->registered == 1 || theirs->crossMemory == 1)) {
        ringDoorbell(peer->segment->header());
      }
    }
    std::string why = "rank " + std::to_string(rank);
    if (direct) why += "'s buffers are not both registered (Communicator::registerBuffer)";
    if (teamHas(call.algorithms, Algorithm::kCma)) {
      why += std::string(direct ? " and it" : "") + " cannot use cross-memory attach (denied)";
    }
    return declined(call, why);
  }
  ringPeers();
  COLLIE_RETURN_IF_ERROR(waitForPeers(sequence, call.tag, 0, false, call.timeout, call.cancelled));

  // Every rank reads the same headers, so every rank takes the same branch here.
  const bool exchange = isEqualExchange(args.kind) && teamHas(call.algorithms, Algorithm::kCma);
  if (args.kind != CollectiveKind::kAllReduce && !exchange) return TeamOutcome{};  // the check
  std::vector<HeaderCopy>& slots = headerCopies_;
  for (int r = 0; r < n; ++r) {
    const SlotControl* c = control(boards_[r].base, parity);
    slots[r].registered = c->registered;
    slots[r].pidNamespace = c->pidNamespace;
    slots[r].send = c->send;
    slots[r].recv = c->recv;
    slots[r].crossMemory = c->crossMemory;
  }
  int unregistered = -1, noCrossMemory = -1;
  // Every rank reads these headers: each learns whether direct runs now (below).
  if (direct) directLikely_ = false;
  for (int r = 0; r < n; ++r) {
    if (slots[r].pidNamespace != slots[0].pidNamespace) {
      return declined(call, "rank " + std::to_string(r) + " is in another pid namespace");
    }
    if (slots[r].registered != 1 && unregistered < 0) unregistered = r;
    if (slots[r].crossMemory != 1 && noCrossMemory < 0) noCrossMemory = r;
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
    Result<uint8_t*> in = windows_.resolve(r, slots[r].send, bytes);
    if (!in.isOk()) return in.status();
    Result<uint8_t*> out = windows_.resolve(r, slots[r].recv, bytes);
    if (!out.isOk()) return out.status();
    inputs[r] = *in;
    outputs[r] = *out;
  }
  if (direct) directLikely_ = true;
  // Out of place the outputs are not in cache: streaming stores skip reading each line
  // before writing it (docs/decisions/roofline-shm.md). In place they would evict the
  // lines just read, and small outputs are read again soon: plain stores there.
  const bool stream = call.input != call.output && bytes >= kDirectStreamingMinBytes;
  directAllReduceShare(inputs, outputs, args.count, args.dtype, args.op, rank, scratch_.get(),
                       stream);

  // Nobody may return (and reuse its buffers) before every share is written.
  COLLIE_RETURN_IF_ERROR(meet(&doneSequence, sequence, "finish its share of the direct all-reduce",
                              call.timeout, call.cancelled));
  return TeamOutcome{Algorithm::kDirect};
}

Result<TeamOutcome> Board::runCrossMemory(const Call& call, uint64_t sequence) {
  const CollectiveArgs& args = call.args;
  const int n = ctx_.nranks;
  const int rank = ctx_.rank;
  const int parity = static_cast<int>(sequence & 1);
  std::vector<CrossMemoryRank>& ranks = crossMemoryRanks_;
  const int32_t pid = currentPid();
  for (int r = 0; r < n; ++r) {
    const SlotControl* c = control(boards_[r].base, parity);
    ranks[r] = CrossMemoryRank{pid, c->inputAddress, c->outputAddress};
  }
  for (const auto& peer : shared_->peers) ranks[peer->rank].pid = peer->pid;
  CrossMemoryFlags* flags = crossMemoryFlags(boards_[rank].base);
  CrossMemoryState& state = crossMemoryStateFor(args.kind);
  if (state == CrossMemoryState::kUntested) {
    // Before anyone writes an output: can every rank read every peer?
    std::string why;
    // An exchange only reads the peers' inputs (its leaves' outputs may be null).
    const size_t bytes = args.count * dataTypeSize(args.dtype);
    Result<CrossMemoryAllReduce::Probe> probe =
        args.kind == CollectiveKind::kAllReduce
            ? CrossMemoryAllReduce::probe(ranks, rank, bytes, &why)
            : CrossMemoryAllReduce::probeReads(
                  ranks, exchangeSources(args.kind, args.root, rank, n), bytes, &why);
    if (!probe.isOk()) return probe.status();
    flags->allowed = *probe == CrossMemoryAllReduce::Probe::kAllowed ? 1 : 0;
    COLLIE_RETURN_IF_ERROR(
        meet(&probedSequence, sequence, "probe cross-memory attach", call.timeout, call.cancelled));
    state = CrossMemoryState::kAllowed;
    for (int r = 0; r < n; ++r) {
      if (crossMemoryFlags(boards_[r].base)->allowed != 1) {
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
    COLLIE_RETURN_IF_ERROR(crossMemory_.reduceShare(ranks, rank, call.input, call.output,
                                                    args.count, args.dtype, args.op));
  } else {
    COLLIE_RETURN_IF_ERROR(pullBlocks(ranks, rank, args.kind, args.root, call.input, call.output,
                                      args.count * dataTypeSize(args.dtype)));
  }
  // Nobody may return (and reuse its buffers) before every rank wrote its share or
  // pulled its blocks.
  COLLIE_RETURN_IF_ERROR(meet(&doneSequence, sequence, "finish the cross-memory collective",
                              call.timeout, call.cancelled));
  return TeamOutcome{Algorithm::kCma};
}

}  // namespace collie::shm
