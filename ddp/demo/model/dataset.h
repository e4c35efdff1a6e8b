// A synthetic regression data set and a DistributedSampler.
//
// SyntheticDataset: sample i is a pure function of (seed, i): x uniform in [-1, 1]^dim,
// target y_j = tanh(x_{(j+1) mod dim} - 0.5 x_j) (a fixed "teacher" the MLP can fit).
//
// DistributedSampler (PyTorch semantics): each epoch, a permutation of [0, size) drawn
// from (seed, epoch) -- the same on every rank -- is padded by repeating its head to
// a multiple of nranks, and rank r takes positions r, r + nranks, ...  Every rank gets
// ceil(size / nranks) indices; setEpoch() changes the shuffle.
//
// Pure functions / plain values; safe to use one object per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace collie::ddp {

// Deterministic uniform value in [-1, 1) from (seed, stream, index).
float uniformMinus1To1(uint64_t seed, uint64_t stream, uint64_t index);

class SyntheticDataset {
 public:
  SyntheticDataset(size_t size, int dim, uint64_t seed) : size_(size), dim_(dim), seed_(seed) {}
  size_t size() const { return size_; }
  int dim() const { return dim_; }
  void sample(size_t index, float* x, float* y) const;
  // Gathers `indices` into row-major x and y (indices.size() rows of dim floats).
  void batch(const std::vector<size_t>& indices, std::vector<float>* x,
             std::vector<float>* y) const;

 private:
  size_t size_;
  int dim_;
  uint64_t seed_;
};

class DistributedSampler {
 public:
  DistributedSampler(size_t datasetSize, int nranks, int rank, uint64_t seed, bool shuffle = true)
      : size_(datasetSize), nranks_(nranks), rank_(rank), seed_(seed), shuffle_(shuffle) {}
  void setEpoch(uint64_t epoch) { epoch_ = epoch; }
  uint64_t epoch() const { return epoch_; }
  size_t numSamples() const { return (size_ + nranks_ - 1) / nranks_; }
  std::vector<size_t> indices() const;

 private:
  size_t size_;
  int nranks_;
  int rank_;
  uint64_t seed_;
  bool shuffle_;
  uint64_t epoch_ = 0;
};

}  // namespace collie::ddp
