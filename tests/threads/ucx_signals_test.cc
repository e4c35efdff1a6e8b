// libcollie links UCX, whose libucs installs crash handlers when it is loaded. They
// must not stay in the user's program (transports/ucx/ucx_signals.cc): at main() no
// error signal is handled by libucs (the system's default, or a sanitizer's runtime in
// sanitized builds), a handler the program installs before creating communicators over
// ucx is still the one installed afterwards, and a crash prints nothing of UCX's.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collie/communicator.h"
#include "collie/store.h"
#include "support/rank_threads.h"

namespace collie {
namespace {

constexpr int kErrorSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};

void* handlerOf(int signum) {
  struct sigaction action {};
  EXPECT_EQ(sigaction(signum, nullptr, &action), 0);
  return (action.sa_flags & SA_SIGINFO) ? reinterpret_cast<void*>(action.sa_sigaction)
                                        : reinterpret_cast<void*>(action.sa_handler);
}

std::string ownerOf(void* handler) {
  if (handler == reinterpret_cast<void*>(SIG_DFL)) return "SIG_DFL";
  Dl_info info{};
  return dladdr(handler, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "?";
}

void programHandler(int) { _exit(42); }

// fault: a program linking libcollie (with UCX) installs its own SIGSEGV handler, or crashes | no
// error signal is libucs's at main(); the program's handler survives communicators over ucx; a
// crash prints nothing of UCX's | ucx_signals_test
TEST(UcxSignals, LoadingCollieLeavesTheErrorSignalsAlone) {
  ASSERT_EQ(std::getenv("UCX_HANDLE_ERRORS"), nullptr) << "run without UCX_HANDLE_ERRORS";
  ASSERT_EQ(std::getenv("UCX_ERROR_SIGNALS"), nullptr) << "run without UCX_ERROR_SIGNALS";
  for (int signum : kErrorSignals) {
    EXPECT_EQ(ownerOf(handlerOf(signum)).find("libucs"), std::string::npos) << strsignal(signum);
  }
}

TEST(UcxSignals, AProgramsHandlerSurvivesCommunicatorsOverUcx) {
  struct sigaction mine {};
  mine.sa_handler = programHandler;
  for (int signum : {SIGSEGV, SIGBUS}) ASSERT_EQ(sigaction(signum, &mine, nullptr), 0);
  std::shared_ptr<Store> store = makeInMemoryStore();
  UniqueId id = testing::testUniqueId();
  std::vector<Status> results(2);
  testing::onEveryRank(2, [&](int r) {
    Options options;
    options.store = store;
    options.transport = "ucx";
    options.config = {{"COLLIE_UCX_TLS", "tcp"}, {"COLLIE_UCX_NET_DEVICES", "lo"}};
    options.hostId = "ucx-signals-host-" + std::to_string(r);  // ucx between "hosts"
    Result<std::unique_ptr<Communicator>> comm = Communicator::create(id, r, 2, options);
    if (!comm.isOk()) {
      results[r] = comm.status();
      return;
    }
    float value = 1.0f + r, sum = 0;
    Result<Work> work = (*comm)->allReduce(&value, &sum, 1, DataType::kFloat32, ReduceOp::kSum);
    results[r] = work.isOk() ? work->wait() : work.status();
    if (results[r].isOk() && sum != 3.0f) results[r] = internalError("wrong sum");
  });
  for (const Status& result : results) ASSERT_TRUE(result.isOk()) << result.toString();
  for (int signum : {SIGSEGV, SIGBUS}) {
    EXPECT_EQ(handlerOf(signum), reinterpret_cast<void*>(programHandler)) << strsignal(signum);
  }
  for (int signum : {SIGILL, SIGFPE}) {
    EXPECT_EQ(ownerOf(handlerOf(signum)).find("libucs"), std::string::npos) << strsignal(signum);
  }
  struct sigaction system {};
  system.sa_handler = SIG_DFL;
  for (int signum : {SIGSEGV, SIGBUS}) sigaction(signum, &system, nullptr);
}

TEST(UcxSignals, ACrashPrintsNothingOfUcxs) {
  int pipeFds[2];
  ASSERT_EQ(pipe(pipeFds), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    dup2(pipeFds[1], STDERR_FILENO);
    dup2(pipeFds[1], STDOUT_FILENO);
    raise(SIGSEGV);
    _exit(0);
  }
  close(pipeFds[1]);
  std::string printed;
  char buffer[4096];
  ssize_t got;
  while ((got = read(pipeFds[0], buffer, sizeof(buffer))) > 0) printed.append(buffer, got);
  close(pipeFds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  // Killed by the signal (or, under a sanitizer, ended by its report).
  EXPECT_TRUE(WIFSIGNALED(status) || WEXITSTATUS(status) != 0) << "status " << status;
  // UCX's handler prints "Caught signal 11 (Segmentation fault ...)" and a backtrace.
  EXPECT_EQ(printed.find("Caught signal"), std::string::npos) << printed;
  EXPECT_EQ(printed.find("backtrace"), std::string::npos) << printed;
}

}  // namespace
}  // namespace collie
