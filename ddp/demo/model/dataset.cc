#include "ddp/demo/model/dataset.h"

#include <cmath>
#include <numeric>

namespace collie::ddp {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

float uniformMinus1To1(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t r = splitmix64(splitmix64(seed ^ splitmix64(stream)) + index);
  return static_cast<float>(static_cast<double>(r >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

void SyntheticDataset::sample(size_t index, float* x, float* y) const {
  for (int j = 0; j < dim_; ++j) x[j] = uniformMinus1To1(seed_, 0xda7a + index, j);
  for (int j = 0; j < dim_; ++j) y[j] = std::tanh(x[(j + 1) % dim_] - 0.5f * x[j]);
}

void SyntheticDataset::batch(const std::vector<size_t>& indices, std::vector<float>* x,
                             std::vector<float>* y) const {
  x->resize(indices.size() * dim_);
  y->resize(indices.size() * dim_);
  for (size_t k = 0; k < indices.size(); ++k) {
    sample(indices[k], x->data() + k * dim_, y->data() + k * dim_);
  }
}

std::vector<size_t> DistributedSampler::indices() const {
  if (size_ == 0 || nranks_ <= 0) return {};
  std::vector<size_t> perm(size_);
  std::iota(perm.begin(), perm.end(), size_t{0});
  if (shuffle_) {
    // Fisher-Yates with our own generator: identical on every rank and platform.
    uint64_t state = splitmix64(seed_ * 0x100000001b3ull + epoch_);
    for (size_t i = size_; i > 1; --i) {
      state = splitmix64(state);
      size_t j = static_cast<size_t>(state % i);
      std::swap(perm[i - 1], perm[j]);
    }
  }
  size_t total = numSamples() * nranks_;
  for (size_t k = 0; perm.size() < total; ++k) perm.push_back(perm[k % size_]);
  std::vector<size_t> mine;
  for (size_t p = rank_; p < total; p += nranks_) mine.push_back(perm[p]);
  return mine;
}

}  // namespace collie::ddp
