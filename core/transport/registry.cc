#include <algorithm>

#include "core/transport/transport.h"

namespace collie {

TransportRegistry& TransportRegistry::instance() {
  static TransportRegistry* registry = [] {
    auto* r = new TransportRegistry();
    registerBuiltinTransports(*r);
    return r;
  }();
  return *registry;
}

void TransportRegistry::add(TransportFactory factory) {
  factories_.push_back(std::move(factory));
  std::stable_sort(
      factories_.begin(), factories_.end(),
      [](const TransportFactory& a, const TransportFactory& b) { return a.priority < b.priority; });
}

std::vector<TransportFactory> TransportRegistry::factories() const { return factories_; }

const TransportFactory* TransportRegistry::find(const std::string& name) const {
  for (const TransportFactory& factory : factories_) {
    if (factory.name == name) return &factory;
  }
  return nullptr;
}

}  // namespace collie
