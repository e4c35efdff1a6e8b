// From Options to a communicator's Config (core/config/config.h): the typed fields
// (timeout, transport, algorithm, nchannels, chunkBytes, hostId) are overrides of their
// knobs like the entries of Options::config, and go through the same checks.
//
// Thread safety: pure functions of their arguments (and, for communicatorConfig, of the
// environment).
#pragma once

#include "collie/communicator.h"
#include "core/config/config.h"

namespace collie {

// The overrides `options` gives: Options::config plus one per typed field that is set.
// InvalidArgument when a typed field is negative, or names a knob that Options::config
// also sets to another value (naming both).
Result<KnobOverrides> optionOverrides(const Options& options);

// `base` with the overrides of `options`, validated (Config::withOverrides).
Result<Config> configWithOptions(const Config& base, const Options& options);

// A new communicator's snapshot: defaults, then the environment, then `options`.
Result<Config> communicatorConfig(const Options& options);

}  // namespace collie
