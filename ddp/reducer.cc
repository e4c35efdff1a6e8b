#include "ddp/reducer.h"

#include <algorithm>
#include <string>

namespace collie::ddp {

NoSyncScope::~NoSyncScope() {
  if (reducer_ != nullptr) reducer_->noSync_ = false;
}

Result<std::unique_ptr<Reducer>> Reducer::create(Communicator* comm,
                                                 std::vector<std::span<float>> params,
                                                 const ReducerOptions& options) {
  if (comm == nullptr) return invalidArgument("ddp::Reducer: no communicator");
  if (params.empty()) return invalidArgument("ddp::Reducer: no parameters registered");
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].empty()) {
      return invalidArgument("ddp::Reducer: parameter " + std::to_string(i) +
                             " is empty; register only parameters with elements");
    }
  }
  std::unique_ptr<Reducer> reducer(new Reducer(comm, std::move(params), options));
  if (options.broadcastInitialParameters) {
    COLLIE_RETURN_IF_ERROR(reducer->broadcastParameters());
  }
  return reducer;
}

Reducer::Reducer(Communicator* comm, std::vector<std::span<float>> params,
                 const ReducerOptions& options)
    : comm_(comm), params_(std::move(params)), options_(options) {
  build();
  waiter_ = std::thread([this] { waiterLoop(); });
}

Reducer::~Reducer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  waiter_.join();
}

void Reducer::build() {
  std::vector<size_t> bytes;
  for (const auto& p : params_) bytes.push_back(p.size() * sizeof(float));
  size_t first = megabytesToBytes(options_.firstBucketMb);
  size_t cap = megabytesToBytes(options_.bucketCapMb);
  std::vector<std::vector<size_t>> assignment = assignBuckets(bytes, first, cap);
  paramBucket_.assign(params_.size(), 0);
  paramOffset_.assign(params_.size(), 0);
  std::vector<size_t> bucketElements;
  for (size_t b = 0; b < assignment.size(); ++b) {
    BucketLayout layout;
    layout.params = assignment[b];
    for (size_t p : layout.params) {
      layout.offsets.push_back(layout.elements);
      paramBucket_[p] = b;
      paramOffset_[p] = layout.elements;
      layout.elements += params_[p].size();
    }
    totalElements_ += layout.elements;
    bucketElements.push_back(layout.elements);
    pending_.push_back(layout.params.size());
    layouts_.push_back(std::move(layout));
  }
  storage_ = GradientStorage(bucketElements, options_.bucketMemory);
  readyThisStep_.assign(params_.size(), 0);
  touched_.assign(params_.size(), 0);
  stats_.issueUs.assign(layouts_.size(), 0);
  stats_.endUs.assign(layouts_.size(), 0);
}

Status Reducer::broadcastParameters() {
  std::vector<Work> works;
  for (size_t i = 0; i < params_.size(); ++i) {
    Result<Work> work = comm_->broadcast(params_[i].data(), params_[i].data(), params_[i].size(),
                                         DataType::kFloat32, /*root=*/0);
    if (!work.isOk()) return work.status().withContext("ddp: broadcasting initial parameters");
    works.push_back(*work);
  }
  for (size_t i = 0; i < works.size(); ++i) {
    Status status = works[i].wait(options_.timeout);
    if (!status.isOk()) {
      return status.withContext("ddp: broadcast of initial parameter " + std::to_string(i) +
                                " from rank 0");
    }
  }
  return Status::ok();
}

double Reducer::nowUs() const {
  if (options_.timeline != nullptr) return options_.timeline->nowUs();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - epoch_)
      .count();
}

std::span<float> Reducer::grad(size_t param) {
  size_t b = paramBucket_[param];
  return storage_.bucket(b).subspan(paramOffset_[param], params_[param].size());
}

NoSyncScope Reducer::noSync() {
  noSync_ = true;
  return NoSyncScope(this);
}

Status Reducer::markReady(size_t param) {
  if (!failed_.isOk()) return failed_;
  if (param >= params_.size()) {
    return invalidArgument("ddp::Reducer::markReady: parameter " + std::to_string(param) +
                           " is not registered (" + std::to_string(params_.size()) +
                           " parameters)");
  }
  touched_[param] = 1;
  if (noSync_) return Status::ok();
  if (readyThisStep_[param]) {
    return invalidArgument("ddp::Reducer::markReady: parameter " + std::to_string(param) +
                           " marked ready twice in one step; call finalize() between steps");
  }
  readyThisStep_[param] = 1;
  size_t b = paramBucket_[param];
  if (--pending_[b] == 0 && options_.overlap) return issueReadyBuckets(/*force=*/false);
  return Status::ok();
}

Status Reducer::issueReadyBuckets(bool force) {
  while (nextToIssue_ < layouts_.size() && (force || pending_[nextToIssue_] == 0)) {
    size_t b = nextToIssue_++;
    stats_.issueUs[b] = nowUs();
    const std::span<float> bucket = storage_.bucket(b);
    Result<Work> work = comm_->allReduce(bucket.data(), bucket.data(), bucket.size(),
                                         DataType::kFloat32, ReduceOp::kAvg);
    if (!work.isOk()) {
      failed_ =
          work.status().withContext("ddp: issuing the all-reduce of bucket " + std::to_string(b));
      return failed_;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      toWait_.emplace_back(b, *work);
    }
    cv_.notify_all();
  }
  return Status::ok();
}

void Reducer::waiterLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !toWait_.empty(); });
    if (toWait_.empty()) return;  // stop_ and nothing in flight
    auto [bucket, work] = toWait_.front();
    toWait_.pop_front();
    lock.unlock();
    Status status = work.wait(options_.timeout);
    double end = nowUs();
    lock.lock();
    stats_.endUs[bucket] = end;
    if (!status.isOk() && waitStatus_.isOk()) {
      waitStatus_ = status.withContext("ddp: all-reduce of bucket " + std::to_string(bucket));
    }
    ++completed_;
    cv_.notify_all();
  }
}

Status Reducer::finalize() {
  if (!failed_.isOk()) return failed_;
  if (noSync_) return Status::ok();
  // Parameters that got no gradient this step (and hold none accumulated) contribute
  // zeros, so the buckets they share still complete on every rank.
  for (size_t b = nextToIssue_; b < layouts_.size(); ++b) {
    for (size_t p : layouts_[b].params) {
      if (!readyThisStep_[p] && !touched_[p]) {
        std::span<float> g = grad(p);
        std::fill(g.begin(), g.end(), 0.0f);
      }
    }
  }
  COLLIE_RETURN_IF_ERROR(issueReadyBuckets(/*force=*/true));

  Status status;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    bool done = cv_.wait_for(lock, options_.timeout, [&] { return completed_ == layouts_.size(); });
    if (!done) {
      status = timeoutError("ddp: " + std::to_string(layouts_.size() - completed_) + " of " +
                            std::to_string(layouts_.size()) +
                            " bucket all-reduces not finished within " +
                            std::to_string(options_.timeout.count()) +
                            " ms; a peer may be stuck or dead (see COLLIE_TIMEOUT)");
    } else {
      status = waitStatus_;
    }
    completed_ = 0;
  }
  if (!status.isOk()) {
    failed_ = status;
    return status;
  }

  stats_.startUs.assign(layouts_.size(), 0);
  stats_.busyUs = 0;
  double prevEnd = 0;
  for (size_t b = 0; b < layouts_.size(); ++b) {
    double start = b == 0 ? stats_.issueUs[b] : std::max(stats_.issueUs[b], prevEnd);
    stats_.startUs[b] = start;
    stats_.busyUs += std::max(0.0, stats_.endUs[b] - start);
    prevEnd = stats_.endUs[b];
    if (options_.timeline != nullptr) {
      options_.timeline->record(EventKind::kAllReduce, static_cast<int>(b), start, stats_.endUs[b],
                                stats_.issueUs[b]);
    }
  }
  stats_.firstIssueUs = stats_.issueUs.empty() ? 0 : stats_.issueUs.front();
  stats_.lastEndUs = prevEnd;

  std::fill(readyThisStep_.begin(), readyThisStep_.end(), 0);
  std::fill(touched_.begin(), touched_.end(), 0);
  for (size_t b = 0; b < layouts_.size(); ++b) pending_[b] = layouts_[b].params.size();
  nextToIssue_ = 0;
  return Status::ok();
}

void Reducer::zeroGrad() {
  for (size_t b = 0; b < storage_.numBuckets(); ++b) {
    const std::span<float> bucket = storage_.bucket(b);
    std::fill(bucket.begin(), bucket.end(), 0.0f);
  }
  std::fill(touched_.begin(), touched_.end(), 0);
}

}  // namespace collie::ddp
