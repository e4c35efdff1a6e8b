// The elastic part of the ddp demo (demo.h): the --kill-rank fault drill and the
// survivors' recovery (shrink, reload the last checkpoint, go on).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "ddp/demo/demo.h"
#include "ddp/demo/demo_internal.h"

namespace collie::ddp::demo {

std::string killStampPath(const std::string& dir) { return dir + "/collie_ddp_killed.txt"; }

Status KillSwitch::markReady(size_t param) {
  Status status = reducer_.markReady(param);
  if (++marked_ == reducer_.buckets()[0].params.size()) die();
  return status;
}

void KillSwitch::die() {
  std::printf("# rank %d: --kill-rank: SIGKILL in the backward of step %llu, bucket 0 in flight\n",
              rank_, static_cast<unsigned long long>(step_));
  std::fflush(stdout);
  std::ofstream(stampPath_) << rank_ << " " << epochUs(SystemClock::now()) << "\n";
  std::raise(SIGKILL);
  std::abort();  // not reached
}

Status Demo::checkElasticOptions() {
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

// After a failed step: find the failed rank, shrink, reload the last checkpoint and
// rebuild what depends on the rank and size. Every survivor must name the same rank.
Status Demo::recover(const Status& failure, uint64_t failedStep, uint64_t* resumeStep) {
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

  Result<Checkpoint> c = loadCheckpoint(checkpointPath(o_.checkpointDir));
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

}  // namespace collie::ddp::demo
