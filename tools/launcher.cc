#include "tools/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace collie::tools {
namespace {

using SteadyClock = std::chrono::steady_clock;

sigset_t launcherSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  return set;
}

// One output stream of one rank when --tag-output is on.
struct Stream {
  int fd = -1;    // read end of the rank's pipe, -1 once closed
  int outFd = 1;  // where tagged lines go
  std::string partial;
};

struct Rank {
  pid_t pid = -1;
  bool running = false;
  int waitStatus = 0;  // from waitpid, once !running
  Stream out;
  Stream err;
};

// Everything the child needs, prepared before fork (the child may only call
// async-signal-safe functions: the launcher has a store server thread).
struct ExecPlan {
  std::string path;  // resolved before fork: execvpe's PATH search may allocate
  std::vector<std::string> envStrings;
  std::vector<char*> envp;
  std::vector<char*> argv;
  int cpu = -1;  // bind to this CPU before exec; -1: inherit
};

ExecPlan makePlan(const LaunchSpec& spec, int rank) {
  ExecPlan plan;
  plan.path = findExecutable(spec.command[0]);
  EnvVars extra = spec.env ? spec.env(rank) : EnvVars{};
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    std::string name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& [key, value] : extra) overridden = overridden || key == name;
    if (!overridden) plan.envStrings.push_back(std::move(entry));
  }
  for (const auto& [key, value] : extra) plan.envStrings.push_back(key + "=" + value);
  for (std::string& s : plan.envStrings) plan.envp.push_back(s.data());
  plan.envp.push_back(nullptr);
  for (const std::string& arg : spec.command) plan.argv.push_back(const_cast<char*>(arg.c_str()));
  plan.argv.push_back(nullptr);
  if (!spec.cpuOfRank.empty()) plan.cpu = spec.cpuOfRank[static_cast<size_t>(rank)];
  return plan;
}

[[noreturn]] void execChild(const ExecPlan& plan, int rank, pid_t parent, int outFd, int errFd) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  sigset_t none;
  sigemptyset(&none);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGCHLD, SIG_DFL);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (outFd >= 0) dup2(outFd, 1);
  if (errFd >= 0) dup2(errFd, 2);
  if (rank != 0) {
    int devNull = open("/dev/null", O_RDONLY);
    if (devNull >= 0) dup2(devNull, 0);
  }
  if (plan.cpu >= 0 && plan.cpu < CPU_SETSIZE) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(plan.cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
      static const char kBind[] = "collie run: binding a rank to its CPU failed; it runs unbound\n";
      ssize_t ignored = write(2, kBind, sizeof kBind - 1);
      (void)ignored;
    }
  }
  execve(plan.path.c_str(), plan.argv.data(), plan.envp.data());
  static const char kMsg[] = "collie run: exec failed\n";
  ssize_t ignored = write(2, kMsg, sizeof kMsg - 1);
  (void)ignored;
  _exit(127);
}

void writeAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// Reads what is available; writes complete lines with the rank's tag.
void pump(Stream& s, int rank, bool eof) {
  char buf[65536];
  ssize_t n = read(s.fd, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN) && !eof) return;
  std::string tag = "[" + std::to_string(rank) + "] ";
  if (n > 0) s.partial.append(buf, static_cast<size_t>(n));
  std::string lines;
  size_t start = 0;
  for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines += tag + s.partial.substr(start, nl + 1 - start);
  }
  s.partial.erase(0, start);
  if (n <= 0 || eof) {  // EOF or error: flush and close
    if (!s.partial.empty()) lines += tag + s.partial + "\n";
    s.partial.clear();
    close(s.fd);
    s.fd = -1;
  }
  writeAll(s.outFd, lines);
}

class Supervisor {
 public:
  explicit Supervisor(const LaunchSpec& spec) : spec_(spec), ranks_(spec.nprocs) {}
  int run();

 private:
  bool start();
  void reap();
  void onSignal(int sig);
  void failJob(int exitStatus);
  void report(size_t r, int status) const;
  int keepGoingStatus() const;
  void signalRunning(int sig);
  bool anyRunning() const;
  bool anyStreamOpen() const;

  const LaunchSpec& spec_;
  std::vector<Rank> ranks_;
  int exitStatus_ = 0;
  bool tearingDown_ = false;
  bool killed_ = false;
  SteadyClock::time_point killAt_{};
};

bool Supervisor::start() {
  pid_t self = getpid();
  for (int r = 0; r < spec_.nprocs; ++r) {
    ExecPlan plan = makePlan(spec_, r);
    int outPipe[2] = {-1, -1}, errPipe[2] = {-1, -1};
    if (spec_.tagOutput && (pipe2(outPipe, O_CLOEXEC) != 0 || pipe2(errPipe, O_CLOEXEC) != 0)) {
      std::fprintf(stderr, "collie run: pipe for rank %d failed: %s\n", r, std::strerror(errno));
      return false;
    }
    pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "collie run: starting rank %d failed: %s\n", r, std::strerror(errno));
      return false;
    }
    if (pid == 0) execChild(plan, r, self, outPipe[1], errPipe[1]);
    setpgid(pid, pid);  // also done by the child; whichever runs first wins the race
    ranks_[r].pid = pid;
    ranks_[r].running = true;
    if (spec_.tagOutput) {
      close(outPipe[1]);
      close(errPipe[1]);
      // Non-blocking reads: a grandchild may hold the pipe open after the rank exited.
      fcntl(outPipe[0], F_SETFL, O_NONBLOCK);
      fcntl(errPipe[0], F_SETFL, O_NONBLOCK);
      ranks_[r].out = {outPipe[0], 1, {}};
      ranks_[r].err = {errPipe[0], 2, {}};
    }
  }
  return true;
}

void Supervisor::signalRunning(int sig) {
  for (const Rank& rank : ranks_) {
    if (rank.running) kill(-rank.pid, sig);
  }
}

void Supervisor::failJob(int exitStatus) {
  if (exitStatus_ == 0) exitStatus_ = exitStatus;
  if (tearingDown_) return;
  tearingDown_ = true;
  signalRunning(SIGTERM);
  killAt_ = SteadyClock::now() + spec_.grace;
}

void Supervisor::report(size_t r, int status) const {
  if (WIFEXITED(status)) {
    std::fprintf(stderr, "collie run: rank %zu exited with status %d%s\n", r, WEXITSTATUS(status),
                 spec_.keepGoing ? "; --keep-going: the other ranks go on" : "");
  } else {
    std::fprintf(stderr, "collie run: rank %zu killed by signal %s%s\n", r,
                 signalDescription(WTERMSIG(status)).c_str(),
                 spec_.keepGoing ? "; --keep-going: the other ranks go on" : "");
  }
  std::fflush(stderr);
}

void Supervisor::reap() {
  for (size_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = ranks_[r];
    if (!rank.running) continue;
    int status = 0;
    pid_t got = waitpid(rank.pid, &status, WNOHANG);
    const bool lost = got < 0 && errno == ECHILD;
    if (lost) {
      // Reaped by someone else (a library thread's waitpid(-1)): its status is gone, so the
      // job cannot know that it succeeded; treat it as failed rather than wait forever.
      std::fprintf(stderr,
                   "collie run: rank %zu exited and its status was lost (reaped "
                   "outside collie run)\n",
                   r);
      status = 1 << 8;  // as exit(1)
    } else if (got != rank.pid) {
      continue;
    }
    rank.running = false;
    rank.waitStatus = status;
    if (spec_.onExit) spec_.onExit(static_cast<int>(r), status);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (!tearingDown_ && !lost) report(r, status);   // a lost status was reported above
    if (spec_.keepGoing && !tearingDown_) continue;  // judged by keepGoingStatus()
    failJob(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
}

// The job's status under --keep-going, with one summary line on stderr: ranks killed
// by a signal are tolerated, every other rank must have exited 0.
int Supervisor::keepGoingStatus() const {
  std::string killed, failed, ok;
  int status = 0;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    int s = ranks_[r].waitStatus;
    std::string& list = WIFSIGNALED(s) ? killed : (WEXITSTATUS(s) == 0 ? ok : failed);
    list += (list.empty() ? "" : ",") + std::to_string(r);
    if (WIFEXITED(s) && WEXITSTATUS(s) != 0 && status == 0) status = WEXITSTATUS(s);
  }
  if (killed.empty() && failed.empty()) return 0;
  if (ok.empty() && failed.empty()) status = 1;
  std::fprintf(stderr,
               "collie run: --keep-going: ranks [%s] were killed, ranks [%s] exited 0, ranks "
               "[%s] failed; job status %d\n",
               killed.c_str(), ok.c_str(), failed.c_str(), status);
  return status;
}

void Supervisor::onSignal(int sig) {
  if (sig == SIGCHLD) return reap();
  if (tearingDown_) {  // second interrupt: stop waiting
    signalRunning(SIGKILL);
    killed_ = true;
    return;
  }
  std::fprintf(stderr, "collie run: got %s, forwarding it to the ranks\n",
               signalDescription(sig).c_str());
  exitStatus_ = 128 + sig;
  tearingDown_ = true;
  signalRunning(sig);
  killAt_ = SteadyClock::now() + spec_.grace;
}

bool Supervisor::anyRunning() const {
  for (const Rank& rank : ranks_) {
    if (rank.running) return true;
  }
  return false;
}

bool Supervisor::anyStreamOpen() const {
  for (const Rank& rank : ranks_) {
    if (rank.out.fd >= 0 || rank.err.fd >= 0) return true;
  }
  return false;
}

int Supervisor::run() {
  sigset_t mask = launcherSignals();
  int sigFd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigFd < 0) {
    std::fprintf(stderr, "collie run: signalfd failed: %s\n", std::strerror(errno));
    return 1;
  }
  if (!start()) {
    failJob(1);
  }
  // Output may outlive the ranks (a grandchild holding the pipe): give it the grace
  // period after the last rank exited, then stop reading.
  SteadyClock::time_point drainUntil{};
  while (anyRunning() || anyStreamOpen()) {
    SteadyClock::time_point now = SteadyClock::now();
    if (tearingDown_ && !killed_ && anyRunning() && now >= killAt_) {
      for (size_t r = 0; r < ranks_.size(); ++r) {
        if (ranks_[r].running) {
          std::fprintf(stderr,
                       "collie run: rank %zu still running %lld ms after SIGTERM; "
                       "sending SIGKILL\n",
                       r, static_cast<long long>(spec_.grace.count()));
        }
      }
      signalRunning(SIGKILL);
      killed_ = true;
    }
    if (!anyRunning()) {
      if (drainUntil == SteadyClock::time_point{}) drainUntil = now + spec_.grace;
      if (now >= drainUntil) break;
    }
    std::vector<pollfd> fds = {{sigFd, POLLIN, 0}};
    std::vector<std::pair<Stream*, int>> streams;  // parallel to fds[1..]
    for (size_t r = 0; r < ranks_.size(); ++r) {
      for (Stream* s : {&ranks_[r].out, &ranks_[r].err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        streams.emplace_back(s, static_cast<int>(r));
      }
    }
    int ready = poll(fds.data(), fds.size(), 100);
    if (ready < 0 && errno != EINTR) break;
    if (ready > 0 && (fds[0].revents & POLLIN)) {
      signalfd_siginfo info;
      while (read(sigFd, &info, sizeof info) == sizeof info) {
        onSignal(static_cast<int>(info.ssi_signo));
      }
    }
    for (size_t i = 1; ready > 0 && i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      pump(*streams[i - 1].first, streams[i - 1].second, false);
    }
    // Every round, timeouts included: SIGCHLD coalesces, and a thread that a library
    // started before main (a tool injected into the launcher) does not block it, so the
    // kernel may deliver it there and the signalfd never sees it. Polling the pids is cheap.
    reap();
  }
  for (Rank& rank : ranks_) {
    for (Stream* s : {&rank.out, &rank.err}) {
      if (s->fd >= 0) pump(*s, static_cast<int>(&rank - ranks_.data()), true);
    }
  }
  close(sigFd);
  if (spec_.keepGoing && exitStatus_ == 0) return keepGoingStatus();
  return exitStatus_;
}

}  // namespace

std::vector<int> bindRanks(const std::string& mode, int nprocs, const std::vector<int>& cpus) {
  std::vector<int> bound;
  if (mode != "auto" || cpus.empty() || nprocs <= static_cast<int>(cpus.size())) return bound;
  for (int r = 0; r < nprocs; ++r) bound.push_back(cpus[static_cast<size_t>(r) % cpus.size()]);
  return bound;
}

void blockLauncherSignals() {
  // SIGCHLD ignored by whoever started the launcher (kept across exec) would have the
  // kernel reap the ranks at once, and waitpid would never give their status.
  signal(SIGCHLD, SIG_DFL);
  sigset_t mask = launcherSignals();
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
}

int superviseRanks(const LaunchSpec& spec) {
  if (spec.command.empty() || spec.nprocs < 1) return 2;
  blockLauncherSignals();
  Supervisor supervisor(spec);
  return supervisor.run();
}

std::string signalDescription(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  std::string name = abbrev != nullptr ? std::string("SIG") + abbrev : "signal";
  return name + " (" + std::to_string(sig) + ")";
}

std::string findExecutable(const std::string& program) {
  if (program.empty()) return "";
  if (program.find('/') != std::string::npos) {
    return access(program.c_str(), X_OK) == 0 ? program : "";
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

}  // namespace collie::tools
