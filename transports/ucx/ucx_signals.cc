// Keeps UCX's error-signal handlers out of the programs that load libcollie.
//
// libucs installs handlers for SIGSEGV, SIGBUS, SIGILL and SIGFPE when it is loaded
// (UCX_HANDLE_ERRORS=bt, UCX_ERROR_SIGNALS): a crash anywhere in a program that links
// libcollie then prints UCX's backtrace instead of whatever the program, Python's
// faulthandler or the system's core dump would do. A communication library must not
// take over the host program's crash handling unless asked, so when libcollie is
// loaded (after libucs, its dependency) this hands each of those signals back to the
// handler that was there before UCX (ucs_debug_disable_signal restores it). Variables
// the user set win: with UCX_HANDLE_ERRORS or UCX_ERROR_SIGNALS in the environment,
// UCX's handlers stay.
//
// Thread safety: runs once, from the dynamic loader, before any collie call.
#include <dlfcn.h>
#include <signal.h>
#include <ucs/debug/debug.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace collie::ucx {
namespace {

bool installedByUcs(int signum) {
  struct sigaction action {};
  if (sigaction(signum, nullptr, &action) != 0) return false;
  void* handler = (action.sa_flags & SA_SIGINFO) ? reinterpret_cast<void*>(action.sa_sigaction)
                                                 : reinterpret_cast<void*>(action.sa_handler);
  if (handler == reinterpret_cast<void*>(SIG_DFL) || handler == reinterpret_cast<void*>(SIG_IGN)) {
    return false;
  }
  Dl_info info{};
  return dladdr(handler, &info) != 0 && info.dli_fname != nullptr &&
         std::strstr(info.dli_fname, "libucs") != nullptr;
}

[[gnu::constructor]] void releaseUcxErrorSignals() {
  if (std::getenv("UCX_HANDLE_ERRORS") != nullptr || std::getenv("UCX_ERROR_SIGNALS") != nullptr) {
    return;
  }
  for (int signum : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) {
    if (installedByUcs(signum)) ucs_debug_disable_signal(signum);
  }
}

}  // namespace
}  // namespace collie::ucx
