#include "core/config/knob_registry.h"

#include <set>

namespace collie {

KnobRegistry& KnobRegistry::instance() {
  static KnobRegistry* registry = [] {
    auto* r = new KnobRegistry();
    registerBuiltinKnobs(*r);
    return r;
  }();
  return *registry;
}

Status KnobRegistry::add(KnobTable table) {
  std::lock_guard<std::mutex> lock(mutex_);
  Status refused;
  std::set<std::string_view> names;
  for (const Knob& knob : table.knobs) {
    bool taken = !names.insert(knob.name).second;
    for (const KnobTable& other : tables_) {
      for (const Knob& known : other.knobs)
        taken = taken || std::string_view(known.name) == knob.name;
    }
    if (taken) {
      refused = invalidArgument("knob table '" + table.component + "': " + knob.name +
                                " is already declared");
      break;
    }
    Status def = checkKnobValue(knob, knob.defaultValue);
    if (!def.isOk()) {
      refused =
          def.withContext("knob table '" + table.component + "': the default of " + knob.name);
      break;
    }
  }
  if (!refused.isOk()) {
    if (status_.isOk()) status_ = refused;
    return refused;
  }
  tables_.push_back(std::move(table));
  return Status();
}

Status KnobRegistry::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

std::vector<const KnobTable*> KnobRegistry::tables() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<const KnobTable*> out;
  for (const KnobTable& table : tables_) out.push_back(&table);
  return out;
}

std::vector<const Knob*> KnobRegistry::knobs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<const Knob*> out;
  for (const KnobTable& table : tables_) {
    for (const Knob& knob : table.knobs) out.push_back(&knob);
  }
  return out;
}

const Knob* KnobRegistry::find(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const KnobTable& table : tables_) {
    for (const Knob& knob : table.knobs) {
      if (name == knob.name) return &knob;
    }
  }
  return nullptr;
}

std::string KnobRegistry::componentOf(const Knob& knob) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const KnobTable& table : tables_) {
    for (const Knob& mine : table.knobs) {
      if (&mine == &knob) return table.component;
    }
  }
  return "";
}

}  // namespace collie
