// The tuner's per-host cache files (tune-<key>-<transport>.txt in COLLIE_TUNE_CACHE):
// writing one atomically and keeping the directory bounded.
//
// Every build has its own key (tune_probe.h), so a developer who rebuilds, or a machine
// that sees many versions, would leave one stale file per build behind. After each write
// the directory keeps the newest kTuneCacheKeep files named tune-*.txt (by modification
// time) and removes the rest; other files in it are never touched. A file another process
// is reading may be removed under it: the reader then probes again, which is what a
// missing cache means anyway.
//
// Thread safety: the functions may run concurrently in several processes; a lost race
// costs at most a probe.
#pragma once

#include <cstddef>
#include <string>

namespace collie {

inline constexpr size_t kTuneCacheKeep = 64;

// Writes `line` and a newline to `path` through a temporary file and a rename, creating
// the directory (and its parent) when missing, then prunes the directory to `keep`
// cache files. Returns false when the file could not be written (caching is an
// optimisation: the caller goes on either way).
bool writeTuneCache(const std::string& path, const std::string& line, size_t keep = kTuneCacheKeep);

// Removes all but the `keep` newest tune-*.txt files of `dir`; returns how many it removed.
size_t pruneTuneCache(const std::string& dir, size_t keep);

}  // namespace collie
