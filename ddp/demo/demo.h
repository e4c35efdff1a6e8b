// The `collie ddp-demo` training run: data-parallel training of the simulated MLP
// (ddp/demo/model/) with the ddp::Reducer, one rank's side. The collie CLI
// (tools/ddp_demo_command.cc) parses the options, creates the communicator and runs it.
//
// Every step runs backward twice on the same batch from the same parameters:
//   (a) no overlap: all bucket all-reduces issued after backward (the baseline), and
//   (b) bucketed overlap: each bucket's all-reduce issued as soon as it is full;
// then the optimizer applies (b)'s averaged gradients. Rank 0 prints per step the
// compute time, the communication time of (a), both step times and the fraction of
// communication hidden: (step_a - step_b) / comm_a. Figures are the slowest rank's.
// Events of every rank are gathered to rank 0 (allGather of fixed-size arrays), which
// writes a Chrome trace (tracePath) and an SVG timeline (svgPath)
// (demo_report.cc).
//
// Elastic runs (killRank >= 0, or shrinkOnFailure; demo_elastic.cc): rank R SIGKILLs
// itself in step K's overlapped backward, right after the first bucket's all-reduce was
// issued. The survivors' collectives fail naming R; each survivor shrinks the
// communicator without the failed rank, rebuilds its Reducer and sampler for the new
// rank and size, reloads the last checkpoint (written every checkpointEvery steps by
// whichever rank is rank 0 then) and redoes the steps since. Every rank prints its final
// loss and a checksum of its parameters at the end.
//
// Thread safety: a Demo runs on one thread (the Reducer's own threads aside).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collie/communicator.h"
#include "ddp/demo/demo_options.h"
#include "ddp/demo/model/checkpoint.h"
#include "ddp/demo/model/compute.h"
#include "ddp/demo/model/dataset.h"
#include "ddp/demo/model/mlp.h"
#include "ddp/demo/model/optimizer.h"
#include "ddp/reducer.h"
#include "ddp/timeline.h"

namespace collie::ddp::demo {

class Demo {
 public:
  Demo(std::unique_ptr<Communicator> comm, const DemoOptions& options)
      : comm_(std::move(comm)), o_(options), firstRank_(comm_->rank()) {}
  // Trains for options.steps steps (recovering from failed ranks in an elastic run),
  // prints the summary and writes the outputs. The first error that ends the run.
  Status run();
  // The communicator the run ended with (a shrunk one after a recovery).
  Communicator& comm() { return *comm_; }

 private:
  using SystemClock = std::chrono::system_clock;

  // demo.cc: the training.
  Status setUp();
  Status applyCheckpoint(const Checkpoint& c);
  Status buildDistributed();  // Reducer and sampler for the current communicator
  Status trainStep(uint64_t step);
  Status pass(int step, int phase, const std::vector<float>& x, const std::vector<float>& y,
              double* computeMs, double* totalMs, double* loss);
  Status saveCheckpoint(uint64_t step);
  // demo_elastic.cc: the fault drill and the recovery.
  Status checkElasticOptions();
  Status recover(const Status& failure, uint64_t failedStep, uint64_t* resumeStep);
  // demo_report.cc: what rank 0 prints and writes.
  void printBanner() const;
  void printStep(uint64_t step, double loss, const double maxes[6], double commA,
                 double hidden) const;
  void printSummary() const;
  void printFinal(uint64_t step) const;
  Status writeOutputs(int lastStep);

  bool root() const { return comm_->rank() == 0; }
  bool elastic() const { return o_.shrinkOnFailure || o_.killRank >= 0; }
  size_t stepsPerEpoch() const {
    return std::max<size_t>(1, sampler_->numSamples() / static_cast<size_t>(o_.batch));
  }

  std::unique_ptr<Communicator> comm_;
  const DemoOptions& o_;
  const int firstRank_;  // this rank in the job as started
  int failures_ = 0;
  int dim_ = 0;
  std::unique_ptr<Mlp> model_;
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<ComputeBurner> burner_;
  std::unique_ptr<SyntheticDataset> data_;
  std::unique_ptr<DistributedSampler> sampler_;
  std::vector<std::span<float>> params_;
  Timeline timeline_;
  uint64_t startStep_ = 0;
  uint64_t killStep_ = 0;
  SystemClock::time_point stepStart_{};
  // Per-step figures (the first step after start or recovery is not counted).
  std::vector<double> sums_ = std::vector<double>(4, 0.0);
  std::vector<double> hiddenPerStep_;
  int counted_ = 0;
  bool warm_ = false;
  double lastLoss_ = 0;
};

}  // namespace collie::ddp::demo
