// Where the tuner's constants come from, agreed by every rank of a communicator.
//
// Rank 0 takes them from config (COLLIE_TUNE_ALPHA_US and COLLIE_TUNE_BW_GBPS both
// set), else from its per-host cache file, else by probing: a ping-pong of 8 bytes
// and of 1 MiB with rank 1 over their real connection (a few milliseconds), whose
// result it caches. The cache lives in COLLIE_TUNE_CACHE (default
// $XDG_CACHE_HOME/collie or ~/.cache/collie; "off" disables it), one file per build,
// CPU model and transport, so a rebuild or other hardware probes again. Rank 0 then
// publishes the constants in the store and every rank uses them, so all ranks tune
// alike.
//
// Thread safety: called once per communicator during creation.
#pragma once

#include <string>

#include "collie/store.h"
#include "core/engine/engine.h"
#include "core/tune/tuner.h"

namespace collie {

Result<TuneConstants> agreeOnTuneConstants(Engine& engine, Store& store, const std::string& jobKey,
                                           Deadline deadline);

// The cache file rank 0 would use for `transport` ("" when caching is off).
std::string tuneCachePath(const std::string& transport);

// The constants rank 0 would start from without probing: config, else the cache of
// `transport`. False when neither has them (a communicator would probe).
bool storedTuneConstants(const std::string& transport, TuneConstants* out);

}  // namespace collie
