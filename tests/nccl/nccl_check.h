/* Shared by the parts of nccl_api_check (C, NCCL's API only): the rank, failure
 * reporting and small helpers. */
#ifndef COLLIE_TESTS_NCCL_CHECK_H_
#define COLLIE_TESTS_NCCL_CHECK_H_

#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

extern int rank, nranks;

#define FAIL(...)                                              \
  do {                                                         \
    fprintf(stderr, "nccl_api_check rank %d: FAILED: ", rank); \
    fprintf(stderr, __VA_ARGS__);                              \
    fprintf(stderr, "\n");                                     \
    exit(1);                                                   \
  } while (0)

#define NCCLCHECK(call)                                                       \
  do {                                                                        \
    ncclResult_t r_ = (call);                                                 \
    if (r_ != ncclSuccess)                                                    \
      FAIL("%s returned %d (%s): %s", #call, (int)r_, ncclGetErrorString(r_), \
           ncclGetLastError(NULL));                                           \
  } while (0)

static inline double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void* xmalloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) FAIL("out of memory");
  return p;
}

/* Rank 0 makes an ncclUniqueId and publishes it in `path`; the others read it. */
void exchangeId(const char* path, ncclUniqueId* id);

/* The entry points NCCL 2.28 added (nccl_api_check_228.c). `idPath` names the file
 * the job's id went through; more ids are published next to it. */
void checkNccl228(ncclComm_t comm, const char* idPath);

/* The entry points after NCCL 2.28 that newer programs import (nccl_api_check_229.c). */
void checkNccl229(ncclComm_t comm);

#endif /* COLLIE_TESTS_NCCL_CHECK_H_ */
