// The Reducer with ranks as threads over real transports: equivalence with one large
// batch, identical replicas, gradient accumulation, unused parameters, overlap (trace
// timestamps) and resuming from a checkpoint.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "ddp/demo/model/checkpoint.h"
#include "ddp/demo/model/dataset.h"
#include "ddp/demo/model/mlp.h"
#include "ddp/demo/model/optimizer.h"
#include "ddp/reducer.h"
#include "support/rank_threads.h"
#include "support/sanitizers.h"

namespace collie::ddp {
namespace {

using Params = std::vector<std::vector<float>>;
using collie::testing::makeCommunicators;
using collie::testing::onEveryRank;

constexpr int kLayers = 4;
constexpr int kDim = 24;
constexpr uint64_t kSeed = 42;
constexpr size_t kDataset = 96;

ReducerOptions smallBuckets(Timeline* timeline = nullptr) {
  ReducerOptions o;
#if COLLIE_TEST_TSAN
  // As registered_test (tests/sanitize/run.sh): rank threads reach each other's shared
  // buckets at one address, ordered by flags on a board that each maps at an address of
  // its own, an edge TSan cannot see. The normal and ASan runs keep the shared buckets.
  o.bucketMemory = BucketMemory::kHeap;
#endif
  // A layer is 24*24 + 24 floats = 2400 bytes: one bucket per layer.
  o.firstBucketMb = 2000.0 / (1024 * 1024);
  o.bucketCapMb = 2400.0 / (1024 * 1024);
  o.timeline = timeline;
  o.timeout = std::chrono::seconds(60);
  return o;
}

Params copyOf(Mlp& model) {
  Params out;
  for (auto p : model.parameters()) out.emplace_back(p.begin(), p.end());
  return out;
}

// A rank's batch for `step`: its share of the sampler's order, perRank samples.
void batchFor(const SyntheticDataset& data, int nranks, int rank, size_t step, size_t perRank,
              std::vector<float>* x, std::vector<float>* y) {
  DistributedSampler sampler(data.size(), nranks, rank, kSeed);
  size_t perEpoch = sampler.numSamples() / perRank;
  sampler.setEpoch(step / perEpoch);
  auto idx = sampler.indices();
  std::vector<size_t> mine(idx.begin() + (step % perEpoch) * perRank,
                           idx.begin() + (step % perEpoch + 1) * perRank);
  data.batch(mine, x, y);
}

struct Trainer {
  Mlp model{kLayers, kDim, kSeed};
  std::vector<std::span<float>> params = model.parameters();
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Reducer> reducer;
};

// Trains `steps` steps starting at `firstStep` on every rank; returns each rank's
// final parameters. `init` (optional) replaces the initial parameters and optimizer
// state on every rank (resume).
std::vector<Params> trainDistributed(int nranks, size_t perRank, size_t firstStep, size_t steps,
                                     const std::string& optimizer, const Checkpoint* init = nullptr,
                                     std::vector<Checkpoint>* finalState = nullptr,
                                     const ReducerOptions& options = smallBuckets()) {
  auto comms = makeCommunicators(nranks, Options{});
  if (comms.empty()) return {};
  SyntheticDataset data(kDataset, kDim, kSeed);
  std::vector<Params> out(nranks);
  if (finalState) finalState->resize(nranks);
  onEveryRank(nranks, [&](int r) {
    Trainer t;
    OptimizerConfig oc;
    oc.name = optimizer;
    oc.lr = optimizer == "adam" ? 0.01f : 0.1f;
    t.optimizer = makeOptimizer(oc, t.model.paramSizes());
    if (init != nullptr) {
      for (size_t p = 0; p < t.params.size(); ++p) {
        std::copy(init->params[p].begin(), init->params[p].end(), t.params[p].begin());
      }
      t.optimizer->state() = init->optimizerState;
      t.optimizer->steps() = init->optimizerSteps;
    }
    auto reducer = Reducer::create(comms[r].get(), t.params, options);
    ASSERT_TRUE(reducer.isOk()) << reducer.status().toString();
    t.reducer = std::move(*reducer);
    EXPECT_EQ(t.reducer->sharedBuckets(), options.bucketMemory == BucketMemory::kShared);
    std::vector<float> x, y;
    for (size_t s = firstStep; s < firstStep + steps; ++s) {
      batchFor(data, nranks, r, s, perRank, &x, &y);
      t.reducer->zeroGrad();
      t.model.forward(x.data(), perRank);
      auto loss = t.model.backward(y.data(), *t.reducer);
      ASSERT_TRUE(loss.isOk()) << loss.status().toString();
      ASSERT_TRUE(t.reducer->finalize().isOk());
      t.optimizer->step(t.params, *t.reducer);
    }
    out[r] = copyOf(t.model);
    if (finalState) {
      (*finalState)[r].params = out[r];
      (*finalState)[r].optimizerState = t.optimizer->state();
      (*finalState)[r].optimizerSteps = t.optimizer->steps();
    }
  });
  return out;
}

// One process, no communication, batch = perRank * nranks.
Params trainSingle(size_t batch, size_t steps, const std::string& optimizer) {
  SyntheticDataset data(kDataset, kDim, kSeed);
  Mlp model(kLayers, kDim, kSeed);
  auto params = model.parameters();
  OptimizerConfig oc;
  oc.name = optimizer;
  oc.lr = optimizer == "adam" ? 0.01f : 0.1f;
  auto opt = makeOptimizer(oc, model.paramSizes());
  LocalGradients grads(model.paramSizes());
  std::vector<float> x, y;
  for (size_t s = 0; s < steps; ++s) {
    batchFor(data, 1, 0, s, batch, &x, &y);
    grads.zero();
    model.forward(x.data(), batch);
    EXPECT_TRUE(model.backward(y.data(), grads).isOk());
    opt->step(params, grads);
  }
  return copyOf(model);
}

void expectClose(const Params& a, const Params& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  size_t bad = 0;
  for (size_t p = 0; p < a.size(); ++p) {
    ASSERT_EQ(a[p].size(), b[p].size());
    for (size_t i = 0; i < a[p].size(); ++i) {
      if (std::fabs(a[p][i] - b[p][i]) > tol * (1 + std::fabs(b[p][i]))) ++bad;
    }
  }
  EXPECT_EQ(bad, 0u);
}

bool bitwiseEqual(const Params& a, const Params& b) { return a == b; }

// (a) + (b): N ranks with batch B/N match one rank with batch B; replicas identical.
TEST(DdpReducer, NRanksMatchOneLargeBatchAndReplicasAreIdentical) {
  const size_t kSteps = 6;
  for (const char* optimizer : {"sgd", "adam"}) {
    for (int n : {2, 3}) {
      SCOPED_TRACE(std::string(optimizer) + " n=" + std::to_string(n));
      auto ranks = trainDistributed(n, 4, 0, kSteps, optimizer);
      ASSERT_EQ(ranks.size(), static_cast<size_t>(n));
      Params single = trainSingle(4 * n, kSteps, optimizer);
      Params initial = copyOf(*std::make_unique<Mlp>(kLayers, kDim, kSeed));
      EXPECT_FALSE(bitwiseEqual(single, initial));  // training moved the parameters
      expectClose(ranks[0], single, 2e-5f);
      for (int r = 1; r < n; ++r) EXPECT_TRUE(bitwiseEqual(ranks[r], ranks[0])) << "rank " << r;
    }
  }
}

// Buckets in shared memory (the registered one-pass all-reduce on one host) and on the
// heap (cross-memory attach, the board) train to the same bits on 2 ranks, where a sum
// has one order.
TEST(DdpReducer, SharedAndHeapBucketsTrainAlike) {
#if COLLIE_TEST_TSAN
  GTEST_SKIP() << "TSan cannot see the board's happens-before edge between rank threads";
#endif
  ReducerOptions shared = smallBuckets(), heap = smallBuckets();
  shared.bucketMemory = BucketMemory::kShared;
  heap.bucketMemory = BucketMemory::kHeap;
  auto a = trainDistributed(2, 4, 0, 4, "sgd", nullptr, nullptr, shared);
  auto b = trainDistributed(2, 4, 0, 4, "sgd", nullptr, nullptr, heap);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(bitwiseEqual(a[r], b[r])) << "rank " << r;
}

// Initial parameters come from rank 0 even when replicas start different.
TEST(DdpReducer, CreateBroadcastsRankZerosParameters) {
  auto comms = makeCommunicators(2, Options{});
  ASSERT_EQ(comms.size(), 2u);
  std::vector<Params> got(2);
  onEveryRank(2, [&](int r) {
    Mlp model(2, 8, /*seed=*/100 + r);
    auto reducer = Reducer::create(comms[r].get(), model.parameters(), smallBuckets());
    ASSERT_TRUE(reducer.isOk());
    got[r] = copyOf(model);
  });
  Mlp rank0(2, 8, 100);
  EXPECT_EQ(got[0], copyOf(rank0));
  EXPECT_EQ(got[1], copyOf(rank0));
}

// (c) noSync over k micro-batches, then a synchronised one, equals one batch k times
// larger (loss scaled by 1/k); only the last micro-batch communicates.
TEST(DdpReducer, NoSyncAccumulationEqualsLargerBatch) {
  const int n = 2, k = 3;
  const size_t micro = 4;
  auto comms = makeCommunicators(n, Options{});
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  SyntheticDataset data(kDataset, kDim, kSeed);
  std::vector<Params> grads(n);
  std::vector<size_t> allReduces(n);
  onEveryRank(n, [&](int r) {
    Mlp model(kLayers, kDim, kSeed);
    Timeline timeline;
    auto reducer = Reducer::create(comms[r].get(), model.parameters(), smallBuckets(&timeline));
    ASSERT_TRUE(reducer.isOk());
    Reducer& red = **reducer;
    red.zeroGrad();
    std::vector<float> x, y;
    batchFor(data, n, r, 0, micro * k, &x, &y);
    for (int m = 0; m < k; ++m) {
      const float* xm = x.data() + m * micro * kDim;
      const float* ym = y.data() + m * micro * kDim;
      model.forward(xm, micro);
      if (m + 1 < k) {
        NoSyncScope scope = red.noSync();
        ASSERT_TRUE(model.backward(ym, red, 1.0f / k).isOk());
        ASSERT_TRUE(red.finalize().isOk());  // no-op inside the scope
        EXPECT_TRUE(timeline.events().empty());
      } else {
        ASSERT_TRUE(model.backward(ym, red, 1.0f / k).isOk());
        ASSERT_TRUE(red.finalize().isOk());
      }
    }
    allReduces[r] = timeline.events().size();
    EXPECT_EQ(allReduces[r], red.buckets().size());
    for (size_t p = 0; p < model.numParams(); ++p) {
      auto g = red.grad(p);
      grads[r].emplace_back(g.begin(), g.end());
    }
  });
  EXPECT_EQ(grads[0], grads[1]);
  // Reference: the union of every rank's k micro-batches in one batch.
  Mlp model(kLayers, kDim, kSeed);
  LocalGradients ref(model.paramSizes());
  std::vector<float> x, y;
  batchFor(data, 1, 0, 0, micro * k * n, &x, &y);
  model.forward(x.data(), micro * k * n);
  ASSERT_TRUE(model.backward(y.data(), ref).isOk());
  Params expected;
  for (size_t p = 0; p < model.numParams(); ++p) {
    auto g = ref.grad(p);
    expected.emplace_back(g.begin(), g.end());
  }
  expectClose(grads[0], expected, 1e-4f);
}

// A parameter with no gradient on some rank contributes zeros: no hang, and the
// average is the other ranks' gradient / N.
TEST(DdpReducer, UnusedParametersContributeZeros) {
  const int n = 2;
  auto comms = makeCommunicators(n, Options{});
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  SyntheticDataset data(kDataset, kDim, kSeed);
  std::vector<Params> grads(n), local(n);
  onEveryRank(n, [&](int r) {
    Mlp model(kLayers, kDim, kSeed);
    auto reducer = Reducer::create(comms[r].get(), model.parameters(), smallBuckets());
    ASSERT_TRUE(reducer.isOk());
    Reducer& red = **reducer;
    std::vector<float> x, y;
    batchFor(data, n, r, 0, 4, &x, &y);
    // Rank 0 never uses layer 1; rank 1 uses everything.
    model.setUnusedLayer(r == 0 ? 1 : -1);
    LocalGradients mine(model.paramSizes());
    model.forward(x.data(), 4);
    ASSERT_TRUE(model.backward(y.data(), mine).isOk());
    for (size_t p = 0; p < model.numParams(); ++p) {
      auto g = mine.grad(p);
      local[r].emplace_back(g.begin(), g.end());
    }
    for (int step = 0; step < 2; ++step) {  // twice: state resets between steps
      red.zeroGrad();
      model.forward(x.data(), 4);
      ASSERT_TRUE(model.backward(y.data(), red).isOk());
      Status s = red.finalize();
      ASSERT_TRUE(s.isOk()) << s.toString();
    }
    for (size_t p = 0; p < model.numParams(); ++p) {
      auto g = red.grad(p);
      grads[r].emplace_back(g.begin(), g.end());
    }
  });
  ASSERT_EQ(grads[0], grads[1]);
  for (size_t p : {Mlp::weightIndex(1), Mlp::biasIndex(1)}) {
    for (size_t i = 0; i < grads[0][p].size(); ++i) {
      EXPECT_FLOAT_EQ(grads[0][p][i], local[1][p][i] / 2) << p << " " << i;
    }
  }
}

// (e) With overlap, the first bucket's all-reduce is issued and starts while
// backward still runs (trace timestamps); with overlap off, nothing before its end.
TEST(DdpReducer, AllReduceStartsBeforeBackwardEnds) {
  const int n = 2;
  auto comms = makeCommunicators(n, Options{});
  ASSERT_EQ(comms.size(), static_cast<size_t>(n));
  SyntheticDataset data(kDataset, kDim, kSeed);
  onEveryRank(n, [&](int r) {
    Mlp model(kLayers, kDim, kSeed);
    Timeline timeline;
    auto reducer = Reducer::create(comms[r].get(), model.parameters(), smallBuckets(&timeline));
    ASSERT_TRUE(reducer.isOk());
    Reducer& red = **reducer;
    ASSERT_EQ(red.buckets().size(), 4u);
    ComputeBurner burner(ComputeMode::kSleep, 5.0);
    std::vector<float> x, y;
    batchFor(data, n, r, 0, 4, &x, &y);
    for (bool overlap : {true, false}) {
      timeline.clear();
      red.setOverlap(overlap);
      red.zeroGrad();
      model.forward(x.data(), 4);
      ASSERT_TRUE(model.backward(y.data(), red, 1.0f, &burner, &timeline).isOk());
      ASSERT_TRUE(red.finalize().isOk());
      double backwardEnd = 0;
      std::vector<TimelineEvent> allReduces;
      for (const auto& e : timeline.events()) {
        if (e.kind == EventKind::kBackward) backwardEnd = std::max(backwardEnd, e.endUs);
        if (e.kind == EventKind::kAllReduce) allReduces.push_back(e);
      }
      ASSERT_EQ(allReduces.size(), red.buckets().size());
      if (overlap) {
        // Bucket 0 (the last layer) is issued ~3 layers (15 ms) before backward ends.
        EXPECT_LT(allReduces[0].issueUs, backwardEnd - 5000) << "rank " << r;
        EXPECT_LT(allReduces[0].startUs, backwardEnd) << "rank " << r;
        for (size_t b = 1; b < allReduces.size(); ++b) {
          EXPECT_GE(allReduces[b].issueUs, allReduces[b - 1].issueUs);  // in order
        }
      } else {
        for (const auto& e : allReduces) EXPECT_GE(e.issueUs, backwardEnd);
      }
    }
  });
}

// (f) Rank 0's checkpoint after K steps; every rank resumes from it and ends bitwise
// where an uninterrupted run ends.
TEST(DdpReducer, ResumeFromRankZerosCheckpointContinuesIdentically) {
  const int n = 2;
  // 96 samples / 2 ranks / 8 per step = 6 steps per epoch: the run crosses an epoch.
  const size_t perRank = 8, total = 8, cut = 5;
  auto straight = trainDistributed(n, perRank, 0, total, "adam");
  ASSERT_EQ(straight.size(), 2u);
  std::vector<Checkpoint> states;
  auto first = trainDistributed(n, perRank, 0, cut, "adam", nullptr, &states);
  ASSERT_EQ(first.size(), 2u);
  // Rank 0 writes, everyone reads the file.
  std::string path = "/tmp/collie_ddp_resume_" + std::to_string(getpid()) + ".bin";
  Checkpoint c = states[0];
  c.step = cut;
  c.optimizer = "adam";
  ASSERT_TRUE(saveCheckpoint(path, c).isOk());
  Result<Checkpoint> loaded = loadCheckpoint(path);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().toString();
  std::remove(path.c_str());
  auto resumed = trainDistributed(n, perRank, loaded->step, total - cut, "adam", &*loaded);
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_TRUE(bitwiseEqual(resumed[0], straight[0]));
  EXPECT_TRUE(bitwiseEqual(resumed[1], straight[1]));
}

TEST(DdpReducer, MisuseIsReported) {
  auto comms = makeCommunicators(1, Options{});
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_FALSE(Reducer::create(comms[0].get(), {}).isOk());
  Mlp model(2, 4, 1);
  auto reducer = Reducer::create(comms[0].get(), model.parameters());
  ASSERT_TRUE(reducer.isOk());
  EXPECT_EQ((*reducer)->markReady(99).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE((*reducer)->markReady(0).isOk());
  EXPECT_EQ((*reducer)->markReady(0).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace collie::ddp
