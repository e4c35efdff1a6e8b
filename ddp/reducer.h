// Reducer: bucketed, overlapped gradient averaging for data-parallel training (the
// collie counterpart of PyTorch DDP's Reducer).
//
// Parameters are registered in model order. Their gradients live in one flat float32
// buffer per bucket (grad(i) is a view into it: no copy before or after the
// all-reduce, like gradient_as_bucket_view=True). The buffers are collie shared memory
// unless ReducerOptions::bucketMemory says kHeap (ddp/gradient_storage.h): on one host
// the all-reduce then reduces straight between the ranks' buckets in one pass. Buckets
// follow assignBuckets():
// reverse model order, a small first bucket, then buckets of about bucketCapMb.
//
// Per step: backward adds into grad(i) and calls markReady(i). When a bucket's last
// parameter is ready, its all-reduce (ReduceOp::kAvg, in place) is issued at once if
// every earlier bucket has been issued; a bucket that fills early waits for its
// predecessors, so every rank issues the same all-reduces in the same order.
// finalize() issues whatever is left -- parameters that got no gradient this step
// contribute zeros (the find_unused_parameters case) instead of hanging -- and waits
// for every bucket; then grad(i) holds the average over ranks on every rank (the same
// bytes everywhere). zeroGrad() clears the buffers before the next accumulation.
//
// Inside a noSync() scope markReady() only accumulates (no communication) and
// finalize() returns at once: gradient accumulation over micro-batches; the step that
// follows the scope communicates the sum of all micro-batches' gradients.
//
// With overlap disabled (setOverlap(false)) every all-reduce is issued by finalize(),
// after backward: the baseline the demo compares against.
//
// create() broadcasts every parameter's initial value from rank 0, so all replicas
// start equal. Errors (a failed all-reduce, a deadline) come back as a Status from
// markReady()/finalize(); the Reducer is then unusable.
//
// Thread safety: one thread drives markReady/finalize/zeroGrad (backward's thread).
// A helper thread waits for the all-reduces in order to time-stamp their completion.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "collie/communicator.h"
#include "ddp/bucket_assignment.h"
#include "ddp/gradient_sink.h"
#include "ddp/gradient_storage.h"
#include "ddp/timeline.h"

namespace collie::ddp {

struct ReducerOptions {
  double bucketCapMb = kDefaultBucketCapMb;
  double firstBucketMb = 1.0;
  bool overlap = true;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // per finalize()
  Timeline* timeline = nullptr;  // receives one kAllReduce event per bucket and step
  bool broadcastInitialParameters = true;
  BucketMemory bucketMemory = BucketMemory::kShared;  // falls back to the heap on failure
};

struct BucketLayout {
  std::vector<size_t> params;   // in buffer order
  std::vector<size_t> offsets;  // element offset of each param in the buffer
  size_t elements = 0;
};

// Timing of the last synchronised step (microseconds on the Timeline clock, or on
// the Reducer's own clock when there is no Timeline).
struct StepCommStats {
  double firstIssueUs = 0;
  double lastEndUs = 0;
  double busyUs = 0;  // sum over buckets of end - max(issue, previous bucket's end)
  std::vector<double> issueUs, startUs, endUs;
};

class Reducer;

// RAII scope for gradient accumulation: see Reducer::noSync().
class [[nodiscard]] NoSyncScope {
 public:
  explicit NoSyncScope(Reducer* reducer) : reducer_(reducer) {}
  ~NoSyncScope();
  NoSyncScope(const NoSyncScope&) = delete;
  NoSyncScope& operator=(const NoSyncScope&) = delete;

 private:
  Reducer* reducer_;
};

class Reducer : public GradientSink {
 public:
  // `params` are the parameters' storage in model order (float32); they must outlive
  // the Reducer. Blocks for the initial broadcast. Fails on an empty parameter list,
  // an empty parameter, or a failed broadcast.
  static Result<std::unique_ptr<Reducer>> create(Communicator* comm,
                                                 std::vector<std::span<float>> params,
                                                 const ReducerOptions& options = {});
  ~Reducer() override;

  std::span<float> grad(size_t param) override;
  Status markReady(size_t param) override;
  Status finalize();
  void zeroGrad();
  NoSyncScope noSync();
  void setOverlap(bool overlap) { options_.overlap = overlap; }

  const std::vector<BucketLayout>& buckets() const { return layouts_; }
  size_t bucketOf(size_t param) const { return paramBucket_[param]; }
  size_t numParams() const { return params_.size(); }
  size_t totalElements() const { return totalElements_; }
  const StepCommStats& lastStepStats() const { return stats_; }
  // True when the buckets are in collie shared memory (see ReducerOptions::bucketMemory).
  bool sharedBuckets() const { return storage_.shared(); }

 private:
  friend class NoSyncScope;
  Reducer(Communicator* comm, std::vector<std::span<float>> params, const ReducerOptions& options);
  Status broadcastParameters();
  void build();
  Status issueReadyBuckets(bool force);
  void waiterLoop();
  double nowUs() const;

  Communicator* comm_;
  std::vector<std::span<float>> params_;
  ReducerOptions options_;
  std::vector<BucketLayout> layouts_;
  GradientStorage storage_;
  std::vector<size_t> paramBucket_, paramOffset_;
  size_t totalElements_ = 0;
  std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();

  // Per-step state, touched only by the driving thread.
  bool noSync_ = false;
  std::vector<char> readyThisStep_;  // marked since the last finalize()
  std::vector<char> touched_;        // holds accumulated data since zeroGrad()
  std::vector<size_t> pending_;      // per bucket: parameters not yet ready
  size_t nextToIssue_ = 0;
  Status failed_;
  StepCommStats stats_;

  // Shared with the waiter thread.
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<size_t, Work>> toWait_;
  size_t completed_ = 0;
  Status waitStatus_;
  bool stop_ = false;
  std::thread waiter_;
};

}  // namespace collie::ddp
