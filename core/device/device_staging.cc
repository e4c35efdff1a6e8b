#include "core/device/device_staging.h"

#include <memory>
#include <optional>
#include <thread>

#include "core/engine/engine.h"

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

}  // namespace

DeviceStaging::DeviceStaging(DeviceRuntime* runtime, Engine* engine, int rank, int nranks,
                             std::chrono::microseconds timeout)
    : runtime_(runtime), engine_(engine), rank_(rank), nranks_(nranks), timeout_(timeout) {}

DeviceStaging::~DeviceStaging() {
  if (ownStream_ != nullptr) runtime_->destroyStream(ownStream_);
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
  }
  const size_t inBytes = inputBytes(args, nranks_);
  const size_t outBytes = outputBytes(args, nranks_);
  Status status;
  std::shared_ptr<uint8_t> hostIn = pinned(runtime_, inBytes, &status);
  std::shared_ptr<uint8_t> hostOut = pinned(runtime_, outBytes, &status);
  if (!status.isOk()) return status.withContext(what);

  // Device -> host, in stream order, then the host collective.
  if (input != nullptr) {
    COLLIE_RETURN_IF_ERROR(runtime_->memcpyAsync(hostIn.get(), input, inBytes, stream));
  }
  Result<DeviceEvent> copied = runtime_->recordEvent(stream);
  if (!copied.isOk()) return copied.status().withContext(what);
  std::shared_ptr<void> copiedHolder = eventHolder(runtime_, *copied);
  const Clock::time_point deadline = Clock::now() + timeout_;
  while (!runtime_->queryEvent(copiedHolder.get())) {
    if (Clock::now() > deadline) {
      return timeoutError(what + ": the stream did not reach the input copy within the timeout");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  // On a reduce, only the root receives; elsewhere output may be null.
  const bool receives =
      output != nullptr && (args.kind != CollectiveKind::kReduce || args.root == rank_);
  Result<Work> host = engine_->submit(args, input != nullptr ? hostIn.get() : nullptr,
                                      receives ? hostOut.get() : nullptr);
  if (!host.isOk()) return host.status().withContext(what);
  COLLIE_RETURN_IF_ERROR(host->wait());

  // Host -> device on the stream; the Work completes when the stream passed it.
  if (receives) {
    COLLIE_RETURN_IF_ERROR(runtime_->memcpyAsync(output, hostOut.get(), outBytes, stream));
  }
  Result<DeviceEvent> done = runtime_->recordEvent(stream);
  if (!done.isOk()) return done.status().withContext(what);
  std::shared_ptr<void> doneHolder = eventHolder(runtime_, *done);
  auto poller = [runtime = runtime_, doneHolder, hostIn, hostOut]() -> std::optional<Status> {
    if (runtime->queryEvent(doneHolder.get())) return Status();
    return std::nullopt;
  };
  return Work(std::make_shared<WorkState>(std::move(poller)));
}

}  // namespace collie
