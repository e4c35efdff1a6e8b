#include "ddp/demo/model/mlp.h"

#include <chrono>
#include <cmath>

#include "ddp/demo/model/dataset.h"

namespace collie::ddp {
namespace {

// Dot product in a fixed order (eight partial sums, then the tail): vectorisable and
// deterministic.
float dot(const float* a, const float* b, size_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  }
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

Mlp::Mlp(int layers, int dim, uint64_t seed) : layers_(layers), dim_(dim) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  for (int l = 0; l < layers; ++l) {
    std::vector<float> w(static_cast<size_t>(dim) * dim);
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] = scale * uniformMinus1To1(seed, 1000003ull * l + 17, i);
    }
    params_.push_back(std::move(w));
    params_.emplace_back(dim, 0.0f);
  }
  acts_.resize(layers + 1);
}

int Mlp::dimForParams(size_t paramsPerLayer) {
  size_t d = static_cast<size_t>(std::sqrt(static_cast<double>(paramsPerLayer)));
  while (d > 1 && d * d + d > paramsPerLayer) --d;
  while ((d + 1) * (d + 1) + (d + 1) <= paramsPerLayer) ++d;
  return static_cast<int>(std::max<size_t>(d, 1));
}

size_t Mlp::numElements() const {
  size_t n = 0;
  for (const auto& p : params_) n += p.size();
  return n;
}

std::vector<std::span<float>> Mlp::parameters() {
  std::vector<std::span<float>> out;
  for (auto& p : params_) out.emplace_back(p);
  return out;
}

std::vector<size_t> Mlp::paramSizes() const {
  std::vector<size_t> out;
  for (const auto& p : params_) out.push_back(p.size());
  return out;
}

void Mlp::forward(const float* x, size_t batch, Timeline* timeline) {
  const size_t d = dim_;
  batch_ = batch;
  acts_[0].assign(x, x + batch * d);
  for (int l = 0; l < layers_; ++l) {
    double start = timeline ? timeline->nowUs() : 0;
    const std::vector<float>& w = params_[weightIndex(l)];
    const std::vector<float>& b = params_[biasIndex(l)];
    const std::vector<float>& in = acts_[l];
    std::vector<float>& out = acts_[l + 1];
    out.assign(batch * d, 0.0f);
    for (size_t s = 0; s < batch; ++s) {
      const float* h = &in[s * d];
      for (size_t o = 0; o < d; ++o) {
        const float* row = &w[o * d];
        float z = b[o] + dot(row, h, d);
        out[s * d + o] = (l + 1 < layers_) ? std::tanh(z) : z;
      }
    }
    if (timeline) timeline->record(EventKind::kForward, l, start, timeline->nowUs());
  }
}

Result<double> Mlp::backward(const float* target, GradientSink& sink, float lossScale,
                             const ComputeBurner* burner, Timeline* timeline) {
  const size_t d = dim_;
  const size_t batch = batch_;
  if (batch == 0) return invalidArgument("Mlp::backward: call forward() first");
  // dh = d(loss)/d(output) * lossScale, loss = mean_s 0.5 * ||out_s - y_s||^2.
  const std::vector<float>& out = acts_[layers_];
  std::vector<float> dh(batch * d);
  double loss = 0;
  for (size_t k = 0; k < batch * d; ++k) {
    float diff = out[k] - target[k];
    loss += 0.5 * static_cast<double>(diff) * diff;
    dh[k] = diff / static_cast<float>(batch * d) * lossScale;
  }
  loss /= static_cast<double>(batch * d);

  std::vector<float> dz(batch * d), dprev;
  for (int l = layers_ - 1; l >= 0; --l) {
    const auto start = std::chrono::steady_clock::now();
    const double startUs = timeline ? timeline->nowUs() : 0;
    const std::vector<float>& h = acts_[l];
    const std::vector<float>& w = params_[weightIndex(l)];
    const std::vector<float>& a = acts_[l + 1];
    for (size_t k = 0; k < batch * d; ++k) {
      dz[k] = (l + 1 < layers_) ? dh[k] * (1.0f - a[k] * a[k]) : dh[k];
    }
    if (l != unusedLayer_) {
      std::span<float> gw = sink.grad(weightIndex(l));
      std::span<float> gb = sink.grad(biasIndex(l));
      for (size_t o = 0; o < d; ++o) {
        float* gRow = &gw[o * d];
        for (size_t s = 0; s < batch; ++s) {
          const float g = dz[s * d + o];
          const float* hs = &h[s * d];
          for (size_t i = 0; i < d; ++i) gRow[i] += g * hs[i];
        }
        float sum = 0;
        for (size_t s = 0; s < batch; ++s) sum += dz[s * d + o];
        gb[o] += sum;
      }
    }
    if (l > 0) {
      dprev.assign(batch * d, 0.0f);
      for (size_t s = 0; s < batch; ++s) {
        float* dp = &dprev[s * d];
        for (size_t o = 0; o < d; ++o) {
          const float g = dz[s * d + o];
          const float* row = &w[o * d];
          for (size_t i = 0; i < d; ++i) dp[i] += g * row[i];
        }
      }
      dh.swap(dprev);
    }
    if (burner != nullptr) burner->burnLayerRemainder(start);
    if (timeline) timeline->record(EventKind::kBackward, l, startUs, timeline->nowUs());
    if (l != unusedLayer_) {
      COLLIE_RETURN_IF_ERROR(sink.markReady(biasIndex(l)));
      COLLIE_RETURN_IF_ERROR(sink.markReady(weightIndex(l)));
    }
  }
  return loss;
}

}  // namespace collie::ddp
