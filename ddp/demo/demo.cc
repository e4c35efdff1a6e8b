// The training of the ddp demo (demo.h): set-up, the two backward passes of a step, the
// run loop and checkpoints.
#include "ddp/demo/demo.h"

#include <algorithm>
#include <cstdio>

#include "ddp/demo/demo_internal.h"

namespace collie::ddp::demo {

Status Demo::applyCheckpoint(const Checkpoint& c) {
  if (c.params.size() != params_.size() || c.optimizer != optimizer_->name() ||
      c.optimizerState.size() != optimizer_->state().size()) {
    return invalidArgument("ddp-demo: checkpoint does not match this model/optimizer");
  }
  for (size_t p = 0; p < params_.size(); ++p) {
    if (c.params[p].size() != params_[p].size()) {
      return invalidArgument("ddp-demo: checkpoint parameter " + std::to_string(p) +
                             " has another size; use the same --layers/--params-per-layer");
    }
  }
  for (size_t k = 0; k < c.optimizerState.size(); ++k) {
    if (c.optimizerState[k].size() != optimizer_->state()[k].size()) {
      return invalidArgument("ddp-demo: checkpoint optimizer state has another shape");
    }
  }
  for (size_t p = 0; p < params_.size(); ++p) {
    std::copy(c.params[p].begin(), c.params[p].end(), params_[p].begin());
  }
  optimizer_->state() = c.optimizerState;
  optimizer_->steps() = c.optimizerSteps;
  return Status::ok();
}

Status Demo::buildDistributed() {
  reducer_.reset();
  ReducerOptions ro;
  ro.bucketCapMb = o_.bucketCapMb;
  ro.firstBucketMb = o_.firstBucketMb;
  ro.timeline = &timeline_;
  ro.bucketMemory = o_.bucketMemory == "heap" ? BucketMemory::kHeap : BucketMemory::kShared;
  Result<std::unique_ptr<Reducer>> reducer = Reducer::create(comm_.get(), params_, ro);
  if (!reducer.isOk()) return reducer.status();
  reducer_ = std::move(*reducer);
  sampler_ =
      std::make_unique<DistributedSampler>(o_.datasetSize, comm_->size(), comm_->rank(), o_.seed);
  warm_ = false;
  return Status::ok();
}

Status Demo::setUp() {
  ComputeMode mode;
  if (!parseComputeMode(o_.compute, &mode)) {
    return invalidArgument("ddp-demo: --compute must be fma or sleep, not '" + o_.compute + "'");
  }
  if (o_.layers < 1 || o_.steps < 1 || o_.batch < 1 || o_.paramsPerLayer < 2 ||
      o_.datasetSize < 1) {
    return invalidArgument(
        "ddp-demo: --layers, --steps, --batch and --dataset must be >= 1 and "
        "--params-per-layer >= 2");
  }
  dim_ = Mlp::dimForParams(o_.paramsPerLayer);
  model_ = std::make_unique<Mlp>(o_.layers, dim_, o_.seed);
  params_ = model_->parameters();
  OptimizerConfig oc;
  oc.name = o_.optimizer;
  oc.lr = static_cast<float>(o_.lr);
  optimizer_ = makeOptimizer(oc, model_->paramSizes());
  if (!optimizer_) {
    return invalidArgument("ddp-demo: --optimizer must be sgd or adam, not '" + o_.optimizer + "'");
  }
  if (o_.resume) {
    if (o_.checkpointDir.empty()) return invalidArgument("ddp-demo: --resume needs --checkpoint");
    Result<Checkpoint> c = loadCheckpoint(checkpointPath(o_.checkpointDir));
    if (!c.isOk()) return c.status().withContext("ddp-demo: rank " + std::to_string(comm_->rank()));
    COLLIE_RETURN_IF_ERROR(applyCheckpoint(*c));
    startStep_ = c->step;
  }
  COLLIE_RETURN_IF_ERROR(checkElasticOptions());
  COLLIE_RETURN_IF_ERROR(buildDistributed());
  burner_ = std::make_unique<ComputeBurner>(mode, o_.msPerLayer);
  data_ = std::make_unique<SyntheticDataset>(o_.datasetSize, dim_, o_.seed);
  if (root()) printBanner();
  return Status::ok();
}

// One forward + backward + finalize; phase 0 = no overlap, 1 = overlap.
Status Demo::pass(int step, int phase, const std::vector<float>& x, const std::vector<float>& y,
                  double* computeMs, double* totalMs, double* loss) {
  timeline_.setContext(comm_->rank(), step, phase);
  reducer_->setOverlap(phase == 1);
  reducer_->zeroGrad();
  COLLIE_RETURN_IF_ERROR(barrier(*comm_));
  double t0 = timeline_.nowUs();
  model_->forward(x.data(), o_.batch, &timeline_);
  const bool kill = phase == 1 && failures_ == 0 && firstRank_ == o_.killRank &&
                    static_cast<uint64_t>(step) == killStep_;
  KillSwitch killSwitch(*reducer_, killStampPath(o_.checkpointDir), firstRank_, step);
  GradientSink& sink = kill ? static_cast<GradientSink&>(killSwitch) : *reducer_;
  Result<double> l = model_->backward(y.data(), sink, 1.0f, burner_.get(), &timeline_);
  if (!l.isOk()) return l.status();
  double t1 = timeline_.nowUs();
  COLLIE_RETURN_IF_ERROR(reducer_->finalize());
  double t2 = timeline_.nowUs();
  timeline_.record(EventKind::kStep, 0, t0, t2);
  *computeMs = (t1 - t0) / 1000.0;
  *totalMs = (t2 - t0) / 1000.0;
  *loss = *l;
  return Status::ok();
}

Status Demo::trainStep(uint64_t step) {
  stepStart_ = SystemClock::now();
  sampler_->setEpoch(step / stepsPerEpoch());
  std::vector<size_t> all = sampler_->indices();
  size_t first = (step % stepsPerEpoch()) * o_.batch;
  std::vector<size_t> mine;
  for (int k = 0; k < o_.batch; ++k) mine.push_back(all[(first + k) % all.size()]);
  std::vector<float> x, y;
  data_->batch(mine, &x, &y);

  double f[7] = {0};  // computeA, totalA, computeB, totalB, loss, sent, (unused)
  double lossA = 0;
  COLLIE_RETURN_IF_ERROR(pass(static_cast<int>(step), 0, x, y, &f[0], &f[1], &lossA));
  long long before = o_.tcpBytesSent != nullptr ? o_.tcpBytesSent() : -1;
  COLLIE_RETURN_IF_ERROR(pass(static_cast<int>(step), 1, x, y, &f[2], &f[3], &f[4]));
  long long after = o_.tcpBytesSent != nullptr ? o_.tcpBytesSent() : -1;
  f[5] = (before >= 0 && after >= 0) ? static_cast<double>(after - before) : -1;
  optimizer_->step(params_, *reducer_);

  // Slowest rank's times; largest and smallest bytes sent (min as max of -x).
  double maxes[6] = {f[0], f[1], f[2], f[3], f[5], -f[5]};
  COLLIE_RETURN_IF_ERROR(
      waitFor(comm_->allReduce(maxes, maxes, 6, DataType::kFloat64, ReduceOp::kMax), "max"));
  double lossAvg = f[4];
  COLLIE_RETURN_IF_ERROR(
      waitFor(comm_->allReduce(&lossAvg, &lossAvg, 1, DataType::kFloat64, ReduceOp::kAvg), "loss"));
  lastLoss_ = lossAvg;
  double commA = maxes[1] - maxes[0];
  double hidden = commA > 0 ? std::clamp((maxes[1] - maxes[3]) / commA, 0.0, 1.0) : 1.0;
  if (warm_ || o_.steps == 1) {
    sums_[0] += maxes[0];
    sums_[1] += commA;
    sums_[2] += maxes[1];
    sums_[3] += maxes[3];
    hiddenPerStep_.push_back(hidden);
    ++counted_;
  }
  warm_ = true;
  if (root()) printStep(step, lossAvg, maxes, commA, hidden);
  return Status::ok();
}

Status Demo::run() {
  COLLIE_RETURN_IF_ERROR(setUp());
  COLLIE_RETURN_IF_ERROR(barrier(*comm_));
  timeline_.resetEpoch();
  // An elastic run always has a checkpoint to fall back on, even before the first
  // periodic one.
  if (elastic() && !o_.resume) COLLIE_RETURN_IF_ERROR(saveCheckpoint(startStep_));
  const uint64_t endStep = startStep_ + static_cast<uint64_t>(o_.steps);
  uint64_t step = startStep_;
  while (step < endStep) {
    Status status = trainStep(step);
    const bool periodic = o_.checkpointEvery > 0 && !o_.checkpointDir.empty() &&
                          (step + 1) % static_cast<uint64_t>(o_.checkpointEvery) == 0 &&
                          step + 1 < endStep;
    if (status.isOk() && periodic) status = saveCheckpoint(step + 1);
    if (status.isOk()) {
      ++step;
      continue;
    }
    if (!elastic()) return status;
    COLLIE_RETURN_IF_ERROR(recover(status, step, &step));
  }
  printSummary();
  if (!o_.checkpointDir.empty()) COLLIE_RETURN_IF_ERROR(saveCheckpoint(step));
  printFinal(step);
  return writeOutputs(static_cast<int>(step) - 1);
}

Status Demo::saveCheckpoint(uint64_t step) {
  if (root()) {
    Checkpoint c;
    c.step = step;
    c.epoch = step / stepsPerEpoch();
    c.optimizer = optimizer_->name();
    c.optimizerSteps = optimizer_->steps();
    for (const auto& p : params_) c.params.emplace_back(p.begin(), p.end());
    c.optimizerState = optimizer_->state();
    COLLIE_RETURN_IF_ERROR(ddp::saveCheckpoint(checkpointPath(o_.checkpointDir), c));
    std::printf("# checkpoint written: %s (step %llu)\n", checkpointPath(o_.checkpointDir).c_str(),
                static_cast<unsigned long long>(step));
    std::fflush(stdout);
  }
  return barrier(*comm_);  // nobody resumes from a file still being written
}

}  // namespace collie::ddp::demo
