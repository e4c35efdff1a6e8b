// Status and Result<T>: the error values used everywhere below the public API.
//
// A Status is either OK (holds nothing, costs one null pointer) or an error with a
// code, a message built where the error was first seen, and optionally the rank of
// the peer that caused it. Result<T> holds either a T or an error Status; its value
// may be read only when ok().
//
// Thread safety: Status and Result are values; distinct objects may be used from
// different threads, a single object needs external synchronisation for writes.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace collie {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // a caller's argument is wrong; nothing was sent
  kTimeout = 2,          // a deadline passed; the message names what was waited for
  kRemoteError = 3,      // a peer failed, closed its connection or sent bad data
  kSystemError = 4,      // an OS call failed (errno in the message)
  kInternal = 5,         // a bug in collie
  kMismatch = 6,         // ranks disagree on a collective (kind, count, dtype, op, root)
  kUnauthenticated = 7,  // a connection presented a wrong job secret
  kUnsupported = 8,      // a valid request this build cannot serve
  kAborted = 9,          // the communicator was aborted
  kNotFound = 10,
};

const char* statusCodeName(StatusCode code);

class Status {
 public:
  Status() noexcept = default;
  Status(StatusCode code, std::string message, int peer = -1);
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status ok() { return Status(); }

  bool isOk() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  const std::string& message() const;
  // The rank of the peer this error is about, or -1 when it is not about one peer.
  int peer() const { return state_ ? state_->peer : -1; }
  // "Timeout: ..." style text; "OK" for success.
  std::string toString() const;

  // Returns a copy whose message is prefixed with `context` and ": ".
  Status withContext(const std::string& context) const;

 private:
  struct State {
    StatusCode code;
    std::string message;
    int peer;
  };
  std::unique_ptr<State> state_;
};

// Factories, one per kind, in the style of leveldb::Status::NotFound(...).
Status invalidArgument(std::string message);
Status timeoutError(std::string message, int peer = -1);
Status remoteError(std::string message, int peer = -1);
Status systemError(std::string what, int err);  // appends strerror(err)
Status internalError(std::string message);
Status mismatchError(std::string message, int peer = -1);
Status unauthenticated(std::string message, int peer = -1);
Status unsupported(std::string message);
Status abortedError(std::string message);
Status notFound(std::string message);

template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(runtime/explicit)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(runtime/explicit)
    if (status_.isOk()) status_ = internalError("Result constructed from an OK status");
  }

  bool isOk() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace collie

// Returns the Status of `expr` from the enclosing function when it is an error.
#define COLLIE_RETURN_IF_ERROR(expr)                   \
  do {                                                 \
    ::collie::Status collie_status_ = (expr);          \
    if (!collie_status_.isOk()) return collie_status_; \
  } while (0)
