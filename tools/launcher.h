// Local process supervision for `collie run`: start N ranks, pass their output
// through, forward signals, and end the whole job when one rank fails.
//
// Contract of superviseRanks():
//  - every rank runs `command` (PATH lookup) in its own process group, with the
//    launcher's environment plus spec.env(rank); rank 0 keeps stdin, others read
//    /dev/null; ranks die with the launcher (PR_SET_PDEATHSIG);
//  - SIGINT/SIGTERM received by the launcher are forwarded to every rank; a second one
//    kills them (SIGKILL);
//  - the first rank that exits non-zero or by a signal is reported on stderr as
//    "collie run: rank R exited with status S" (or "... killed by signal SIGKILL (9)");
//    the others get SIGTERM, then SIGKILL after spec.grace;
//  - returns 0 when every rank exited 0, else the first failing rank's exit status
//    (128 + signal for a signal, and 128 + signal when the launcher was signalled).
//  - with spec.keepGoing (`collie run --keep-going`, for jobs that shrink and go on
//    after losing ranks), a rank killed by a signal is reported the same way but the
//    others keep running; the launcher waits for all of them and prints one summary
//    line. It returns 0 when every rank that was not killed exited 0 (and at least
//    one did), else the first non-zero exit status (1 when every rank was killed).
//    A rank that exits non-zero still fails the job, but does not end the others.
//  - with spec.cpuOfRank non-empty, rank r runs bound to CPU spec.cpuOfRank[r] (set in
//    the child before exec; a refused binding is reported on stderr and the rank runs
//    unbound).
//  - a rank's exit is found within 100 ms even when SIGCHLD never reaches the
//    supervisor (the pids are polled); one reaped by another waiter of this process
//    fails the job, named, since its status is lost.
// blockLauncherSignals() must be called before any thread is started (threads inherit
// the mask, so SIGINT/SIGTERM/SIGCHLD reach only the supervisor's signalfd); it also
// restores SIGCHLD's default action when the launcher was started with it ignored.
// Not thread-safe: one supervision per process at a time.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace collie::tools {

using EnvVars = std::vector<std::pair<std::string, std::string>>;

struct LaunchSpec {
  std::vector<std::string> command;
  int nprocs = 1;
  std::function<EnvVars(int rank)> env;
  bool tagOutput = false;  // prefix every output line with "[rank] "
  std::chrono::milliseconds grace{2000};
  bool keepGoing = false;      // ranks killed by a signal do not end the job
  std::vector<int> cpuOfRank;  // empty: every rank inherits the launcher's CPU affinity
  // Called once for each rank as it exits, whatever its status (a waitpid status), before
  // the supervisor acts on it; may be empty.
  std::function<void(int rank, int waitStatus)> onExit;
};

void blockLauncherSignals();
int superviseRanks(const LaunchSpec& spec);

// Where `nprocs` local ranks run with `collie run --bind MODE` ("auto" or "none"), given
// the launcher's `cpus`: empty (no binding) unless "auto" and the ranks outnumber the
// CPUs, then rank r on cpus[r % cpus.size()].
std::vector<int> bindRanks(const std::string& mode, int nprocs, const std::vector<int>& cpus);

// "SIGKILL (9)"-style text for a signal number.
std::string signalDescription(int sig);
// Finds `program` as execvp would; empty when it cannot be found or executed.
std::string findExecutable(const std::string& program);

}  // namespace collie::tools
