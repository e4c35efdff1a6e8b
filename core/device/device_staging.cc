#include "core/device/device_staging.h"

#include <algorithm>
#include <memory>
#include <optional>

namespace collie {
namespace {

using Clock = std::chrono::steady_clock;

// Pinned host memory of the runtime, freed when the last user drops it.
std::shared_ptr<uint8_t> pinned(DeviceRuntime* runtime, size_t bytes, Status* status) {
  Result<void*> p = runtime->allocateMapped(bytes);
  if (!p.isOk()) {
    *status = p.status();
    return nullptr;
  }
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(*p),
                                  [runtime](uint8_t* q) { runtime->freeMapped(q); });
}

std::shared_ptr<void> eventHolder(DeviceRuntime* runtime, DeviceEvent event) {
  return std::shared_ptr<void>(event, [runtime](void* e) { runtime->destroyEvent(e); });
}

// This rank's bytes of the input and the output (0: the rank has no such buffer, as a
// scatter's non-roots have no input and a gather's or a reduce's no output). Exact per
// rank, unlike inputBytes()/outputBytes(), which bound every rank's extent: the copies
// touch the caller's device buffers and must stay within them.
struct Extents {
  size_t in = 0;
  size_t out = 0;
};

Extents extentsOf(const CollectiveArgs& args, int rank, int nranks) {
  const size_t es = dataTypeSize(args.dtype);
  const size_t block = args.count * es;
  const bool root = args.root == rank;
  switch (args.kind) {
    case CollectiveKind::kAllToAll:
      return {block * nranks, block * nranks};
    case CollectiveKind::kGather:
      return {block, root ? block * nranks : 0};
    case CollectiveKind::kScatter:
      return {root ? block * nranks : 0, block};
    case CollectiveKind::kReduce:
      return {block, root ? block : 0};
    case CollectiveKind::kAllGatherV:
      return {args.blocks->counts[rank] * es, args.blocks->total * es};
    case CollectiveKind::kReduceScatterV:
      return {args.blocks->total * es, args.blocks->counts[rank] * es};
    default:  // alltoallv's layout is this rank's own: the bounds are exact
      return {inputBytes(args, nranks), outputBytes(args, nranks)};
  }
}

}  // namespace

DeviceStaging::DeviceStaging(DeviceRuntime* runtime, HostSubmit hostSubmit,
                             WorkFromPoller workFromPoller, int rank, int nranks,
                             std::chrono::microseconds timeout)
    : runtime_(runtime),
      hostSubmit_(std::move(hostSubmit)),
      workFromPoller_(workFromPoller),
      rank_(rank),
      nranks_(nranks),
      timeout_(timeout) {}

DeviceStaging::~DeviceStaging() {
  if (ownStream_ != nullptr) runtime_->destroyStream(ownStream_);
}

std::shared_ptr<uint8_t> DeviceStaging::bounce(std::shared_ptr<uint8_t>* cached,
                                               size_t* cachedBytes, size_t bytes, bool reusable,
                                               Status* status) {
  if (reusable && *cached != nullptr && *cachedBytes >= bytes) return *cached;
  std::shared_ptr<uint8_t> fresh = pinned(runtime_, bytes, status);
  if (fresh != nullptr && (reusable || *cached == nullptr)) {
    *cached = fresh;
    *cachedBytes = bytes;
  }
  return fresh;
}

Result<Work> DeviceStaging::submit(const CollectiveArgs& args, const void* input, void* output,
                                   DeviceStream stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string what = std::string(collectiveName(args.kind)) + " on rank " +
                           std::to_string(rank_) + " (device buffers staged through host memory)";
  if (stream == nullptr) {
    if (ownStream_ == nullptr) {
      Result<DeviceStream> created = runtime_->createStream();
      if (!created.isOk()) return created.status().withContext(what);
      ownStream_ = *created;
    }
    stream = ownStream_;
  } else {
    // The host part runs now, not when a graph is launched: nothing to capture.
    Result<bool> capturing = runtime_->isCapturing(stream);
    if (!capturing.isOk()) return capturing.status().withContext(what);
    if (*capturing) {
      return unsupported(what +
                         ": the stream is being captured into a CUDA graph, and collectives "
                         "staged through host memory (across hosts, or all-gather v and "
                         "reduce-scatter v) run their host part at the call; "
                         "issue it outside the capture");
    }
  }
  if (hasBlockCounts(args.kind) && args.blocks == nullptr) {
    return invalidArgument(what + ": no counts per rank");
  }
  const Extents extents = extentsOf(args, rank_, nranks_);
  // Only a buffer the rank has is copied; a null one stays null for the host engine.
  const bool sends = input != nullptr && extents.in > 0;
  const bool receives = output != nullptr && extents.out > 0;
  // The cached buffers serve this call when the previous one's copy back is done (its
  // Work may still hold them, but no copy reads them any more); else fresh ones.
  const bool reusable = lastDone_ == nullptr || runtime_->queryEvent(lastDone_.get());
  Status status;
  std::shared_ptr<uint8_t> hostIn =
      bounce(&hostIn_, &hostInBytes_, std::max<size_t>(extents.in, 1), reusable, &status);
  std::shared_ptr<uint8_t> hostOut =
      bounce(&hostOut_, &hostOutBytes_, std::max<size_t>(extents.out, 1), reusable, &status);
  if (!status.isOk()) return status.withContext(what);

  // Device -> host, in stream order, then the host collective.
  if (sends) {
    COLLIE_RETURN_IF_ERROR(runtime_->memcpyAsync(hostIn.get(), input, extents.in, stream));
  }
  Result<DeviceEvent> copied = runtime_->recordEvent(stream);
  if (!copied.isOk()) return copied.status().withContext(what);
  std::shared_ptr<void> copiedHolder = eventHolder(runtime_, *copied);
  if (!waitForEvent(*runtime_, copiedHolder.get(), Clock::now() + timeout_)) {
    lastDone_ = copiedHolder;  // the copy into hostIn may still come: no reuse before it
    return timeoutError(what + ": the stream did not reach the input copy within the timeout");
  }
  Result<Work> host =
      hostSubmit_(args, sends ? hostIn.get() : nullptr, receives ? hostOut.get() : nullptr);
  if (!host.isOk()) return host.status().withContext(what);
  COLLIE_RETURN_IF_ERROR(host->wait());

  // Host -> device on the stream; the Work completes when the stream passed it.
  if (receives) {
    COLLIE_RETURN_IF_ERROR(runtime_->memcpyAsync(output, hostOut.get(), extents.out, stream));
  }
  Result<DeviceEvent> done = runtime_->recordEvent(stream);
  if (!done.isOk()) return done.status().withContext(what);
  std::shared_ptr<void> doneHolder = eventHolder(runtime_, *done);
  lastDone_ = doneHolder;
  auto poller = [runtime = runtime_, doneHolder, hostIn, hostOut]() -> std::optional<Status> {
    if (runtime->queryEvent(doneHolder.get())) return Status();
    return std::nullopt;
  };
  return workFromPoller_(std::move(poller));
}

}  // namespace collie
