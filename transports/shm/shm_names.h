// Names of collie's POSIX shared-memory objects, and their removal by job.
//
// Every object collie creates in /dev/shm is named
//   "/collie-<job tag>-<32 random hex digits>"        a rank's FIFO segment (shm_segment.h)
//   "/collie-<job tag>-board-<32 random hex digits>"  a rank's board (shm_board.h)
// The job tag (16 hex digits, core/net/job_secret.h publicJobTag) holds no secret
// bit; the random part keeps names unguessable, and only the job's (secret-protected)
// store tells peers a name. The tag scopes names to the job that `collie run` launched, so
// the launcher can remove whatever its ranks left behind when it exits, whatever their
// fate (SIGKILL, or the SIGTERM it sends when another rank fails): ranks unlink their names
// as soon as every peer mapped them, but a rank killed before that cannot.
//
// Pure functions except removeJobShm(), which touches /dev/shm; all are safe from any
// thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collie/status.h"
#include "collie/unique_id.h"
#include "core/transport/transport.h"

namespace collie::shm {

// Longest name collie creates or opens, with the leading '/' (NAME_MAX is 255).
inline constexpr size_t kMaxShmNameLength = 64;
// Every name starts with this.
inline constexpr std::string_view kShmNamePrefix = "/collie-";
// What a board's name carries after the job tag.
inline constexpr std::string_view kBoardKind = "board-";

// The tag this process's names carry: the tag of the `collie run` launcher that started
// it (launcherShmTag of `launcher`'s secret and node rank, TransportContext::launcher,
// which is what that launcher removes), so that children of split() and shrink() carry
// it too; else the public tag of `secret` (the communicator's own: under other launchers
// nobody removes leftovers).
std::string jobScopeTag(const JobSecret& secret, const std::optional<LauncherScope>& launcher);

// The tag of the names made by the ranks of one `collie run` launcher: node 0's is the
// job's public tag, node R's that of a secret derived for node R. Hosts that share one
// /dev/shm (network namespaces, containers) thus never remove each other's names when
// their launchers finish at different times.
std::string launcherShmTag(const JobSecret& jobSecret, int nodeRank);

// A fresh name "/collie-<tag>-<kind><32 random hex digits>"; `kind` is "" or kBoardKind.
// Fails only when the OS's random source does.
Result<std::string> newShmName(std::string_view tag, std::string_view kind);

// Whether a peer's `name` is one collie could have made: kShmNamePrefix, at most
// kMaxShmNameLength characters, nothing but [0-9a-z-] after the '/', and `kind` right
// after the job tag ("" accepts any kind).
bool isShmName(std::string_view name, std::string_view kind = "");

// Removes this user's entries "/dev/shm/collie-<tag>-*" (the launcher, once its ranks are
// gone). Returns the names removed, without "/dev/shm/"; entries it cannot remove are
// skipped (another user's, or gone meanwhile). A malformed `tag` removes nothing.
std::vector<std::string> removeJobShm(std::string_view tag);

}  // namespace collie::shm
