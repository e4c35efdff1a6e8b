// tcp_congestion_preload.so: LD_PRELOAD shim for benchmarks that sets TCP_CONGESTION
// (from COLLIE_PRELOAD_TCP_CONGESTION, e.g. "cubic") on every TCP socket a program
// creates. bench/ucx_vs_perftest.sh runs ucx_perftest under it so that perftest and
// collie's ucx transport (COLLIE_TCP_CONGESTION) send with the same congestion control
// where the namespaces cannot change the system default. Benchmark use only.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int socket(int domain, int type, int protocol) {
  static int (*real_socket)(int, int, int);
  if (real_socket == NULL) real_socket = (int (*)(int, int, int))dlsym(RTLD_NEXT, "socket");
  int fd = real_socket(domain, type, protocol);
  const char* algorithm = getenv("COLLIE_PRELOAD_TCP_CONGESTION");
  if (fd >= 0 && algorithm != NULL && algorithm[0] != '\0' &&
      (domain == AF_INET || domain == AF_INET6) && (type & 0xf) == SOCK_STREAM) {
    setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, algorithm, (socklen_t)strlen(algorithm));
  }
  return fd;
}
