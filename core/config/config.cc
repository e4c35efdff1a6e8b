#include "core/config/config.h"

#include <cstdlib>
#include <functional>
#include <mutex>
#include <set>
#include <utility>

#include "core/log/log.h"

namespace collie {

namespace {

using Lookup = std::function<const char*(const char*)>;

const char* nonEmpty(const char* value) {
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

std::vector<Config::Entry> defaults() {
  std::vector<Config::Entry> entries;
  for (const Knob* knob : KnobRegistry::instance().knobs()) {
    Config::Entry entry;
    entry.knob = knob;
    entries.push_back(std::move(entry));
  }
  return entries;
}

// Each knob: its variable, else an alias value collie accepts (one it does not was meant
// for NCCL: remembered for the warning), else the default.
std::vector<Config::Entry> read(const Lookup& lookup) {
  std::vector<Config::Entry> entries = defaults();
  for (Config::Entry& entry : entries) {
    const Knob& knob = *entry.knob;
    if (const char* value = nonEmpty(lookup(knob.name))) {
      entry.value = value;
      entry.source = KnobSource::kEnvironment;
      entry.accepted = checkKnobValue(knob, value).isOk();
      continue;
    }
    if (knob.ncclAlias == nullptr) continue;
    if (const char* value = nonEmpty(lookup(knob.ncclAlias))) {
      if (checkKnobValue(knob, value).isOk()) {
        entry.value = value;
        entry.source = KnobSource::kAlias;
      } else {
        entry.refusedAlias = value;
      }
    }
  }
  return entries;
}

void warnAboutRefusedAliases(const std::vector<Config::Entry>& entries) {
  static std::once_flag warned;
  std::call_once(warned, [&] {
    for (const Config::Entry& entry : entries) {
      if (entry.refusedAlias.empty() || entry.source == KnobSource::kEnvironment) continue;
      const Knob& knob = *entry.knob;
      COLLIE_LOG(WARN, INIT) << knob.ncclAlias << "='" << entry.refusedAlias
                             << "' has no collie equivalent (" << knob.name << " accepts "
                             << knobRange(knob) << "); using " << knob.name << "'s default '"
                             << knob.defaultValue << "'";
    }
  });
}

// What an override of an unknown name gets told: the knob an NCCL_* name maps onto.
std::string unknownName(const std::string& name) {
  for (const Knob* knob : KnobRegistry::instance().knobs()) {
    if (knob->ncclAlias != nullptr && name == knob->ncclAlias) {
      return "'" + name + "' is not a knob (overrides take collie's names: use " + knob->name + ")";
    }
  }
  return "unknown knob '" + name + "' (not in this build's knob tables; `collie info` lists them)";
}

template <typename T, typename Parse>
T parsedOrDefault(const Config::Entry* entry, Parse parse) {
  if (entry == nullptr) return T{};
  if (entry->accepted && !entry->value.empty()) {
    auto parsed = parse(entry->value);
    if (parsed.isOk()) return *parsed;
  }
  auto fallback = parse(entry->knob->defaultValue);
  return fallback.isOk() ? *fallback : T{};
}

}  // namespace

Config::Config() : entries_(std::make_shared<const std::vector<Entry>>(defaults())) {}

Config::Config(std::shared_ptr<const std::vector<Entry>> entries) : entries_(std::move(entries)) {}

Config Config::fromEnvironment() {
  return Config(std::make_shared<const std::vector<Entry>>(
      read([](const char* name) { return std::getenv(name); })));
}

Config Config::fromVariables(const std::map<std::string, std::string>& variables) {
  return Config(std::make_shared<const std::vector<Entry>>(read([&](const char* name) {
    auto it = variables.find(name);
    return it == variables.end() ? nullptr : it->second.c_str();
  })));
}

Result<Config> Config::withOverrides(const KnobOverrides& overrides) const {
  auto entries = std::make_shared<std::vector<Entry>>(*entries_);
  for (const auto& [name, value] : overrides) {
    Entry* found = nullptr;
    for (Entry& entry : *entries) {
      if (name == entry.knob->name) found = &entry;
    }
    if (found == nullptr) return invalidArgument("Options::config: " + unknownName(name));
    if (found->knob->processWide) {
      return invalidArgument("Options::config: " + name +
                             " is process-wide (read once, from the environment, before any "
                             "communicator exists): set it in the environment instead");
    }
    COLLIE_RETURN_IF_ERROR(checkKnobValue(*found->knob, value).withContext("Options::config"));
    found->value = value;
    found->source = value.empty() ? KnobSource::kDefault : KnobSource::kOption;
    found->accepted = true;
  }
  Config config(std::move(entries));
  COLLIE_RETURN_IF_ERROR(config.validate());
  return config;
}

Status Config::validate() const {
  for (const Entry& entry : *entries_) {
    if (!entry.accepted) COLLIE_RETURN_IF_ERROR(checkKnobValue(*entry.knob, entry.value));
  }
  warnAboutRefusedAliases(*entries_);
  return Status();
}

Status Config::check(std::string_view name) const {
  const Entry* found = entry(name);
  return found == nullptr || found->accepted ? Status()
                                             : checkKnobValue(*found->knob, found->value);
}

const Config::Entry* Config::find(std::string_view name) const {
  for (const Entry& entry : *entries_) {
    if (name == entry.knob->name) return &entry;
  }
  return nullptr;
}

const Config::Entry* Config::entry(std::string_view name) const {
  const Entry* found = find(name);
  if (found == nullptr) {
    COLLIE_LOG(WARN, INIT) << "collie bug: knob " << name << " is read but not registered";
  }
  return found;
}

std::string Config::text(std::string_view name) const {
  const Entry* found = entry(name);
  if (found == nullptr) return "";
  if (found->accepted && found->source != KnobSource::kDefault && !found->value.empty()) {
    return found->value;
  }
  return found->knob->defaultValue;
}

int64_t Config::integer(std::string_view name) const {
  return parsedOrDefault<int64_t>(entry(name), [](const std::string& v) { return parseSize(v); });
}

std::chrono::microseconds Config::duration(std::string_view name) const {
  return parsedOrDefault<std::chrono::microseconds>(
      entry(name), [](const std::string& v) { return parseDuration(v); });
}

KnobSource Config::source(std::string_view name) const {
  const Entry* found = entry(name);
  return found == nullptr ? KnobSource::kDefault : found->source;
}

std::string Config::sourceName(std::string_view name) const {
  const Entry* found = entry(name);
  if (found == nullptr) return "unknown";
  switch (found->source) {
    case KnobSource::kDefault:
      return "default";
    case KnobSource::kEnvironment:
      return "env";
    case KnobSource::kAlias:
      return found->knob->ncclAlias;
    case KnobSource::kOption:
      return "option";
  }
  return "default";
}

std::string Config::display(std::string_view name) const {
  const Entry* found = entry(name);
  if (found == nullptr) return "";
  const std::string value =
      found->source == KnobSource::kDefault ? found->knob->defaultValue : found->value;
  return isSecretKnob(*found->knob) && !value.empty() ? "(set, hidden)" : value;
}

std::string Config::comparable(const Entry& entry) const {
  const Knob& knob = *entry.knob;
  if (knob.kind == KnobKind::kInteger) return std::to_string(integer(knob.name));
  if (knob.kind == KnobKind::kDuration) return std::to_string(duration(knob.name).count()) + "us";
  return text(knob.name);
}

const std::vector<Config::Entry>& Config::entries() const { return *entries_; }

}  // namespace collie
