// Where the tuner's constants come from, agreed by every rank of a communicator.
//
// Rank 0 takes them from config (COLLIE_TUNE_ALPHA_US and COLLIE_TUNE_BW_GBPS both
// set), else from its per-host cache file, else by probing with rank 1 over their real
// connection: alpha is the lower-quartile one-way time of 21 8-byte ping-pongs,
// bandwidth 1 MiB over the lower-quartile one-way time of 11 1-MiB ping-pongs less
// alpha, both clamped to sane bounds (a few milliseconds in all). The cache lives in
// COLLIE_TUNE_CACHE (default $XDG_CACHE_HOME/collie or ~/.cache/collie; "off" disables it), one
// file per build (GNU build id), host, CPU model and count, and transport, so a rebuild or other
// hardware probes again. Rank 0 then publishes the constants (exact to the bit) and
// its plan limits (algorithm, chunk, channels) in the store; every rank uses rank 0's
// constants, and a rank whose limits differ fails creation with kMismatch, so no two
// ranks can plan the same collective differently.
//
// Over several hosts (EngineConfig::hosts) rank 0 probes with the next rank of its own
// host (rank 1 when it has none), and then, for the inter-host constants
// (TuneConstants::netAlphaUs, netBwGBps), with the lowest rank of another host, unless
// COLLIE_TUNE_NET_ALPHA_US and COLLIE_TUNE_NET_BW_GBPS give them; those are never
// cached, and published under a key of their own.
//
// Thread safety: called once per communicator during creation.
#pragma once

#include <string>

#include "collie/store.h"
#include "core/engine/engine.h"
#include "core/tune/tune_knobs.h"
#include "core/tune/tuner.h"

namespace collie {

Result<TuneConstants> agreeOnTuneConstants(Engine& engine, Store& store, const std::string& jobKey,
                                           Deadline deadline);

// The most channels a schedule may use, the same on every rank: rank 0's
// Engine::usefulChannels(), which it publishes (configured channels when
// COLLIE_NCHANNELS or Options fixed them). Every rank has that many connections per
// peer (agreeOnTuneConstants checked the configured counts are equal), so a rank whose
// own transports would have said otherwise still plans what rank 0 plans.
Result<int> agreeOnPlanChannels(Engine& engine, Store& store, const std::string& jobKey,
                                Deadline deadline);

// The text rank 0 publishes and caches, and its inverse (which rejects garbage and
// clamps): decode(encode(c)) == c exactly.
std::string encodeTuneConstants(const TuneConstants& constants);
bool decodeTuneConstants(const std::string& text, TuneConstants* out);

// The cache file rank 0 would use for `transport` with the tuner's knobs `knobs` (""
// when caching is off).
std::string tuneCachePath(const TuneKnobs& knobs, const std::string& transport);

// The constants rank 0 would start from without probing: the knobs', else the cache of
// `transport`. False when neither has them (a communicator would probe).
bool storedTuneConstants(const TuneKnobs& knobs, const std::string& transport, TuneConstants* out);

}  // namespace collie
