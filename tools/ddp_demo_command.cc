// `collie ddp-demo`: data-parallel training of a simulated MLP with the ddp::Reducer,
// one rank's side (run it under `collie run -n N --`).
//
// Every step runs backward twice on the same batch from the same parameters:
//   (a) no overlap: all bucket all-reduces issued after backward (the baseline), and
//   (b) bucketed overlap: each bucket's all-reduce issued as soon as it is full;
// then the optimizer applies (b)'s averaged gradients. Rank 0 prints per step the
// compute time, the communication time of (a), both step times and the fraction of
// communication hidden: (step_a - step_b) / comm_a. Figures are the slowest rank's.
// Events of every rank are gathered to rank 0 (allGather of fixed-size arrays), which
// writes a Chrome trace (--trace or COLLIE_TRACE) and an SVG timeline (--svg).
//
// Elastic runs (--kill-rank R --kill-at-step K, or --shrink-on-failure): rank R SIGKILLs
// itself in step K's overlapped backward, right after the first bucket's all-reduce was
// issued. The survivors' collectives fail naming R; each survivor shrinks the
// communicator without the failed rank, rebuilds its Reducer and sampler for the new
// rank and size, reloads the last checkpoint (written every --checkpoint-every steps by
// whichever rank is rank 0 then) and redoes the steps since. Every rank prints its final
// loss and a checksum of its parameters at the end.
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "collie/communicator.h"
#include "core/config/config.h"
#include "core/net/process_sockets.h"
#include "ddp/model/checkpoint.h"
#include "ddp/model/compute.h"
#include "ddp/model/dataset.h"
#include "ddp/model/mlp.h"
#include "ddp/model/optimizer.h"
#include "ddp/reducer.h"
#include "ddp/timeline.h"
#include "tools/commands.h"

namespace collie::tools {

CLI::App* addDdpDemoCommand(CLI::App& app, DdpDemoCliOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "ddp-demo",
      "Data-parallel training demo: bucketed gradient all-reduce overlapped with a simulated "
      "backward pass; run it under `collie run -n N --`");
  cmd->add_option("--layers", o->layers, "layers of the MLP")->capture_default_str();
  cmd->add_option("--params-per-layer", o->paramsPerLayer,
                  "parameters per layer (dim*dim + dim, dim rounded down)")
      ->capture_default_str();
  cmd->add_option("--ms-per-layer", o->msPerLayer,
                  "simulated backward compute per layer, on top of the real math (ms)")
      ->capture_default_str();
  cmd->add_option("--compute", o->compute,
                  "how simulated compute is spent: fma (busy multiply-add loop on this core) or "
                  "sleep (host idle, as while an accelerator computes)")
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "training steps")->capture_default_str();
  cmd->add_option("--batch", o->batch, "samples per rank per step")->capture_default_str();
  cmd->add_option("--dataset", o->datasetSize, "samples in the synthetic data set")
      ->capture_default_str();
  cmd->add_option("--bucket-cap-mb", o->bucketCapMb, "bucket size cap (MiB)")
      ->capture_default_str();
  cmd->add_option("--first-bucket-mb", o->firstBucketMb, "first bucket's size cap (MiB)")
      ->capture_default_str();
  cmd->add_option("--optimizer", o->optimizer, "sgd (with momentum) or adam")
      ->capture_default_str();
  cmd->add_option("--lr", o->lr, "learning rate")->capture_default_str();
  cmd->add_option("--seed", o->seed, "seed of the model, data and shuffle")->capture_default_str();
  cmd->add_option("--checkpoint", o->checkpointDir,
                  "directory where rank 0 writes a checkpoint after the last step");
  cmd->add_flag("--resume", o->resume, "start from the checkpoint in --checkpoint");
  cmd->add_option("--checkpoint-every", o->checkpointEvery,
                  "with --checkpoint: also write one after every N-th step (0: only at the end)")
      ->capture_default_str();
  cmd->add_flag("--shrink-on-failure", o->shrinkOnFailure,
                "when a rank dies, the others shrink the communicator, reload the last "
                "checkpoint and finish (run under `collie run --keep-going`)");
  cmd->add_option("--kill-rank", o->killRank,
                  "fault drill: this rank SIGKILLs itself in the backward pass of "
                  "--kill-at-step (implies --shrink-on-failure, needs --checkpoint)");
  cmd->add_option("--kill-at-step", o->killAtStep,
                  "step of the --kill-rank drill (default: the middle of the run)");
  cmd->add_option("--trace", o->tracePath, "Chrome-trace JSON output (default: $COLLIE_TRACE)");
  cmd->add_option("--svg", o->svgPath, "SVG timeline of the last step");
  return cmd;
}

namespace {

using ddp::EventKind;

Status waitFor(Result<Work> work, const char* what) {
  Status status = work.isOk() ? work->wait() : work.status();
  return status.isOk() ? status : status.withContext(what);
}

Status barrier(Communicator& comm) { return waitFor(comm.barrier(), "ddp-demo: barrier"); }

// Bytes this process has sent on its TCP sockets (the tcp transport's connections and
// the store's), summed from TCP_INFO over every socket in /proc/self/fd. Shared-memory
// transfers are plain memory copies and are not seen here.
long long tcpBytesSent() {
  Result<std::vector<net::TcpSocketInfo>> sockets = net::processTcpSockets();
  if (!sockets.isOk()) return -1;  // unknown, not zero
  long long total = 0;
  for (const net::TcpSocketInfo& socket : *sockets) {
    struct tcp_info info;
    socklen_t len = sizeof(info);
    std::memset(&info, 0, sizeof(info));
    if (getsockopt(socket.fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 &&
        len >= offsetof(struct tcp_info, tcpi_bytes_sent) + sizeof(info.tcpi_bytes_sent)) {
      total += static_cast<long long>(info.tcpi_bytes_sent);
    }
  }
  return total;
}

using SystemClock = std::chrono::system_clock;

double msBetween(SystemClock::time_point a, SystemClock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

int64_t epochUs(SystemClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

// Where the --kill-rank victim leaves "<rank> <microseconds since the epoch>" just before
// it dies, so that survivors on the same host can time their recovery from the kill.
std::string killStampPath(const std::string& dir) { return dir + "/collie_ddp_killed.txt"; }

// FNV-1a over the parameters' bytes: equal checksums <=> (almost surely) equal replicas.
uint64_t parameterChecksum(const std::vector<std::span<float>>& params) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& p : params) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(p.data());
    for (size_t i = 0; i < p.size_bytes(); ++i) h = (h ^ bytes[i]) * 0x100000001b3ull;
  }
  return h;
}

// The sink of the --kill-rank victim's backward: forwards to the Reducer and SIGKILLs
// this process right after the first bucket's all-reduce was issued, while the rest of
// backward and the bucket all-reduces are still to come: the hard case for survivors.
class KillSwitch : public ddp::GradientSink {
 public:
  KillSwitch(ddp::Reducer& reducer, std::string stampPath, int rank, uint64_t step)
      : reducer_(reducer), stampPath_(std::move(stampPath)), rank_(rank), step_(step) {}
  std::span<float> grad(size_t param) override { return reducer_.grad(param); }
  Status markReady(size_t param) override {
    Status status = reducer_.markReady(param);
    if (++marked_ == reducer_.buckets()[0].params.size()) die();
    return status;
  }

 private:
  [[noreturn]] void die() {
    std::printf(
        "# rank %d: --kill-rank: SIGKILL in the backward of step %llu, bucket 0 in flight\n", rank_,
        static_cast<unsigned long long>(step_));
    std::fflush(stdout);
    std::ofstream(stampPath_) << rank_ << " " << epochUs(SystemClock::now()) << "\n";
    std::raise(SIGKILL);
    std::abort();  // not reached
  }

  ddp::Reducer& reducer_;
  std::string stampPath_;
  int rank_;
  uint64_t step_;
  size_t marked_ = 0;
};

struct StepFigures {
  double computeA = 0, commA = 0, stepA = 0, computeB = 0, stepB = 0, loss = 0;
};

class DdpDemo {
 public:
  DdpDemo(std::unique_ptr<Communicator> comm, const DdpDemoCliOptions& o)
      : comm_(std::move(comm)), o_(o), firstRank_(comm_->rank()) {}
  Status run();
  Communicator& comm() { return *comm_; }

 private:
  Status setUp();
  Status checkElasticOptions();
  Status applyCheckpoint(const ddp::Checkpoint& c);
  Status buildDistributed();  // Reducer and sampler for the current communicator
  Status trainStep(uint64_t step);
  Status recover(const Status& failure, uint64_t failedStep, uint64_t* resumeStep);
  Status pass(int step, int phase, const std::vector<float>& x, const std::vector<float>& y,
              double* computeMs, double* totalMs, double* loss);
  void printSummary() const;
  Status writeOutputs(int lastStep);
  Status saveCheckpoint(uint64_t step);
  bool root() const { return comm_->rank() == 0; }
  bool elastic() const { return o_.shrinkOnFailure || o_.killRank >= 0; }
  size_t stepsPerEpoch() const {
    return std::max<size_t>(1, sampler_->numSamples() / static_cast<size_t>(o_.batch));
  }

  std::unique_ptr<Communicator> comm_;
  const DdpDemoCliOptions& o_;
  const int firstRank_;  // this rank in the job as started
  int failures_ = 0;
  std::unique_ptr<ddp::Mlp> model_;
  std::unique_ptr<ddp::Reducer> reducer_;
  std::unique_ptr<ddp::Optimizer> optimizer_;
  std::unique_ptr<ddp::ComputeBurner> burner_;
  std::unique_ptr<ddp::SyntheticDataset> data_;
  std::unique_ptr<ddp::DistributedSampler> sampler_;
  std::vector<std::span<float>> params_;
  ddp::Timeline timeline_;
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

Status DdpDemo::applyCheckpoint(const ddp::Checkpoint& c) {
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

Status DdpDemo::buildDistributed() {
  reducer_.reset();
  ddp::ReducerOptions ro;
  ro.bucketCapMb = o_.bucketCapMb;
  ro.firstBucketMb = o_.firstBucketMb;
  ro.timeline = &timeline_;
  Result<std::unique_ptr<ddp::Reducer>> reducer = ddp::Reducer::create(comm_.get(), params_, ro);
  if (!reducer.isOk()) return reducer.status();
  reducer_ = std::move(*reducer);
  sampler_ = std::make_unique<ddp::DistributedSampler>(o_.datasetSize, comm_->size(), comm_->rank(),
                                                       o_.seed);
  warm_ = false;
  return Status::ok();
}

Status DdpDemo::checkElasticOptions() {
  if (o_.checkpointEvery < 0) return invalidArgument("ddp-demo: --checkpoint-every must be >= 0");
  if (!elastic()) return Status::ok();
  if (o_.checkpointDir.empty()) {
    return invalidArgument(
        "ddp-demo: --kill-rank and --shrink-on-failure need --checkpoint DIR (survivors resume "
        "from the last checkpoint written there)");
  }
  if (o_.killRank < 0) return Status::ok();
  if (o_.killRank >= comm_->size() || comm_->size() < 2) {
    return invalidArgument("ddp-demo: --kill-rank " + std::to_string(o_.killRank) +
                           " is outside [0, " + std::to_string(comm_->size()) +
                           ") or leaves no survivor");
  }
  killStep_ = o_.killAtStep >= 0 ? static_cast<uint64_t>(o_.killAtStep)
                                 : startStep_ + static_cast<uint64_t>(o_.steps) / 2;
  if (killStep_ < startStep_ || killStep_ >= startStep_ + static_cast<uint64_t>(o_.steps)) {
    return invalidArgument("ddp-demo: --kill-at-step " + std::to_string(killStep_) +
                           " is outside the steps of this run [" + std::to_string(startStep_) +
                           ", " + std::to_string(startStep_ + o_.steps) + ")");
  }
  return Status::ok();
}

Status DdpDemo::setUp() {
  ddp::ComputeMode mode;
  if (!ddp::parseComputeMode(o_.compute, &mode)) {
    return invalidArgument("ddp-demo: --compute must be fma or sleep, not '" + o_.compute + "'");
  }
  if (o_.layers < 1 || o_.steps < 1 || o_.batch < 1 || o_.paramsPerLayer < 2 ||
      o_.datasetSize < 1) {
    return invalidArgument(
        "ddp-demo: --layers, --steps, --batch and --dataset must be >= 1 and "
        "--params-per-layer >= 2");
  }
  int dim = ddp::Mlp::dimForParams(o_.paramsPerLayer);
  model_ = std::make_unique<ddp::Mlp>(o_.layers, dim, o_.seed);
  params_ = model_->parameters();
  ddp::OptimizerConfig oc;
  oc.name = o_.optimizer;
  oc.lr = static_cast<float>(o_.lr);
  optimizer_ = ddp::makeOptimizer(oc, model_->paramSizes());
  if (!optimizer_) {
    return invalidArgument("ddp-demo: --optimizer must be sgd or adam, not '" + o_.optimizer + "'");
  }
  if (o_.resume) {
    if (o_.checkpointDir.empty()) return invalidArgument("ddp-demo: --resume needs --checkpoint");
    Result<ddp::Checkpoint> c = ddp::loadCheckpoint(ddp::checkpointPath(o_.checkpointDir));
    if (!c.isOk()) return c.status().withContext("ddp-demo: rank " + std::to_string(comm_->rank()));
    COLLIE_RETURN_IF_ERROR(applyCheckpoint(*c));
    startStep_ = c->step;
  }
  COLLIE_RETURN_IF_ERROR(checkElasticOptions());
  COLLIE_RETURN_IF_ERROR(buildDistributed());
  burner_ = std::make_unique<ddp::ComputeBurner>(mode, o_.msPerLayer);
  data_ = std::make_unique<ddp::SyntheticDataset>(o_.datasetSize, dim, o_.seed);

  if (root()) {
    const size_t n = comm_->size();
    double psiBytes = static_cast<double>(reducer_->totalElements()) * sizeof(float);
    std::printf(
        "# collie ddp-demo: %d ranks, %d layers of %dx%d (+bias) = %zu parameters "
        "(%.2f MiB of float32 gradients), batch %d per rank, %s compute %.1f ms/layer "
        "(%s), optimizer %s%s\n",
        comm_->size(), o_.layers, dim, dim, reducer_->totalElements(), psiBytes / (1 << 20),
        o_.batch, o_.compute.c_str(), o_.msPerLayer,
        o_.compute == "fma" ? "busy multiply-add loop" : "host idle", optimizer_->name().c_str(),
        o_.resume ? (", resumed at step " + std::to_string(startStep_)).c_str() : "");
    std::printf("# buckets (launch order; cap %.2f MiB, first %.2f MiB):\n", o_.bucketCapMb,
                o_.firstBucketMb);
    const auto& buckets = reducer_->buckets();
    for (size_t b = 0; b < buckets.size(); ++b) {
      std::string names;
      for (size_t p : buckets[b].params) {
        names += (p % 2 == 0 ? " W" : " b") + std::to_string(p / 2);
      }
      std::printf("#   bucket %zu: %6.2f MiB,%s\n", b,
                  buckets[b].elements * sizeof(float) / double(1 << 20), names.c_str());
    }
    std::printf("# ring all-reduce volume per rank per step: 2*Psi*(N-1)/N = %.0f bytes\n",
                2.0 * psiBytes * (n - 1) / n);
    std::printf("%5s %9s %10s %10s %10s %10s %10s %7s %12s\n", "step", "loss", "compute_ms",
                "comm_a_ms", "step_a_ms", "compute_b", "step_b_ms", "hidden", "sent_bytes");
  }
  return Status::ok();
}

// One forward + backward + finalize; phase 0 = no overlap, 1 = overlap.
Status DdpDemo::pass(int step, int phase, const std::vector<float>& x, const std::vector<float>& y,
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
  ddp::GradientSink& sink = kill ? static_cast<ddp::GradientSink&>(killSwitch) : *reducer_;
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

Status DdpDemo::trainStep(uint64_t step) {
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
  long long before = tcpBytesSent();
  COLLIE_RETURN_IF_ERROR(pass(static_cast<int>(step), 1, x, y, &f[2], &f[3], &f[4]));
  long long after = tcpBytesSent();
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
  if (root()) {
    char sent[48];
    double sentMax = maxes[4], sentMin = -maxes[5];
    if (sentMin > 0 && sentMin == sentMax) {
      std::snprintf(sent, sizeof(sent), "%.0f", sentMax);
    } else if (sentMin > 0) {
      std::snprintf(sent, sizeof(sent), "%.0f..%.0f", sentMin, sentMax);
    } else {
      std::snprintf(sent, sizeof(sent), "n/a(shm)");
    }
    std::printf("%5llu %9.5f %10.1f %10.1f %10.1f %10.1f %10.1f %6.0f%% %12s\n",
                static_cast<unsigned long long>(step), lossAvg, maxes[0], commA, maxes[1], maxes[2],
                maxes[3], 100 * hidden, sent);
    std::fflush(stdout);
  }
  return Status::ok();
}

Status DdpDemo::run() {
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
  std::printf(
      "# final: rank %d of %d (started as rank %d), step %llu, loss %.9g, parameter checksum "
      "%016llx%s\n",
      comm_->rank(), comm_->size(), firstRank_, static_cast<unsigned long long>(step), lastLoss_,
      static_cast<unsigned long long>(parameterChecksum(params_)),
      failures_ > 0 ? (", after " + std::to_string(failures_) + " failure(s)").c_str() : "");
  std::fflush(stdout);
  return writeOutputs(static_cast<int>(step) - 1);
}

// After a failed step: find the failed rank, shrink, reload the last checkpoint and
// rebuild what depends on the rank and size. Every survivor must name the same rank.
Status DdpDemo::recover(const Status& failure, uint64_t failedStep, uint64_t* resumeStep) {
  const SystemClock::time_point detected = SystemClock::now();
  Status sticky = comm_->asyncError();
  const int dead = !sticky.isOk() ? sticky.peer() : failure.peer();
  const int oldRank = comm_->rank();
  if (dead < 0 || dead == oldRank || comm_->size() < 2) {
    return failure.withContext("ddp-demo: rank " + std::to_string(oldRank) +
                               " cannot shrink: the error names no other failed rank");
  }
  std::printf("# rank %d: step %llu failed: %s\n", oldRank,
              static_cast<unsigned long long>(failedStep), failure.toString().c_str());
  // Time from the kill when the victim left its stamp here (same host), else from the
  // start of the failed step.
  SystemClock::time_point since = stepStart_;
  std::string sinceWhat = "the start of step " + std::to_string(failedStep);
  int stampRank = -1;
  int64_t stampUs = 0;
  if (std::ifstream(killStampPath(o_.checkpointDir)) >> stampRank >> stampUs && stampRank == dead) {
    since = SystemClock::time_point(std::chrono::microseconds(stampUs));
    sinceWhat = "the kill";
  }
  reducer_.reset();  // its in-flight all-reduces have failed; it refers to the old comm
  const auto shrinkStart = SystemClock::now();
  Result<std::unique_ptr<Communicator>> next = comm_->shrink({dead});
  if (!next.isOk()) {
    return next.status().withContext("ddp-demo: rank " + std::to_string(oldRank) +
                                     " shrinking after the failure of rank " +
                                     std::to_string(dead));
  }
  comm_ = std::move(*next);
  const double shrinkMs = msBetween(shrinkStart, SystemClock::now());
  ++failures_;

  Result<ddp::Checkpoint> c = ddp::loadCheckpoint(ddp::checkpointPath(o_.checkpointDir));
  if (!c.isOk()) return c.status().withContext("ddp-demo: reloading after a failure");
  COLLIE_RETURN_IF_ERROR(applyCheckpoint(*c));
  COLLIE_RETURN_IF_ERROR(buildDistributed());
  COLLIE_RETURN_IF_ERROR(barrier(*comm_));
  *resumeStep = c->step;
  std::printf(
      "# rank %d (was %d): detected failure of rank %d after %.0f ms, shrunk to %d ranks in "
      "%.0f ms, resumed from step %llu (redoing %llu steps), training again %.0f ms after %s\n",
      comm_->rank(), oldRank, dead, msBetween(since, detected), comm_->size(), shrinkMs,
      static_cast<unsigned long long>(c->step),
      static_cast<unsigned long long>(failedStep - c->step), msBetween(since, SystemClock::now()),
      sinceWhat.c_str());
  std::fflush(stdout);
  if (root()) std::remove(killStampPath(o_.checkpointDir).c_str());
  return Status::ok();
}

void DdpDemo::printSummary() const {
  if (!root() || counted_ == 0) return;
  double c = sums_[0] / counted_, m = sums_[1] / counted_, a = sums_[2] / counted_,
         b = sums_[3] / counted_;
  std::printf(
      "# mean over %d steps%s: compute %.1f ms, communication %.1f ms (%.0f%% of "
      "compute), step without overlap %.1f ms, with bucketed overlap %.1f ms "
      "(%.2fx), communication hidden %.0f%%\n",
      counted_, o_.steps > 1 ? " (first step excluded)" : "", c, m, 100 * m / c, a, b, a / b,
      m > 0 ? 100 * std::clamp((a - b) / m, 0.0, 1.0) : 100.0);
  std::vector<double> hidden = hiddenPerStep_;
  std::sort(hidden.begin(), hidden.end());
  size_t h = hidden.size();
  double median = h % 2 ? hidden[h / 2] : (hidden[h / 2 - 1] + hidden[h / 2]) / 2;
  std::printf("# communication hidden per step: median %.0f%%, min %.0f%%, max %.0f%%\n",
              100 * median, 100 * hidden.front(), 100 * hidden.back());
  std::printf(
      "# sent_bytes: bytes each rank sent on its TCP sockets in step (b) (min..max over ranks), "
      "from TCP_INFO (run with COLLIE_TRANSPORT=tcp); shared-memory copies are not counted\n");
}

Status DdpDemo::saveCheckpoint(uint64_t step) {
  if (root()) {
    ddp::Checkpoint c;
    c.step = step;
    c.epoch = step / stepsPerEpoch();
    c.optimizer = optimizer_->name();
    c.optimizerSteps = optimizer_->steps();
    for (const auto& p : params_) c.params.emplace_back(p.begin(), p.end());
    c.optimizerState = optimizer_->state();
    COLLIE_RETURN_IF_ERROR(ddp::saveCheckpoint(ddp::checkpointPath(o_.checkpointDir), c));
    std::printf("# checkpoint written: %s (step %llu)\n",
                ddp::checkpointPath(o_.checkpointDir).c_str(),
                static_cast<unsigned long long>(step));
    std::fflush(stdout);
  }
  return barrier(*comm_);  // nobody resumes from a file still being written
}

Status DdpDemo::writeOutputs(int lastStep) {
  std::string tracePath = o_.tracePath;
  if (tracePath.empty()) tracePath = Config::fromEnvironment().text("COLLIE_TRACE");
  if (tracePath.empty() && o_.svgPath.empty()) return Status::ok();
  std::vector<ddp::TimelineEvent> mine = timeline_.events();
  double capacity = static_cast<double>(mine.size());
  COLLIE_RETURN_IF_ERROR(waitFor(
      comm_->allReduce(&capacity, &capacity, 1, DataType::kFloat64, ReduceOp::kMax), "count"));
  size_t cap = static_cast<size_t>(capacity);
  std::vector<double> send = ddp::toDoubles(mine, cap);
  std::vector<double> all(send.size() * comm_->size());
  COLLIE_RETURN_IF_ERROR(waitFor(
      comm_->allGather(send.data(), all.data(), send.size(), DataType::kFloat64), "gather events"));
  if (!root()) return Status::ok();
  std::vector<ddp::TimelineEvent> events;
  for (int r = 0; r < comm_->size(); ++r) {
    auto part = ddp::fromDoubles(all.data() + r * send.size(), cap);
    events.insert(events.end(), part.begin(), part.end());
  }
  if (!tracePath.empty()) {
    COLLIE_RETURN_IF_ERROR(ddp::writeFileAtomically(tracePath, ddp::chromeTraceJson(events)));
    std::printf("# Chrome trace: %s (chrome://tracing or ui.perfetto.dev)\n", tracePath.c_str());
  }
  if (!o_.svgPath.empty()) {
    char title[256];
    std::snprintf(title, sizeof(title),
                  "collie ddp-demo: %d ranks, %d layers, %.1f MiB of gradients, %zu buckets",
                  comm_->size(), o_.layers,
                  reducer_->totalElements() * sizeof(float) / double(1 << 20),
                  reducer_->buckets().size());
    COLLIE_RETURN_IF_ERROR(ddp::writeFileAtomically(
        o_.svgPath, ddp::timelineSvg(events, lastStep, comm_->size(), title)));
    std::printf("# SVG timeline of step %d: %s\n", lastStep, o_.svgPath.c_str());
  }
  return Status::ok();
}

}  // namespace

int runDdpDemo(const DdpDemoCliOptions& options) {
  // `collie run` ends the whole job when a rank dies, unless --keep-going.
  const Config launch = Config::fromEnvironment();
  if (options.killRank >= 0 && launch.isSet("COLLIE_UNIQUE_ID") &&
      launch.integer("COLLIE_KEEP_GOING") != 1) {
    std::fprintf(stderr,
                 "collie ddp-demo: --kill-rank needs `collie run --keep-going`: without it the "
                 "launcher ends the whole job when rank %d dies\n",
                 options.killRank);
    return 2;
  }
  Result<std::unique_ptr<Communicator>> comm = Communicator::createFromEnvironment();
  if (!comm.isOk()) {
    std::fprintf(stderr, "collie ddp-demo: %s\n", comm.status().toString().c_str());
    return 1;
  }
  DdpDemo demo(std::move(*comm), options);
  Status status = demo.run();
  if (!status.isOk()) {
    std::fprintf(stderr, "collie ddp-demo: rank %d: %s\n", demo.comm().rank(),
                 status.toString().c_str());
    demo.comm().abort();
    return 1;
  }
  return 0;
}

}  // namespace collie::tools
