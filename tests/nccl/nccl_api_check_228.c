/* nccl_api_check, part 2: the entry points NCCL 2.28 added, through NCCL's C API
 * only (built against collie's nccl.h and NVIDIA's, like part 1): all-to-all, gather,
 * scatter, windows, ncclGroupSimulateEnd, ncclCommInitRankScalable, ncclCommShrink,
 * ncclCommRevoke and the pnccl* profiling names. Every result is compared element by
 * element with its exact expected value. */
#include <string.h>

#include "nccl_check.h"

static int32_t cell(int from, int to, size_t i) {
  return (int32_t)(from * 1000003 + to * 7919 + (int)i);
}

static void checkAlltoAll(ncclComm_t comm, size_t count) {
  int32_t* send = xmalloc(count * nranks * sizeof(int32_t));
  int32_t* recv = xmalloc(count * nranks * sizeof(int32_t));
  for (int to = 0; to < nranks; ++to)
    for (size_t i = 0; i < count; ++i) send[to * count + i] = cell(rank, to, i);
  memset(recv, 0xff, count * nranks * sizeof(int32_t));
  NCCLCHECK(ncclAlltoAll(send, recv, count, ncclInt32, comm, NULL));
  for (int from = 0; from < nranks; ++from)
    for (size_t i = 0; i < count; ++i)
      if (recv[from * count + i] != cell(from, rank, i))
        FAIL("alltoall of %zu: block from %d [%zu] = %d, want %d", count, from, i,
             recv[from * count + i], cell(from, rank, i));
  /* Inside the caller's group, beside a collective. */
  float one = 1, sum = 0;
  memset(recv, 0, count * nranks * sizeof(int32_t));
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAlltoAll(send, recv, count, ncclInt32, comm, NULL));
  NCCLCHECK(ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, comm, NULL));
  NCCLCHECK(ncclGroupEnd());
  if (sum != (float)nranks) FAIL("all-reduce grouped with an alltoall: %g", sum);
  for (int from = 0; from < nranks; ++from)
    if (recv[from * count + count - 1] != cell(from, rank, count - 1))
      FAIL("grouped alltoall: block from %d is wrong", from);
  free(send);
  free(recv);
}

static void checkGatherScatter(ncclComm_t comm) {
  const size_t count = 4099;
  const int root = nranks - 1;
  int32_t* mine = xmalloc(count * sizeof(int32_t));
  int32_t* all = xmalloc(count * nranks * sizeof(int32_t));
  for (size_t i = 0; i < count; ++i) mine[i] = cell(rank, root, i);
  memset(all, 0, count * nranks * sizeof(int32_t));
  NCCLCHECK(ncclGather(mine, rank == root ? all : NULL, count, ncclInt32, root, comm, NULL));
  if (rank == root)
    for (int from = 0; from < nranks; ++from)
      for (size_t i = 0; i < count; ++i)
        if (all[from * count + i] != cell(from, root, i))
          FAIL("gather: block from %d [%zu] = %d", from, i, all[from * count + i]);
  /* In place on the root: its block already sits in recvbuff + root * count. */
  if (rank == root) memcpy(all + root * count, mine, count * sizeof(int32_t));
  NCCLCHECK(ncclGather(rank == root ? all + root * count : mine, all, count, ncclInt32, root, comm,
                       NULL));
  if (rank == root && all[root * count + 7] != cell(root, root, 7)) FAIL("gather in place");

  /* Scatter from rank 0: rank i gets block i. */
  for (int to = 0; to < nranks; ++to)
    for (size_t i = 0; i < count; ++i) all[to * count + i] = cell(0, to, i);
  memset(mine, 0, count * sizeof(int32_t));
  NCCLCHECK(ncclScatter(rank == 0 ? all : NULL, mine, count, ncclInt32, 0, comm, NULL));
  for (size_t i = 0; i < count; ++i)
    if (mine[i] != cell(0, rank, i)) FAIL("scatter: [%zu] = %d", i, mine[i]);
  ncclResult_t r = ncclScatter(all, mine, count, ncclInt32, nranks, comm, NULL);
  if (r != ncclInvalidArgument) FAIL("scatter from root %d returned %d", nranks, (int)r);
  /* All-to-all in place (sendbuff == recvbuff; host memory). Overlapping otherwise is
   * refused. */
  for (int to = 0; to < nranks; ++to)
    for (size_t i = 0; i < count; ++i) all[to * count + i] = cell(rank, to, i);
  NCCLCHECK(ncclAlltoAll(all, all, count, ncclInt32, comm, NULL));
  for (int from = 0; from < nranks; ++from)
    for (size_t i = 0; i < count; ++i)
      if (all[from * count + i] != cell(from, rank, i))
        FAIL("alltoall in place: block from %d [%zu] = %d, want %d", from, i,
             all[from * count + i], cell(from, rank, i));
  r = ncclAlltoAll(all, all + 1, 1, ncclInt32, comm, NULL);
  if (r != ncclInvalidArgument) FAIL("alltoall of overlapping buffers returned %d", (int)r);
  free(mine);
  free(all);
}

static void checkWindows(ncclComm_t comm) {
  const size_t count = (size_t)1 << 20; /* 4 MiB of floats: past the board, single copy */
  float* buf = NULL;
  NCCLCHECK(ncclMemAlloc((void**)&buf, count * sizeof(float)));
  ncclWindow_t win = NULL;
  NCCLCHECK(ncclCommWindowRegister(comm, buf, count * sizeof(float), &win,
                                   NCCL_WIN_COLL_SYMMETRIC));
  for (size_t i = 0; i < count; ++i) buf[i] = (float)((rank + 1) * (int)(i % 13));
  NCCLCHECK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, NULL));
  for (size_t i = 0; i < count; ++i) {
    float want = (float)(nranks * (nranks + 1) / 2 * (int)(i % 13));
    if (buf[i] != want) FAIL("all-reduce in a window: [%zu] = %g, want %g", i, buf[i], want);
  }
  NCCLCHECK(ncclCommWindowDeregister(comm, win));
  if (ncclCommWindowDeregister(comm, win) != ncclInvalidArgument)
    FAIL("a second deregistration of a window was accepted");
  if (ncclCommWindowRegister(comm, buf, 64, &win, 0x40) != ncclInvalidArgument)
    FAIL("unknown window flags were accepted");
  NCCLCHECK(ncclMemFree(buf));
  /* Plain host memory: a valid window, nothing to register. */
  void* plain = xmalloc(4096);
  NCCLCHECK(ncclCommWindowRegister(comm, plain, 4096, &win, NCCL_WIN_DEFAULT));
  NCCLCHECK(ncclCommWindowDeregister(comm, win));
  free(plain);
}

static void checkSimulate(ncclComm_t comm) {
  const size_t small = 256, large = (size_t)4 << 20;
  float* buf = xmalloc(large * sizeof(float));
  for (size_t i = 0; i < large; ++i) buf[i] = -7;
  float estimates[2];
  const size_t counts[2] = {small, large};
  for (int k = 0; k < 2; ++k) {
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    NCCLCHECK(ncclGroupStart());
    NCCLCHECK(ncclAllReduce(buf, buf, counts[k], ncclFloat, ncclSum, comm, NULL));
    NCCLCHECK(ncclGroupSimulateEnd(&sim));
    estimates[k] = sim.estimatedTime;
  }
  for (size_t i = 0; i < large; ++i)
    if (buf[i] != -7) FAIL("ncclGroupSimulateEnd ran the all-reduce: [%zu] = %g", i, buf[i]);
  if (!(estimates[0] > 0) || !(estimates[1] > estimates[0]))
    FAIL("estimated times %g us (1 KiB) and %g us (16 MiB): want 0 < small < large", estimates[0],
         estimates[1]);
  ncclSimInfo_t bad;
  memset(&bad, 0, sizeof(bad));
  NCCLCHECK(ncclGroupStart());
  if (ncclGroupSimulateEnd(&bad) != ncclInvalidArgument)
    FAIL("ncclGroupSimulateEnd accepted a simInfo without NCCL_SIM_INFO_INITIALIZER");
  NCCLCHECK(ncclGroupEnd());
  /* The profiling name reaches the same function; the group state is clean again. */
  float one = 1, sum = 0;
  NCCLCHECK(pncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, comm, NULL));
  if (sum != (float)nranks) FAIL("pncclAllReduce: %g", sum);
  free(buf);
}

static void checkScalableInit(const char* idPath) {
  char path[4096];
  ncclUniqueId ids[2];
  for (int i = 0; i < 2; ++i) {
    snprintf(path, sizeof(path), "%s.scalable%d", idPath, i);
    exchangeId(path, &ids[i]);
  }
  ncclComm_t comm = NULL;
  NCCLCHECK(ncclCommInitRankScalable(&comm, nranks, rank, 2, ids, NULL));
  int64_t mine = rank + 1, total = 0;
  NCCLCHECK(ncclAllReduce(&mine, &total, 1, ncclInt64, ncclSum, comm, NULL));
  if (total != (int64_t)nranks * (nranks + 1) / 2) FAIL("scalable init: sum %lld", (long long)total);
  NCCLCHECK(ncclCommDestroy(comm));
  if (ncclCommInitRankScalable(&comm, nranks, rank, 0, ids, NULL) != ncclInvalidArgument)
    FAIL("ncclCommInitRankScalable accepted nId 0");
}

/* The last rank leaves; the others shrink without it. */
static void checkShrink(ncclComm_t comm) {
  ncclComm_t dup = NULL;
  NCCLCHECK(ncclCommSplit(comm, 0, rank, &dup, NULL));
  int leaver = nranks - 1;
  ncclComm_t sub = NULL;
  if (ncclCommShrink(dup, &leaver, 1, &sub, NULL, 7) != ncclInvalidArgument)
    FAIL("ncclCommShrink accepted flags 7");
  if (rank != leaver) {
    NCCLCHECK(ncclCommShrink(dup, &leaver, 1, &sub, NULL, NCCL_SHRINK_DEFAULT));
    int size = 0, me = -1;
    NCCLCHECK(ncclCommCount(sub, &size));
    NCCLCHECK(ncclCommUserRank(sub, &me));
    if (size != nranks - 1 || me != rank) FAIL("shrink: rank %d of %d", me, size);
    int64_t mine = rank + 1, total = 0;
    NCCLCHECK(ncclAllReduce(&mine, &total, 1, ncclInt64, ncclSum, sub, NULL));
    if (total != (int64_t)(nranks - 1) * nranks / 2) FAIL("shrunk all-reduce: %lld", (long long)total);
    NCCLCHECK(ncclCommDestroy(sub));
  }
  NCCLCHECK(ncclCommDestroy(dup));
}

/* Every rank revokes a duplicate: operations on it are refused, its state reads
 * quiescent, and a shrink of it (excluding no one) makes a working communicator. */
static void checkRevoke(ncclComm_t comm) {
  ncclComm_t dup = NULL;
  NCCLCHECK(ncclCommSplit(comm, 0, rank, &dup, NULL));
  float one = 1, sum = 0;
  /* Every rank has finished creating it before any revokes it. */
  NCCLCHECK(ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, dup, NULL));
  if (ncclCommRevoke(dup, 3) != ncclInvalidArgument) FAIL("ncclCommRevoke accepted flags 3");
  NCCLCHECK(ncclCommRevoke(dup, NCCL_REVOKE_DEFAULT));
  ncclResult_t r = ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, dup, NULL);
  if (r != ncclInvalidUsage || strstr(ncclGetLastError(dup), "revoked") == NULL)
    FAIL("all-reduce on a revoked communicator returned %d: %s", (int)r, ncclGetLastError(dup));
  ncclResult_t state = ncclInternalError;
  NCCLCHECK(ncclCommGetAsyncError(dup, &state));
  if (state != ncclSuccess) FAIL("revoked communicator's state is %d, want ncclSuccess", (int)state);
  ncclComm_t fresh = NULL;
  NCCLCHECK(ncclCommShrink(dup, NULL, 0, &fresh, NULL, NCCL_SHRINK_DEFAULT));
  NCCLCHECK(ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, fresh, NULL));
  if (sum != (float)nranks) FAIL("all-reduce after revoke and shrink: %g", sum);
  NCCLCHECK(ncclCommDestroy(fresh));
  NCCLCHECK(ncclCommDestroy(dup));
}

void checkNccl228(ncclComm_t comm, const char* idPath) {
  checkAlltoAll(comm, 1);
  checkAlltoAll(comm, 100003);
  checkGatherScatter(comm);
  checkWindows(comm);
  checkSimulate(comm);
  checkScalableInit(idPath);
  checkShrink(comm);
  checkRevoke(comm);
}
