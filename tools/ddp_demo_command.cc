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
#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collie/communicator.h"
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
  long long total = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (struct dirent* entry = readdir(dir)) {
    int fd = std::atoi(entry->d_name);
    if (fd <= 2 || fd == dirfd(dir)) continue;
    struct tcp_info info;
    socklen_t len = sizeof(info);
    std::memset(&info, 0, sizeof(info));
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 &&
        len >= offsetof(struct tcp_info, tcpi_bytes_sent) + sizeof(info.tcpi_bytes_sent)) {
      total += static_cast<long long>(info.tcpi_bytes_sent);
    }
  }
  closedir(dir);
  return total;
}

struct StepFigures {
  double computeA = 0, commA = 0, stepA = 0, computeB = 0, stepB = 0, loss = 0;
};

class DdpDemo {
 public:
  DdpDemo(Communicator& comm, const DdpDemoCliOptions& o) : comm_(comm), o_(o) {}
  Status run();

 private:
  Status setUp();
  Status pass(int step, int phase, const std::vector<float>& x, const std::vector<float>& y,
              double* computeMs, double* totalMs, double* loss);
  Status writeOutputs(int lastStep);
  Status saveCheckpoint(uint64_t step, uint64_t epoch);
  bool root() const { return comm_.rank() == 0; }

  Communicator& comm_;
  const DdpDemoCliOptions& o_;
  std::unique_ptr<ddp::Mlp> model_;
  std::unique_ptr<ddp::Reducer> reducer_;
  std::unique_ptr<ddp::Optimizer> optimizer_;
  std::unique_ptr<ddp::ComputeBurner> burner_;
  std::unique_ptr<ddp::SyntheticDataset> data_;
  std::unique_ptr<ddp::DistributedSampler> sampler_;
  std::vector<std::span<float>> params_;
  ddp::Timeline timeline_;
  uint64_t startStep_ = 0;
};

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
  uint64_t epoch = 0;
  if (o_.resume) {
    if (o_.checkpointDir.empty()) return invalidArgument("ddp-demo: --resume needs --checkpoint");
    Result<ddp::Checkpoint> c = ddp::loadCheckpoint(ddp::checkpointPath(o_.checkpointDir));
    if (!c.isOk()) return c.status().withContext("ddp-demo: rank " + std::to_string(comm_.rank()));
    if (c->params.size() != params_.size() || c->optimizer != optimizer_->name() ||
        c->optimizerState.size() != optimizer_->state().size()) {
      return invalidArgument("ddp-demo: checkpoint does not match this model/optimizer");
    }
    for (size_t p = 0; p < params_.size(); ++p) {
      if (c->params[p].size() != params_[p].size()) {
        return invalidArgument("ddp-demo: checkpoint parameter " + std::to_string(p) +
                               " has another size; use the same --layers/--params-per-layer");
      }
      std::copy(c->params[p].begin(), c->params[p].end(), params_[p].begin());
    }
    for (size_t k = 0; k < c->optimizerState.size(); ++k) {
      if (c->optimizerState[k].size() != optimizer_->state()[k].size()) {
        return invalidArgument("ddp-demo: checkpoint optimizer state has another shape");
      }
    }
    optimizer_->state() = c->optimizerState;
    optimizer_->steps() = c->optimizerSteps;
    startStep_ = c->step;
    epoch = c->epoch;
  }
  ddp::ReducerOptions ro;
  ro.bucketCapMb = o_.bucketCapMb;
  ro.firstBucketMb = o_.firstBucketMb;
  ro.timeline = &timeline_;
  Result<std::unique_ptr<ddp::Reducer>> reducer = ddp::Reducer::create(&comm_, params_, ro);
  if (!reducer.isOk()) return reducer.status();
  reducer_ = std::move(*reducer);
  burner_ = std::make_unique<ddp::ComputeBurner>(mode, o_.msPerLayer);
  data_ = std::make_unique<ddp::SyntheticDataset>(o_.datasetSize, dim, o_.seed);
  sampler_ = std::make_unique<ddp::DistributedSampler>(o_.datasetSize, comm_.size(), comm_.rank(),
                                                       o_.seed);
  sampler_->setEpoch(epoch);

  if (root()) {
    const size_t n = comm_.size();
    double psiBytes = static_cast<double>(reducer_->totalElements()) * sizeof(float);
    std::printf(
        "# collie ddp-demo: %d ranks, %d layers of %dx%d (+bias) = %zu parameters "
        "(%.2f MiB of float32 gradients), batch %d per rank, %s compute %.1f ms/layer "
        "(%s), optimizer %s%s\n",
        comm_.size(), o_.layers, dim, dim, reducer_->totalElements(), psiBytes / (1 << 20),
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
  timeline_.setContext(comm_.rank(), step, phase);
  reducer_->setOverlap(phase == 1);
  reducer_->zeroGrad();
  COLLIE_RETURN_IF_ERROR(barrier(comm_));
  double t0 = timeline_.nowUs();
  model_->forward(x.data(), o_.batch, &timeline_);
  Result<double> l = model_->backward(y.data(), *reducer_, 1.0f, burner_.get(), &timeline_);
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

Status DdpDemo::run() {
  COLLIE_RETURN_IF_ERROR(setUp());
  COLLIE_RETURN_IF_ERROR(barrier(comm_));
  timeline_.resetEpoch();
  const size_t perEpoch = std::max<size_t>(1, sampler_->numSamples() / o_.batch);
  std::vector<double> sums(4, 0.0);
  std::vector<double> hiddenPerStep;
  int counted = 0;
  uint64_t step = startStep_;
  for (int s = 0; s < o_.steps; ++s, ++step) {
    sampler_->setEpoch(step / perEpoch);
    std::vector<size_t> all = sampler_->indices();
    size_t first = (step % perEpoch) * o_.batch;
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
        waitFor(comm_.allReduce(maxes, maxes, 6, DataType::kFloat64, ReduceOp::kMax), "max"));
    double lossAvg = f[4];
    COLLIE_RETURN_IF_ERROR(waitFor(
        comm_.allReduce(&lossAvg, &lossAvg, 1, DataType::kFloat64, ReduceOp::kAvg), "loss"));
    double commA = maxes[1] - maxes[0];
    double hidden = commA > 0 ? std::clamp((maxes[1] - maxes[3]) / commA, 0.0, 1.0) : 1.0;
    if (s > 0 || o_.steps == 1) {
      sums[0] += maxes[0];
      sums[1] += commA;
      sums[2] += maxes[1];
      sums[3] += maxes[3];
      hiddenPerStep.push_back(hidden);
      ++counted;
    }
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
                  static_cast<unsigned long long>(step), lossAvg, maxes[0], commA, maxes[1],
                  maxes[2], maxes[3], 100 * hidden, sent);
      std::fflush(stdout);
    }
  }
  if (root() && counted > 0) {
    double c = sums[0] / counted, m = sums[1] / counted, a = sums[2] / counted,
           b = sums[3] / counted;
    std::printf(
        "# mean over %d steps%s: compute %.1f ms, communication %.1f ms (%.0f%% of "
        "compute), step without overlap %.1f ms, with bucketed overlap %.1f ms "
        "(%.2fx), communication hidden %.0f%%\n",
        counted, o_.steps > 1 ? " (first step excluded)" : "", c, m, 100 * m / c, a, b, a / b,
        m > 0 ? 100 * std::clamp((a - b) / m, 0.0, 1.0) : 100.0);
    std::sort(hiddenPerStep.begin(), hiddenPerStep.end());
    size_t h = hiddenPerStep.size();
    double median =
        h % 2 ? hiddenPerStep[h / 2] : (hiddenPerStep[h / 2 - 1] + hiddenPerStep[h / 2]) / 2;
    std::printf("# communication hidden per step: median %.0f%%, min %.0f%%, max %.0f%%\n",
                100 * median, 100 * hiddenPerStep.front(), 100 * hiddenPerStep.back());
    std::printf(
        "# sent_bytes: bytes each rank sent on its TCP sockets in step (b) (min..max over ranks), "
        "from TCP_INFO (run with COLLIE_TRANSPORT=tcp); shared-memory copies are not counted\n");
  }
  if (!o_.checkpointDir.empty()) {
    COLLIE_RETURN_IF_ERROR(saveCheckpoint(step, step / perEpoch));
  }
  return writeOutputs(static_cast<int>(step) - 1);
}

Status DdpDemo::saveCheckpoint(uint64_t step, uint64_t epoch) {
  if (root()) {
    ddp::Checkpoint c;
    c.step = step;
    c.epoch = epoch;
    c.optimizer = optimizer_->name();
    c.optimizerSteps = optimizer_->steps();
    for (const auto& p : params_) c.params.emplace_back(p.begin(), p.end());
    c.optimizerState = optimizer_->state();
    COLLIE_RETURN_IF_ERROR(ddp::saveCheckpoint(ddp::checkpointPath(o_.checkpointDir), c));
    std::printf("# checkpoint written: %s (step %llu)\n",
                ddp::checkpointPath(o_.checkpointDir).c_str(),
                static_cast<unsigned long long>(step));
  }
  return barrier(comm_);  // nobody resumes from a file still being written
}

Status DdpDemo::writeOutputs(int lastStep) {
  std::string tracePath = o_.tracePath;
  if (tracePath.empty()) {
    const char* env = std::getenv("COLLIE_TRACE");
    if (env != nullptr) tracePath = env;
  }
  if (tracePath.empty() && o_.svgPath.empty()) return Status::ok();
  std::vector<ddp::TimelineEvent> mine = timeline_.events();
  double capacity = static_cast<double>(mine.size());
  COLLIE_RETURN_IF_ERROR(waitFor(
      comm_.allReduce(&capacity, &capacity, 1, DataType::kFloat64, ReduceOp::kMax), "count"));
  size_t cap = static_cast<size_t>(capacity);
  std::vector<double> send = ddp::toDoubles(mine, cap);
  std::vector<double> all(send.size() * comm_.size());
  COLLIE_RETURN_IF_ERROR(waitFor(
      comm_.allGather(send.data(), all.data(), send.size(), DataType::kFloat64), "gather events"));
  if (!root()) return Status::ok();
  std::vector<ddp::TimelineEvent> events;
  for (int r = 0; r < comm_.size(); ++r) {
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
                  comm_.size(), o_.layers,
                  reducer_->totalElements() * sizeof(float) / double(1 << 20),
                  reducer_->buckets().size());
    COLLIE_RETURN_IF_ERROR(ddp::writeFileAtomically(
        o_.svgPath, ddp::timelineSvg(events, lastStep, comm_.size(), title)));
    std::printf("# SVG timeline of step %d: %s\n", lastStep, o_.svgPath.c_str());
  }
  return Status::ok();
}

}  // namespace

int runDdpDemo(const DdpDemoCliOptions& options) {
  Result<std::unique_ptr<Communicator>> comm = Communicator::createFromEnvironment();
  if (!comm.isOk()) {
    std::fprintf(stderr, "collie ddp-demo: %s\n", comm.status().toString().c_str());
    return 1;
  }
  DdpDemo demo(**comm, options);
  Status status = demo.run();
  if (!status.isOk()) {
    std::fprintf(stderr, "collie ddp-demo: rank %d: %s\n", (*comm)->rank(),
                 status.toString().c_str());
    (*comm)->abort();
    return 1;
  }
  return 0;
}

}  // namespace collie::tools
