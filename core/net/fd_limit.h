// Running out of file descriptors, said plainly.
//
// accept(), socket() and open() fail with EMFILE when the process has as many open
// descriptors as its RLIMIT_NOFILE soft limit allows (ENFILE: the system-wide table is
// full). Such a failure does not go away by retrying at once: a poll loop that keeps
// finding its listening socket readable would spin. Callers treat it as its own case
// and report it with descriptorLimitError, whose message names the errno and the
// limit, so that the user knows to raise `ulimit -n`.
//
// Thread safety: all functions are reentrant.
#pragma once

#include <string>

#include "collie/status.h"

namespace collie::net {

// True for EMFILE and ENFILE.
bool isDescriptorLimit(int err);

// "EMFILE (Too many open files): this process may open at most 64 files
// (RLIMIT_NOFILE soft limit 64, hard limit 1048576; raise it with `ulimit -n`)",
// or the ENFILE equivalent.
std::string descriptorLimitText(int err);

// A SystemError "<what>: <descriptorLimitText(err)>".
Status descriptorLimitError(const std::string& what, int err);

}  // namespace collie::net
