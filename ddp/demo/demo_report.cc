// What the ddp demo (demo.h) prints and writes: rank 0's banner, per-step table and
// summary, every rank's final line, and the gathered timeline (Chrome trace, SVG).
#include <algorithm>
#include <cstdio>

#include "ddp/demo/demo.h"
#include "ddp/demo/demo_internal.h"

namespace collie::ddp::demo {

uint64_t parameterChecksum(const std::vector<std::span<float>>& params) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& p : params) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(p.data());
    for (size_t i = 0; i < p.size_bytes(); ++i) h = (h ^ bytes[i]) * 0x100000001b3ull;
  }
  return h;
}

void Demo::printBanner() const {
  const size_t n = comm_->size();
  double psiBytes = static_cast<double>(reducer_->totalElements()) * sizeof(float);
  std::printf(
      "# collie ddp-demo: %d ranks, %d layers of %dx%d (+bias) = %zu parameters "
      "(%.2f MiB of float32 gradients), batch %d per rank, %s compute %.1f ms/layer "
      "(%s), optimizer %s%s\n",
      comm_->size(), o_.layers, dim_, dim_, reducer_->totalElements(), psiBytes / (1 << 20),
      o_.batch, o_.compute.c_str(), o_.msPerLayer,
      o_.compute == "fma" ? "busy multiply-add loop" : "host idle", optimizer_->name().c_str(),
      o_.resume ? (", resumed at step " + std::to_string(startStep_)).c_str() : "");
  std::printf("# buckets (launch order; cap %.2f MiB, first %.2f MiB; in %s memory):\n",
              o_.bucketCapMb, o_.firstBucketMb, reducer_->sharedBuckets() ? "shared" : "heap");
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
  const int hosts = comm_->hostCount();
  if (hosts > 1) {
    // What leaves each host per step: a ring in host order crosses once per host; the
    // two-level all-reduce sends each host's share once (its L ranks a 1/L part each).
    std::printf(
        "# %d hosts of %d rank(s): per host's link per step: ring 2*Psi*(N-1)/N = %.0f bytes, "
        "hier 2*Psi*(M-1)/M = %.0f bytes (%.0f per rank over the network)\n",
        hosts, comm_->localSize(), 2.0 * psiBytes * (n - 1) / n,
        2.0 * psiBytes * (hosts - 1) / hosts,
        2.0 * psiBytes * (hosts - 1) / hosts / std::max(comm_->localSize(), 1));
  }
  std::printf("%5s %9s %10s %10s %10s %10s %10s %7s %12s\n", "step", "loss", "compute_ms",
              "comm_a_ms", "step_a_ms", "compute_b", "step_b_ms", "hidden", "sent_bytes");
}

// maxes: the slowest rank's compute and total of (a) and (b), the most bytes sent, and
// minus the fewest.
void Demo::printStep(uint64_t step, double loss, const double maxes[6], double commA,
                     double hidden) const {
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
              static_cast<unsigned long long>(step), loss, maxes[0], commA, maxes[1], maxes[2],
              maxes[3], 100 * hidden, sent);
  std::fflush(stdout);
}

void Demo::printSummary() const {
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

void Demo::printFinal(uint64_t step) const {
  std::printf(
      "# final: rank %d of %d (started as rank %d), step %llu, loss %.9g, parameter checksum "
      "%016llx%s\n",
      comm_->rank(), comm_->size(), firstRank_, static_cast<unsigned long long>(step), lastLoss_,
      static_cast<unsigned long long>(parameterChecksum(params_)),
      failures_ > 0 ? (", after " + std::to_string(failures_) + " failure(s)").c_str() : "");
  std::fflush(stdout);
}

Status Demo::writeOutputs(int lastStep) {
  const std::string& tracePath = o_.tracePath;
  if (tracePath.empty() && o_.svgPath.empty()) return Status::ok();
  std::vector<TimelineEvent> mine = timeline_.events();
  double capacity = static_cast<double>(mine.size());
  COLLIE_RETURN_IF_ERROR(waitFor(
      comm_->allReduce(&capacity, &capacity, 1, DataType::kFloat64, ReduceOp::kMax), "count"));
  size_t cap = static_cast<size_t>(capacity);
  std::vector<double> send = toDoubles(mine, cap);
  std::vector<double> all(send.size() * comm_->size());
  COLLIE_RETURN_IF_ERROR(waitFor(
      comm_->allGather(send.data(), all.data(), send.size(), DataType::kFloat64), "gather events"));
  if (!root()) return Status::ok();
  std::vector<TimelineEvent> events;
  for (int r = 0; r < comm_->size(); ++r) {
    auto part = fromDoubles(all.data() + r * send.size(), cap);
    events.insert(events.end(), part.begin(), part.end());
  }
  if (!tracePath.empty()) {
    COLLIE_RETURN_IF_ERROR(writeFileAtomically(tracePath, chromeTraceJson(events)));
    std::printf("# Chrome trace: %s (chrome://tracing or ui.perfetto.dev)\n", tracePath.c_str());
  }
  if (!o_.svgPath.empty()) {
    char title[256];
    std::snprintf(title, sizeof(title),
                  "collie ddp-demo: %d ranks, %d layers, %.1f MiB of gradients, %zu buckets",
                  comm_->size(), o_.layers,
                  reducer_->totalElements() * sizeof(float) / double(1 << 20),
                  reducer_->buckets().size());
    COLLIE_RETURN_IF_ERROR(
        writeFileAtomically(o_.svgPath, timelineSvg(events, lastStep, comm_->size(), title)));
    std::printf("# SVG timeline of step %d: %s\n", lastStep, o_.svgPath.c_str());
  }
  return Status::ok();
}

}  // namespace collie::ddp::demo
