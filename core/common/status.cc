#include "collie/status.h"

#include <cstring>

namespace collie {

const char* statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "Invalid argument";
    case StatusCode::kTimeout:
      return "Timeout";
    case StatusCode::kRemoteError:
      return "Remote error";
    case StatusCode::kSystemError:
      return "System error";
    case StatusCode::kInternal:
      return "Internal error";
    case StatusCode::kMismatch:
      return "Collective mismatch";
    case StatusCode::kUnauthenticated:
      return "Unauthenticated";
    case StatusCode::kUnsupported:
      return "Unsupported";
    case StatusCode::kAborted:
      return "Aborted";
    case StatusCode::kNotFound:
      return "Not found";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string message, int peer) {
  if (code != StatusCode::kOk) state_.reset(new State{code, std::move(message), peer});
}

Status::Status(const Status& other) : state_(other.state_ ? new State(*other.state_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) state_.reset(other.state_ ? new State(*other.state_) : nullptr);
  return *this;
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::toString() const {
  if (!state_) return "OK";
  return std::string(statusCodeName(state_->code)) + ": " + state_->message;
}

Status Status::withContext(const std::string& context) const {
  if (!state_) return *this;
  return Status(state_->code, context + ": " + state_->message, state_->peer);
}

Status invalidArgument(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}
Status timeoutError(std::string message, int peer) {
  return Status(StatusCode::kTimeout, std::move(message), peer);
}
Status remoteError(std::string message, int peer) {
  return Status(StatusCode::kRemoteError, std::move(message), peer);
}
Status systemError(std::string what, int err) {
  return Status(StatusCode::kSystemError, what + ": " + std::strerror(err));
}
Status internalError(std::string message) {
  return Status(StatusCode::kInternal, std::move(message));
}
Status mismatchError(std::string message, int peer) {
  return Status(StatusCode::kMismatch, std::move(message), peer);
}
Status unauthenticated(std::string message, int peer) {
  return Status(StatusCode::kUnauthenticated, std::move(message), peer);
}
Status unsupported(std::string message) {
  return Status(StatusCode::kUnsupported, std::move(message));
}
Status abortedError(std::string message) {
  return Status(StatusCode::kAborted, std::move(message));
}
Status notFound(std::string message) { return Status(StatusCode::kNotFound, std::move(message)); }

}  // namespace collie
