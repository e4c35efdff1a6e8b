#include "core/comm/options_config.h"

#include <string>

namespace collie {
namespace {

// Adds the override of one typed field; fails when Options::config disagrees.
Status addTyped(const char* field, const char* knob, const std::string& value, KnobOverrides* out) {
  auto [it, added] = out->emplace(knob, value);
  if (added || it->second == value) return Status();
  return invalidArgument(std::string("Options::") + field + " (" + value +
                         ") and Options::config[\"" + knob + "\"] ('" + it->second +
                         "') disagree: set one");
}

Status nonNegative(const char* field, long long value) {
  if (value >= 0) return Status();
  return invalidArgument(std::string("Options::") + field + " is negative (" +
                         std::to_string(value) + "); 0 leaves it to the configuration");
}

}  // namespace

Result<KnobOverrides> optionOverrides(const Options& options) {
  KnobOverrides out(options.config.begin(), options.config.end());
  COLLIE_RETURN_IF_ERROR(nonNegative("timeout", options.timeout.count()));
  COLLIE_RETURN_IF_ERROR(nonNegative("nchannels", options.nchannels));
  if (options.timeout.count() > 0) {
    COLLIE_RETURN_IF_ERROR(addTyped("timeout", "COLLIE_TIMEOUT",
                                    std::to_string(options.timeout.count()) + "ms", &out));
  }
  if (!options.transport.empty()) {
    COLLIE_RETURN_IF_ERROR(addTyped("transport", "COLLIE_TRANSPORT", options.transport, &out));
  }
  if (options.algorithm != Algorithm::kAuto) {
    COLLIE_RETURN_IF_ERROR(
        addTyped("algorithm", "COLLIE_ALGO", std::string(algorithmName(options.algorithm)), &out));
  }
  if (options.nchannels > 0) {
    COLLIE_RETURN_IF_ERROR(
        addTyped("nchannels", "COLLIE_NCHANNELS", std::to_string(options.nchannels), &out));
  }
  if (options.chunkBytes > 0) {
    COLLIE_RETURN_IF_ERROR(
        addTyped("chunkBytes", "COLLIE_CHUNKSIZE", std::to_string(options.chunkBytes), &out));
  }
  if (!options.hostId.empty()) {
    COLLIE_RETURN_IF_ERROR(addTyped("hostId", "COLLIE_HOST_ID", options.hostId, &out));
  }
  return out;
}

Result<Config> configWithOptions(const Config& base, const Options& options) {
  Result<KnobOverrides> overrides = optionOverrides(options);
  if (!overrides.isOk()) return overrides.status();
  return base.withOverrides(*overrides);
}

Result<Config> communicatorConfig(const Options& options) {
  return configWithOptions(Config::fromEnvironment(), options);
}

}  // namespace collie
