// Preloaded into `collie run` by launcher_sigchld_test.sh to take its SIGCHLD away, as a
// tool injected into a process can (compute-sanitizer --target-processes all did on an
// H200: the launcher waited forever on ranks that had exited).
//  - always: signalfd() is given the caller's mask without SIGCHLD, so the launcher's
//    signalfd never reports a child's exit (deterministically; a tool's thread that
//    takes SIGCHLD does so only when it wins the race for it);
//  - FOREIGN_THREAD_REAPS=1: a thread started before main also reaps every child of the
//    process (waitpid(-1)), so the launcher's own waitpid finds none.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

int signalfd(int fd, const sigset_t* mask, int flags) {
  typedef int (*SignalfdFn)(int, const sigset_t*, int);
  SignalfdFn real = (SignalfdFn)dlsym(RTLD_NEXT, "signalfd");
  sigset_t without = *mask;
  sigdelset(&without, SIGCHLD);
  return real(fd, &without, flags);
}

static void* reaperThread(void* unused) {
  (void)unused;
  for (;;) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    usleep(1000);
  }
  return NULL;
}

__attribute__((constructor)) static void startReaper(void) {
  const char* reaps = getenv("FOREIGN_THREAD_REAPS");
  if (reaps == NULL || reaps[0] != '1') return;
  pthread_t thread;
  if (pthread_create(&thread, NULL, reaperThread, NULL) == 0) pthread_detach(thread);
}
