#include "core/net/fd_limit.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>

namespace collie::net {
namespace {

std::string limitText(rlim_t value) {
  return value == RLIM_INFINITY ? std::string("unlimited") : std::to_string(value);
}

}  // namespace

bool isDescriptorLimit(int err) { return err == EMFILE || err == ENFILE; }

std::string descriptorLimitText(int err) {
  rlimit limit{};
  const bool known = ::getrlimit(RLIMIT_NOFILE, &limit) == 0;
  std::string soft = known ? limitText(limit.rlim_cur) : "unknown";
  std::string hard = known ? limitText(limit.rlim_max) : "unknown";
  std::string limits = "RLIMIT_NOFILE soft limit " + soft + ", hard limit " + hard;
  if (err == ENFILE) {
    return std::string("ENFILE (") + std::strerror(err) +
           "): the system-wide file table is full (this process's " + limits +
           "; see /proc/sys/fs/file-max)";
  }
  return std::string("EMFILE (") + std::strerror(err) + "): this process may open at most " + soft +
         " files (" + limits + "; raise it with `ulimit -n`)";
}

Status descriptorLimitError(const std::string& what, int err) {
  return Status(StatusCode::kSystemError, what + ": " + descriptorLimitText(err));
}

}  // namespace collie::net
