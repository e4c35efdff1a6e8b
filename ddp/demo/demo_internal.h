// What the parts of the ddp demo (demo.cc, demo_elastic.cc, demo_report.cc) share; not
// for users of the demo (ddp/demo/demo.h).
//
// Thread safety: KillSwitch is a GradientSink of one backward pass (one thread); the
// functions are reentrant.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>

#include "collie/communicator.h"
#include "ddp/gradient_sink.h"
#include "ddp/reducer.h"

namespace collie::ddp::demo {

using SystemClock = std::chrono::system_clock;

// The work's outcome (its wait, or why it was not issued), in context `what`.
inline Status waitFor(Result<Work> work, const char* what) {
  Status status = work.isOk() ? work->wait() : work.status();
  return status.isOk() ? status : status.withContext(what);
}

inline Status barrier(Communicator& comm) { return waitFor(comm.barrier(), "ddp-demo: barrier"); }

inline double msBetween(SystemClock::time_point a, SystemClock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

inline int64_t epochUs(SystemClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

// Where the --kill-rank victim leaves "<rank> <microseconds since the epoch>" just before
// it dies, so that survivors on the same host can time their recovery from the kill.
std::string killStampPath(const std::string& dir);

// FNV-1a over the parameters' bytes: equal checksums <=> (almost surely) equal replicas.
uint64_t parameterChecksum(const std::vector<std::span<float>>& params);

// The sink of the --kill-rank victim's backward: forwards to the Reducer and SIGKILLs
// this process right after the first bucket's all-reduce was issued, while the rest of
// backward and the bucket all-reduces are still to come: the hard case for survivors.
class KillSwitch : public GradientSink {
 public:
  KillSwitch(Reducer& reducer, std::string stampPath, int rank, uint64_t step)
      : reducer_(reducer), stampPath_(std::move(stampPath)), rank_(rank), step_(step) {}
  std::span<float> grad(size_t param) override { return reducer_.grad(param); }
  Status markReady(size_t param) override;

 private:
  [[noreturn]] void die();

  Reducer& reducer_;
  std::string stampPath_;
  int rank_;
  uint64_t step_;
  size_t marked_ = 0;
};

}  // namespace collie::ddp::demo
