#include "core/config/knob_reader.h"

#include "core/config/knob_registry.h"

namespace collie {

bool KnobReader::known(std::string_view name) {
  const Config::Entry* entry = config_.find(name);
  if (entry == nullptr) {
    if (status_.isOk()) {
      status_ = internalError("collie bug: knob " + std::string(name) +
                              " is read, but no registered knob table declares it");
    }
    return false;
  }
  if (status_.isOk() && refused_ == RefusedValue::kFail) status_ = config_.check(name);
  return true;
}

std::string KnobReader::text(std::string_view name) {
  return known(name) ? config_.text(name) : std::string();
}

int64_t KnobReader::integer(std::string_view name) {
  return known(name) ? config_.integer(name) : 0;
}

std::chrono::microseconds KnobReader::duration(std::string_view name) {
  return known(name) ? config_.duration(name) : std::chrono::microseconds(0);
}

bool KnobReader::isSet(std::string_view name) { return known(name) && config_.isSet(name); }

Status parseEveryKnobTable(const Config& config) {
  for (const KnobTable* table : KnobRegistry::instance().tables()) {
    if (table->parse == nullptr) continue;
    Status parsed = table->parse(config);
    if (!parsed.isOk()) return parsed.withContext("the " + table->component + " knobs");
  }
  return Status();
}

}  // namespace collie
