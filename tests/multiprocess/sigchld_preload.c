// Preloaded into `collie run` by launcher_sigchld_test.sh to take its ranks' exits away
// from it, as a tool injected into a process can (compute-sanitizer --target-processes
// all did on an H200: the launcher waited forever on ranks that had exited).
//  - always: signalfd() is given the caller's mask without SIGCHLD, so the launcher's
//    signalfd never reports a child's exit (deterministically; a tool's thread that
//    takes SIGCHLD does so only when it wins the race for it);
//  - SIGCHLD_PRELOAD_STEAL=1: waitpid() first reaps the child itself and drops its
//    status, as another thread of the process calling waitpid(-1) just before would,
//    so the caller finds no such child (ECHILD).
// No threads of its own: it works under the sanitizers' runtimes too.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <sys/types.h>
#include <sys/wait.h>

int signalfd(int fd, const sigset_t* mask, int flags) {
  typedef int (*SignalfdFn)(int, const sigset_t*, int);
  SignalfdFn real = (SignalfdFn)dlsym(RTLD_NEXT, "signalfd");
  sigset_t without = *mask;
  sigdelset(&without, SIGCHLD);
  return real(fd, &without, flags);
}

pid_t waitpid(pid_t pid, int* status, int options) {
  typedef pid_t (*WaitpidFn)(pid_t, int*, int);
  WaitpidFn real = (WaitpidFn)dlsym(RTLD_NEXT, "waitpid");
  const char* steal = getenv("SIGCHLD_PRELOAD_STEAL");
  if (steal != NULL && steal[0] == '1') real(pid, NULL, options);
  return real(pid, status, options);
}
