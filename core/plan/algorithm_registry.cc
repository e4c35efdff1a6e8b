#include <string>

#include "core/plan/algorithm_spec.h"

namespace collie {

Generator<Step> AlgorithmSpec::stream(const CollectiveArgs& args, const PlanParams& params,
                                      size_t chunkElems, int channel) const {
  (void)args, (void)params, (void)chunkElems, (void)channel;
  co_return;
}

AlgorithmRegistry* AlgorithmRegistry::makeWithBuiltins() {
  auto* made = new AlgorithmRegistry();  // never freed: specs outlive every communicator
  registerBuiltinAlgorithms(*made);
  return made;
}

Status AlgorithmRegistry::add(std::unique_ptr<const AlgorithmSpec> spec) {
  if (spec == nullptr) return invalidArgument("algorithm registry: no spec");
  const Algorithm id = spec->id();
  if (id == Algorithm::kAuto || isTeamAlgorithm(id) != spec->isTeam()) {
    return invalidArgument("algorithm registry: " + std::string(spec->name()) +
                           " takes the id of auto, or a team algorithm's id without being one "
                           "(or the reverse)");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (const AlgorithmSpec* mine : all()) {
    if (mine->id() == id || std::string_view(mine->name()) == spec->name()) {
      return invalidArgument("algorithm registry: " + std::string(spec->name()) +
                             " repeats the id or name of " + mine->name());
    }
  }
  const size_t count = count_.load(std::memory_order_relaxed);
  if (count == kMaxSpecs) return invalidArgument("algorithm registry: full");
  const AlgorithmSpec* added = spec.release();  // never removed: lives as long as the process
  specs_[count] = added;
  count_.store(count + 1, std::memory_order_release);
  byId_[static_cast<uint8_t>(id)].store(added, std::memory_order_release);
  for (size_t kind = 0; kind < kCollectiveKindSlots; ++kind) {
    const AlgorithmSpec* chosen = nullptr;
    const AlgorithmSpec* ring = nullptr;
    for (const AlgorithmSpec* mine : all()) {
      if (chosen == nullptr && mine->robustDefaultFor(static_cast<CollectiveKind>(kind))) {
        chosen = mine;
      }
      if (mine->id() == Algorithm::kRing) ring = mine;
    }
    robustDefault_[kind].store(chosen != nullptr ? chosen : ring, std::memory_order_release);
  }
  return Status();
}

const AlgorithmSpec* AlgorithmRegistry::find(std::string_view name) const {
  for (const AlgorithmSpec* spec : all()) {
    if (name == spec->name()) return spec;
  }
  return nullptr;
}

const AlgorithmSpec& AlgorithmRegistry::robustDefault(CollectiveKind kind) const {
  const size_t slot = static_cast<size_t>(kind);
  if (slot < kCollectiveKindSlots) {
    if (const AlgorithmSpec* spec = robustDefault_[slot].load(std::memory_order_acquire)) {
      return *spec;
    }
  }
  const AlgorithmSpec* ring = nullptr;
  for (const AlgorithmSpec* spec : all()) {
    if (spec->robustDefaultFor(kind)) return *spec;
    if (spec->id() == Algorithm::kRing) ring = spec;
  }
  return *ring;  // registered first, always (registerBuiltinAlgorithms)
}

const AlgorithmSpec& AlgorithmRegistry::resolve(Algorithm id, CollectiveKind kind) const {
  const AlgorithmSpec* spec = find(id);
  return spec != nullptr && !spec->isTeam() && spec->implements(kind) ? *spec : robustDefault(kind);
}

const AlgorithmSpec* AlgorithmRegistry::forcedSchedule(Algorithm id, CollectiveKind kind,
                                                       const CommShape& shape) const {
  const AlgorithmSpec* spec = find(id);
  return spec != nullptr && !spec->isTeam() && spec->implements(kind) && spec->runsOn(kind, shape)
             ? spec
             : nullptr;
}

std::string AlgorithmRegistry::namesImplementing(CollectiveKind kind) const {
  std::string names;
  for (const AlgorithmSpec* spec : all()) {
    if (!spec->isTeam() && spec->implements(kind)) {
      names += (names.empty() ? "" : ", ") + std::string(spec->name());
    }
  }
  return names;
}

std::string algorithmSpecName(Algorithm id) {
  const AlgorithmSpec* spec = AlgorithmRegistry::instance().find(id);
  return spec != nullptr ? spec->name() : std::string(algorithmName(id));
}

}  // namespace collie
