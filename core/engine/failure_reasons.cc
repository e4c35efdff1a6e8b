#include "core/engine/failure_reasons.h"

#include <charconv>
#include <future>
#include <thread>

namespace collie {
namespace {

constexpr size_t kMaxMessageBytes = 4096;

// Runs `request` on a detached thread (it owns everything it touches) and waits for
// its result up to `wait`. A request that outlives the wait finishes on its own.
template <typename T, typename F>
std::optional<T> runBounded(F request, std::chrono::milliseconds wait) {
  auto promise = std::make_shared<std::promise<T>>();
  std::future<T> future = promise->get_future();
  std::thread([promise, request = std::move(request)]() mutable {
    promise->set_value(request());
  }).detach();
  if (future.wait_for(wait) != std::future_status::ready) return std::nullopt;
  return future.get();
}

// "<code> <peer> <message>"
Bytes encode(const Status& status) {
  std::string message = status.message().substr(0, kMaxMessageBytes);
  std::string text = std::to_string(static_cast<int>(status.code())) + " " +
                     std::to_string(status.peer()) + " " + message;
  return Bytes(text.begin(), text.end());
}

std::optional<Status> decode(const Bytes& bytes) {
  std::string text(bytes.begin(), bytes.end());
  size_t first = text.find(' ');
  size_t second = first == std::string::npos ? first : text.find(' ', first + 1);
  if (second == std::string::npos || first == 0 || first > 3 || second - first > 11) {
    return std::nullopt;
  }
  int code = 0;
  long peer = 0;
  const char* begin = text.data();
  auto parsedCode = std::from_chars(begin, begin + first, code);
  auto parsedPeer = std::from_chars(begin + first + 1, begin + second, peer);
  if (parsedCode.ec != std::errc() || parsedCode.ptr != begin + first ||
      parsedPeer.ec != std::errc() || parsedPeer.ptr != begin + second) {
    return std::nullopt;
  }
  if (code <= 0 || code > static_cast<int>(StatusCode::kNotFound) || peer < -1 ||
      peer > (1 << 30)) {
    return std::nullopt;
  }
  return Status(static_cast<StatusCode>(code), text.substr(second + 1, kMaxMessageBytes),
                static_cast<int>(peer));
}

}  // namespace

FailureReasons::FailureReasons(std::shared_ptr<Store> store, std::string jobKey, int rank)
    : store_(std::move(store)), jobKey_(std::move(jobKey)), rank_(rank) {}

std::string FailureReasons::keyOf(int rank) const {
  return jobKey_ + "/failed/" + std::to_string(rank);
}

void FailureReasons::publish(const Status& status, std::chrono::milliseconds wait) const {
  if (!store_ || status.isOk()) return;
  runBounded<bool>([store = store_, key = keyOf(rank_),
                    value = encode(status)] { return store->set(key, value).isOk(); },
                   wait);
}

std::optional<Status> FailureReasons::lookup(int peer, std::chrono::milliseconds wait) const {
  if (!store_ || peer < 0 || peer == rank_) return std::nullopt;
  std::optional<std::optional<Status>> found = runBounded<std::optional<Status>>(
      [store = store_, key = keyOf(peer), wait]() -> std::optional<Status> {
        Result<Bytes> value = store->get(key, Clock::now() + wait);
        if (!value.isOk()) return std::nullopt;
        return decode(*value);
      },
      wait + std::chrono::milliseconds(50));
  return found ? *found : std::nullopt;
}

Status FailureReasons::explain(const Status& own, std::chrono::milliseconds wait) const {
  const int peer = own.peer();
  if (own.isOk() || peer < 0 || peer == rank_ ||
      (own.code() != StatusCode::kRemoteError && own.code() != StatusCode::kTimeout)) {
    return own;
  }
  std::optional<Status> root = lookup(peer, wait);
  if (!root) return own;
  // Keep the root's kind of failure (a mismatch stays a mismatch) and its culprit,
  // unless the culprit is this rank or the root was a plain abort.
  StatusCode code = root->code() == StatusCode::kAborted ? StatusCode::kRemoteError : root->code();
  int culprit = root->peer() >= 0 && root->peer() != rank_ ? root->peer() : peer;
  return Status(
      code, own.message() + "; rank " + std::to_string(peer) + " gave up first: " + root->message(),
      culprit);
}

}  // namespace collie
