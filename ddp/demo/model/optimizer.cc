#include "ddp/demo/model/optimizer.h"

#include <cmath>

namespace collie::ddp {
namespace {

class Sgd : public Optimizer {
 public:
  Sgd(const OptimizerConfig& c, const std::vector<size_t>& sizes) : lr_(c.lr), mu_(c.momentum) {
    for (size_t n : sizes) state_.emplace_back(n, 0.0f);
  }
  std::string name() const override { return "sgd"; }
  void step(std::vector<std::span<float>>& params, GradientSink& grads) override {
    ++steps_;
    for (size_t p = 0; p < params.size(); ++p) {
      std::span<float> g = grads.grad(p);
      std::vector<float>& v = state_[p];
      for (size_t i = 0; i < params[p].size(); ++i) {
        v[i] = mu_ * v[i] + g[i];
        params[p][i] -= lr_ * v[i];
      }
    }
  }

 private:
  float lr_, mu_;
};

class Adam : public Optimizer {
 public:
  Adam(const OptimizerConfig& c, const std::vector<size_t>& sizes)
      : lr_(c.lr), b1_(c.beta1), b2_(c.beta2), eps_(c.eps) {
    for (size_t n : sizes) state_.emplace_back(n, 0.0f);  // m
    for (size_t n : sizes) state_.emplace_back(n, 0.0f);  // v
  }
  std::string name() const override { return "adam"; }
  void step(std::vector<std::span<float>>& params, GradientSink& grads) override {
    ++steps_;
    const float c1 = 1.0f - std::pow(b1_, static_cast<float>(steps_));
    const float c2 = 1.0f - std::pow(b2_, static_cast<float>(steps_));
    for (size_t p = 0; p < params.size(); ++p) {
      std::span<float> g = grads.grad(p);
      std::vector<float>& m = state_[p];
      std::vector<float>& v = state_[params.size() + p];
      for (size_t i = 0; i < params[p].size(); ++i) {
        m[i] = b1_ * m[i] + (1.0f - b1_) * g[i];
        v[i] = b2_ * v[i] + (1.0f - b2_) * g[i] * g[i];
        params[p][i] -= lr_ * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps_);
      }
    }
  }

 private:
  float lr_, b1_, b2_, eps_;
};

}  // namespace

std::unique_ptr<Optimizer> makeOptimizer(const OptimizerConfig& config,
                                         const std::vector<size_t>& paramSizes) {
  if (config.name == "sgd") return std::make_unique<Sgd>(config, paramSizes);
  if (config.name == "adam") return std::make_unique<Adam>(config, paramSizes);
  return nullptr;
}

}  // namespace collie::ddp
