/* nccl_api_check: a program written only against NCCL's C API (no MPI, no collie
 * header), built twice: against collie's nccl.h and against NVIDIA's. One rank per
 * process, started by `collie run -n N -- nccl_api_check <id-file> [fault]`; rank and
 * size come from COLLIE_RANK / COLLIE_WORLD_SIZE, rank 0's ncclUniqueId reaches the
 * others through <id-file>. Host buffers, NULL stream. Every collective's result is
 * checked element by element against the exact expected value; any difference or
 * error exits non-zero naming what failed.
 *
 * With "fault", the last rank leaves after the first all-reduce; the others must see
 * their next all-reduce fail, ncclCommGetAsyncError report ncclRemoteError, and
 * ncclCommAbort return promptly. */
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl_check.h"

int rank = -1, nranks = 0;

void exchangeId(const char* path, ncclUniqueId* id) {
  if (rank == 0) {
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    NCCLCHECK(ncclGetUniqueId(id));
    FILE* f = fopen(tmp, "wb");
    if (!f || fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f) != 0) FAIL("cannot write %s", tmp);
    if (rename(tmp, path) != 0) FAIL("cannot rename %s", tmp);
    return;
  }
  double deadline = now() + 60;
  for (;;) {
    FILE* f = fopen(path, "rb");
    if (f) {
      size_t got = fread(id, sizeof(*id), 1, f);
      fclose(f);
      if (got == 1) return;
    }
    if (now() > deadline) FAIL("rank 0 did not publish the id in %s", path);
    usleep(10000);
  }
}

/* bfloat16 of a small integer (exact): the high half of the float's bits. */
static uint16_t bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  return (uint16_t)(bits >> 16);
}

static void checkAllReduce(ncclComm_t comm, size_t count) {
  float* send = xmalloc(count * sizeof(float));
  float* recv = xmalloc(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) send[i] = (float)((rank + 1) * (int)(i % 7));
  NCCLCHECK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, NULL));
  for (size_t i = 0; i < count; ++i) {
    float want = (float)(nranks * (nranks + 1) / 2 * (int)(i % 7));
    if (recv[i] != want)
      FAIL("allreduce float sum count %zu: [%zu] = %g, want %g", count, i, recv[i], want);
  }
  /* In place, int32 max. */
  int32_t* ints = xmalloc(count * sizeof(int32_t));
  for (size_t i = 0; i < count; ++i) ints[i] = (int32_t)((rank * 31 + (int)i) % 1000) - 500;
  NCCLCHECK(ncclAllReduce(ints, ints, count, ncclInt32, ncclMax, comm, NULL));
  for (size_t i = 0; i < count; ++i) {
    int32_t want = INT32_MIN;
    for (int r = 0; r < nranks; ++r) {
      int32_t v = (int32_t)((r * 31 + (int)i) % 1000) - 500;
      if (v > want) want = v;
    }
    if (ints[i] != want)
      FAIL("allreduce int32 max count %zu: [%zu] = %d, want %d", count, i, ints[i], want);
  }
  free(send);
  free(recv);
  free(ints);
}

static void checkTypes(ncclComm_t comm) {
  const size_t count = 4099;
  /* bfloat16 sum of small integers: exact. */
  uint16_t* b = xmalloc(count * 2);
  for (size_t i = 0; i < count; ++i) b[i] = bf16((float)((rank + 1) * (int)(i % 3)));
  NCCLCHECK(ncclAllReduce(b, b, count, ncclBfloat16, ncclSum, comm, NULL));
  for (size_t i = 0; i < count; ++i) {
    uint16_t want = bf16((float)(nranks * (nranks + 1) / 2 * (int)(i % 3)));
    if (b[i] != want) FAIL("allreduce bfloat16 sum: [%zu] = 0x%04x, want 0x%04x", i, b[i], want);
  }
  /* double avg. */
  double* d = xmalloc(count * sizeof(double));
  for (size_t i = 0; i < count; ++i) d[i] = (double)(nranks * (rank + 1) * (int)(i % 5));
  NCCLCHECK(ncclAllReduce(d, d, count, ncclDouble, ncclAvg, comm, NULL));
  for (size_t i = 0; i < count; ++i) {
    double want = (double)((int)(i % 5) * nranks * (nranks + 1) / 2);
    if (d[i] != want) FAIL("allreduce double avg: [%zu] = %g, want %g", i, d[i], want);
  }
  /* int64 prod. */
  int64_t* l = xmalloc(count * sizeof(int64_t));
  for (size_t i = 0; i < count; ++i) l[i] = (int64_t)(i % 4) + rank;
  NCCLCHECK(ncclAllReduce(l, l, count, ncclInt64, ncclProd, comm, NULL));
  for (size_t i = 0; i < count; ++i) {
    int64_t want = 1;
    for (int r = 0; r < nranks; ++r) want *= (int64_t)(i % 4) + r;
    if (l[i] != want)
      FAIL("allreduce int64 prod: [%zu] = %lld, want %lld", i, (long long)l[i], (long long)want);
  }
  free(b);
  free(d);
  free(l);
}

static void checkRooted(ncclComm_t comm) {
  const size_t count = 300001;
  int root = nranks - 1;
  int8_t* buf = xmalloc(count);
  for (size_t i = 0; i < count; ++i) buf[i] = rank == root ? (int8_t)(i * 7 + 3) : 0;
  NCCLCHECK(ncclBcast(buf, count, ncclChar, root, comm, NULL));
  for (size_t i = 0; i < count; ++i)
    if (buf[i] != (int8_t)(i * 7 + 3)) FAIL("bcast: [%zu] = %d", i, buf[i]);

  float* send = xmalloc(count * sizeof(float));
  float* recv = xmalloc(count * sizeof(float));
  for (size_t i = 0; i < count; ++i) send[i] = rank == 0 ? (float)(i % 1000) : -1.0f;
  memset(recv, 0, count * sizeof(float));
  NCCLCHECK(ncclBroadcast(send, recv, count, ncclFloat32, 0, comm, NULL));
  for (size_t i = 0; i < count; ++i)
    if (recv[i] != (float)(i % 1000)) FAIL("broadcast: [%zu] = %g", i, recv[i]);

  uint8_t* u = xmalloc(count);
  uint8_t* out = xmalloc(count);
  for (size_t i = 0; i < count; ++i) u[i] = (uint8_t)((i + rank) % 50);
  memset(out, 0xAB, count);
  NCCLCHECK(ncclReduce(u, out, count, ncclUint8, ncclSum, 1 % nranks, comm, NULL));
  if (rank == 1 % nranks) {
    for (size_t i = 0; i < count; ++i) {
      unsigned want = 0;
      for (int r = 0; r < nranks; ++r) want += (unsigned)((i + r) % 50);
      if (out[i] != (uint8_t)want) FAIL("reduce uint8 sum: [%zu] = %u, want %u", i, out[i], want);
    }
  } else {
    for (size_t i = 0; i < count; ++i)
      if (out[i] != 0xAB) FAIL("reduce wrote recvbuff on non-root rank at [%zu]", i);
  }
  free(buf);
  free(send);
  free(recv);
  free(u);
  free(out);
}

static void checkGatherScatter(ncclComm_t comm) {
  const size_t count = 1001;
  int32_t* send = xmalloc(count * sizeof(int32_t));
  int32_t* all = xmalloc(count * nranks * sizeof(int32_t));
  for (size_t i = 0; i < count; ++i) send[i] = rank * 100000 + (int32_t)i;
  NCCLCHECK(ncclAllGather(send, all, count, ncclInt, comm, NULL));
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < count; ++i)
      if (all[r * count + i] != r * 100000 + (int32_t)i) FAIL("allgather: block %d [%zu]", r, i);

  const size_t recvcount = 777;
  float* in = xmalloc(recvcount * nranks * sizeof(float));
  float* out = xmalloc(recvcount * sizeof(float));
  for (size_t i = 0; i < recvcount * nranks; ++i) in[i] = (float)((rank + 1) * (int)(i % 11));
  NCCLCHECK(ncclReduceScatter(in, out, recvcount, ncclFloat, ncclSum, comm, NULL));
  for (size_t i = 0; i < recvcount; ++i) {
    float want = (float)(nranks * (nranks + 1) / 2 * (int)((rank * recvcount + i) % 11));
    if (out[i] != want) FAIL("reducescatter: [%zu] = %g, want %g", i, out[i], want);
  }
  /* PreMulSum: sum over ranks of 0.5 * (2 * (rank + 1) * k). */
  float half = 0.5f;
  ncclRedOp_t premul;
  NCCLCHECK(ncclRedOpCreatePreMulSum(&premul, &half, ncclFloat, ncclScalarHostImmediate, comm));
  for (size_t i = 0; i < recvcount * nranks; ++i) in[i] = (float)(2 * (rank + 1) * (int)(i % 11));
  NCCLCHECK(ncclReduceScatter(in, out, recvcount, ncclFloat, premul, comm, NULL));
  for (size_t i = 0; i < recvcount; ++i) {
    float want = (float)(nranks * (nranks + 1) / 2 * (int)((rank * recvcount + i) % 11));
    if (out[i] != want) FAIL("reducescatter premulsum: [%zu] = %g, want %g", i, out[i], want);
  }
  NCCLCHECK(ncclAllReduce(in, in, recvcount, ncclFloat, premul, comm, NULL));
  for (size_t i = 0; i < recvcount; ++i) {
    float want = (float)(nranks * (nranks + 1) / 2 * (int)(i % 11));
    if (in[i] != want) FAIL("allreduce premulsum: [%zu] = %g, want %g", i, in[i], want);
  }
  NCCLCHECK(ncclRedOpDestroy(premul, comm));
  /* PreMulSum with each rank's own scalar (rank + 1) on an integer type, reduced to the
   * last rank: sum over ranks of (rank + 1) * k. */
  {
    int32_t factor = rank + 1;
    int32_t* iin = xmalloc(recvcount * sizeof(int32_t));
    int32_t* iout = xmalloc(recvcount * sizeof(int32_t));
    for (size_t i = 0; i < recvcount; ++i) {
      iin[i] = (int32_t)(i % 7);
      iout[i] = -1;
    }
    NCCLCHECK(ncclRedOpCreatePreMulSum(&premul, &factor, ncclInt32, ncclScalarHostImmediate, comm));
    NCCLCHECK(ncclReduce(iin, iout, recvcount, ncclInt32, premul, nranks - 1, comm, NULL));
    for (size_t i = 0; i < recvcount; ++i) {
      int32_t want = rank == nranks - 1 ? (int32_t)(nranks * (nranks + 1) / 2 * (int)(i % 7)) : -1;
      if (iout[i] != want) FAIL("reduce premulsum int32: [%zu] = %d, want %d", i, iout[i], want);
      if (iin[i] != (int32_t)(i % 7)) FAIL("reduce premulsum int32 changed its input at %zu", i);
    }
    NCCLCHECK(ncclRedOpDestroy(premul, comm));
    free(iin);
    free(iout);
  }
  free(send);
  free(all);
  free(in);
  free(out);
}

static int32_t p2pValue(int from, int to, size_t i) {
  return (int32_t)(from * 1000003 + to * 7919 + (int)i);
}

static void checkPointToPoint(ncclComm_t comm) {
  /* Every rank sends a large message (bigger than any FIFO) to every rank, itself
   * included, and receives from every rank, all in one group with sends listed
   * first: must not deadlock. */
  const size_t count = (size_t)3 << 20; /* 12 MiB per message */
  int32_t** sendb = xmalloc(nranks * sizeof(int32_t*));
  int32_t** recvb = xmalloc(nranks * sizeof(int32_t*));
  for (int p = 0; p < nranks; ++p) {
    sendb[p] = xmalloc(count * sizeof(int32_t));
    recvb[p] = xmalloc(count * sizeof(int32_t));
    for (size_t i = 0; i < count; ++i) sendb[p][i] = p2pValue(rank, p, i);
    memset(recvb[p], 0, count * sizeof(int32_t));
  }
  NCCLCHECK(ncclGroupStart());
  for (int p = 0; p < nranks; ++p) NCCLCHECK(ncclSend(sendb[p], count, ncclInt32, p, comm, NULL));
  for (int p = 0; p < nranks; ++p) NCCLCHECK(ncclRecv(recvb[p], count, ncclInt32, p, comm, NULL));
  NCCLCHECK(ncclGroupEnd());
  for (int p = 0; p < nranks; ++p)
    for (size_t i = 0; i < count; ++i)
      if (recvb[p][i] != p2pValue(p, rank, i)) FAIL("group send/recv from %d: [%zu]", p, i);

  /* Ungrouped send/recv around a ring: even ranks send first, odd ranks receive first. */
  if (nranks > 1) {
    const size_t n = 100003;
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    if (rank % 2 == 0) {
      NCCLCHECK(ncclSend(sendb[next], n, ncclInt32, next, comm, NULL));
      NCCLCHECK(ncclRecv(recvb[prev], n, ncclInt32, prev, comm, NULL));
    } else {
      NCCLCHECK(ncclRecv(recvb[prev], n, ncclInt32, prev, comm, NULL));
      NCCLCHECK(ncclSend(sendb[next], n, ncclInt32, next, comm, NULL));
    }
    for (size_t i = 0; i < n; ++i)
      if (recvb[prev][i] != p2pValue(prev, rank, i)) FAIL("ring send/recv from %d: [%zu]", prev, i);
  }

  /* A group that mixes collectives and point-to-point. */
  float x = (float)rank, sum = -1;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(&x, &sum, 1, ncclFloat, ncclSum, comm, NULL));
  if (nranks > 1) {
    NCCLCHECK(ncclRecv(recvb[0], 5, ncclInt32, (rank + nranks - 1) % nranks, comm, NULL));
    NCCLCHECK(ncclSend(sendb[(rank + 1) % nranks], 5, ncclInt32, (rank + 1) % nranks, comm, NULL));
  }
  NCCLCHECK(ncclGroupEnd());
  if (sum != (float)(nranks * (nranks - 1) / 2)) FAIL("grouped allreduce: %g", sum);
  for (int p = 0; p < nranks; ++p) {
    free(sendb[p]);
    free(recvb[p]);
  }
  free(sendb);
  free(recvb);
}

static void checkSplit(ncclComm_t comm) {
  /* color = parity, key = -rank: the new ranks run in reverse order. */
  ncclComm_t sub = NULL;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  NCCLCHECK(ncclCommSplit(comm, rank % 2, -rank, &sub, &config));
  if (sub == NULL) FAIL("ncclCommSplit gave no communicator");
  int subSize = 0, subRank = -1;
  NCCLCHECK(ncclCommCount(sub, &subSize));
  NCCLCHECK(ncclCommUserRank(sub, &subRank));
  int wantSize = 0, wantRank = 0;
  for (int r = rank % 2; r < nranks; r += 2) {
    ++wantSize;
    if (r > rank) ++wantRank;
  }
  if (subSize != wantSize || subRank != wantRank)
    FAIL("split: rank %d of %d, want %d of %d", subRank, subSize, wantRank, wantSize);
  int64_t mine = rank, total = -1, want = 0;
  for (int r = rank % 2; r < nranks; r += 2) want += r;
  NCCLCHECK(ncclAllReduce(&mine, &total, 1, ncclInt64, ncclSum, sub, NULL));
  if (total != want)
    FAIL("allreduce on split communicator: %lld, want %lld", (long long)total, (long long)want);
  int32_t* all = xmalloc(subSize * sizeof(int32_t));
  int32_t me = rank;
  NCCLCHECK(ncclAllGather(&me, all, 1, ncclInt32, sub, NULL));
  for (int i = 0; i < subSize; ++i) {
    /* sub rank i holds the i-th largest parent rank of this parity */
    if (i > 0 && all[i] >= all[i - 1]) FAIL("split order: sub ranks not in descending parent rank");
    if (all[i] % 2 != rank % 2) FAIL("split: rank of the other color in the communicator");
  }
  free(all);
  NCCLCHECK(ncclCommDestroy(sub));

  /* Rank 0 opts out with NCCL_SPLIT_NOCOLOR. */
  ncclComm_t rest = NULL;
  NCCLCHECK(ncclCommSplit(comm, rank == 0 ? NCCL_SPLIT_NOCOLOR : 7, 0, &rest, NULL));
  if (rank == 0) {
    if (rest != NULL) FAIL("NCCL_SPLIT_NOCOLOR gave a communicator");
  } else {
    int size = 0;
    NCCLCHECK(ncclCommCount(rest, &size));
    if (size != nranks - 1) FAIL("split without rank 0 has %d ranks", size);
    float one = 1, got = 0;
    NCCLCHECK(ncclAllReduce(&one, &got, 1, ncclFloat, ncclSum, rest, NULL));
    if (got != (float)(nranks - 1)) FAIL("allreduce without rank 0: %g", got);
    NCCLCHECK(ncclCommDestroy(rest));
  }
}

static void checkErrors(ncclComm_t comm) {
  float x = 0;
  ncclResult_t r = ncclAllReduce(&x, &x, 1, (ncclDataType_t)99, ncclSum, comm, NULL);
  if (r != ncclInvalidArgument) FAIL("bad datatype returned %d, want ncclInvalidArgument", (int)r);
  if (strlen(ncclGetLastError(comm)) == 0) FAIL("ncclGetLastError is empty after an error");
  r = ncclAllReduce(&x, &x, 1, ncclFloat, (ncclRedOp_t)1234, comm, NULL);
  if (r != ncclInvalidArgument) FAIL("bad op returned %d, want ncclInvalidArgument", (int)r);
  r = ncclGroupEnd();
  if (r != ncclInvalidUsage) FAIL("ncclGroupEnd without start returned %d", (int)r);
  if (ncclGetErrorString(ncclRemoteError) == NULL) FAIL("no error string");
  ncclResult_t async = ncclInternalError;
  NCCLCHECK(ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) FAIL("healthy communicator reports async error %d", (int)async);
  void* mem = NULL;
  void* handle = NULL;
  NCCLCHECK(ncclMemAlloc(&mem, 1 << 20));
  NCCLCHECK(ncclCommRegister(comm, mem, 1 << 20, &handle));
  NCCLCHECK(ncclAllReduce(mem, mem, (1 << 20) / 4, ncclFloat, ncclSum, comm, NULL));
  NCCLCHECK(ncclCommDeregister(comm, handle));
  NCCLCHECK(ncclMemFree(mem));
}

/* A freed handle: a second destroy or abort, and any call on it, are refused. */
// fault: ncclCommDestroy twice, ncclCommAbort after destroy, or a call on a destroyed
// communicator | ncclInvalidArgument naming the handle "not a live communicator", nothing freed
// twice (before: segfault, a double delete) | nccl_api_collie_n2
static void checkStaleHandles(ncclComm_t comm) {
  ncclComm_t dup = NULL;
  NCCLCHECK(ncclCommSplit(comm, 0, rank, &dup, NULL));
  NCCLCHECK(ncclCommDestroy(dup));
  ncclResult_t r = ncclCommDestroy(dup);
  if (r != ncclInvalidArgument) FAIL("second ncclCommDestroy returned %d", (int)r);
  if (strstr(ncclGetLastError(NULL), "not a live communicator") == NULL)
    FAIL("second destroy's error does not say why: %s", ncclGetLastError(NULL));
  int count = 0;
  r = ncclCommCount(dup, &count);
  if (r != ncclInvalidArgument) FAIL("ncclCommCount on a destroyed comm returned %d", (int)r);
  float one = 1, sum = 0;
  r = ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, dup, NULL);
  if (r != ncclInvalidArgument) FAIL("ncclAllReduce on a destroyed comm returned %d", (int)r);
  ncclResult_t async = ncclSuccess;
  r = ncclCommGetAsyncError(dup, &async);
  if (r != ncclInvalidArgument) FAIL("ncclCommGetAsyncError on a destroyed comm: %d", (int)r);
  r = ncclCommAbort(dup);
  if (r != ncclInvalidArgument) FAIL("ncclCommAbort after destroy returned %d", (int)r);
  /* The live communicator is untouched. */
  NCCLCHECK(ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, comm, NULL));
  if (sum != (float)nranks) FAIL("all-reduce after the stale-handle calls: %g", sum);
}

/* Partly overlapping buffers are refused on the calling rank before anything is sent. */
// fault: ncclAllReduce/ncclReduceScatter/ncclAllGather with send and recv partly overlapping |
// ncclInvalidArgument naming both ranges on every rank, nothing sent (before: success with
// thousands of wrong elements) | nccl_api_collie_n2
static void checkOverlapRefused(ncclComm_t comm) {
  const size_t count = 65536;
  float* buf = calloc(count * (size_t)nranks + 8, sizeof(float));
  if (buf == NULL) FAIL("out of memory");
  ncclResult_t r = ncclAllReduce(buf, buf + 1, count, ncclFloat, ncclSum, comm, NULL);
  if (r != ncclInvalidArgument) FAIL("overlapping ncclAllReduce returned %d", (int)r);
  if (strstr(ncclGetLastError(NULL), "overlap") == NULL)
    FAIL("overlap error does not say why: %s", ncclGetLastError(NULL));
  r = ncclReduceScatter(buf, buf + 1, count, ncclFloat, ncclSum, comm, NULL);
  if (r != ncclInvalidArgument) FAIL("overlapping ncclReduceScatter returned %d", (int)r);
  r = ncclAllGather(buf + 1, buf, count, ncclFloat, comm, NULL);
  if (r != ncclInvalidArgument) FAIL("overlapping ncclAllGather returned %d", (int)r);
  free(buf);
  checkAllReduce(comm, 1000); /* nothing was sent: the next collective matches */
}

/* Communicator lifetimes inside a group: destroy is refused (as NCCL does) and the
   group still runs; abort drops the aborted communicator's grouped calls. */
// fault: ncclCommDestroy, or ncclCommAbort, inside ncclGroupStart/ncclGroupEnd | destroy:
// ncclInvalidUsage and the group still runs; abort: its grouped calls are dropped (before:
// segfault) | nccl_api_collie_n2
static void checkGroupLifetimes(ncclComm_t comm) {
  float one = 1, sum = 0;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, comm, NULL));
  ncclResult_t r = ncclCommDestroy(comm);
  if (r != ncclInvalidUsage) FAIL("ncclCommDestroy inside a group returned %d", (int)r);
  if (strstr(ncclGetLastError(comm), "ncclGroupEnd") == NULL)
    FAIL("destroy-in-group error does not say what to do: %s", ncclGetLastError(comm));
  NCCLCHECK(ncclGroupEnd());
  if (sum != (float)nranks) FAIL("grouped all-reduce after a refused destroy: %g", sum);

  ncclComm_t dup = NULL;
  NCCLCHECK(ncclCommSplit(comm, 0, rank, &dup, NULL));
  float dupSum = -1;
  sum = 0;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(&one, &dupSum, 1, ncclFloat, ncclSum, dup, NULL));
  NCCLCHECK(ncclAllReduce(&one, &sum, 1, ncclFloat, ncclSum, comm, NULL));
  NCCLCHECK(ncclCommAbort(dup));
  NCCLCHECK(ncclGroupEnd());
  if (sum != (float)nranks) FAIL("grouped all-reduce beside an aborted communicator: %g", sum);
  if (dupSum != -1) FAIL("the aborted communicator's grouped all-reduce ran");
}

// fault: a rank leaves an NCCL-API job without a word | ncclRemoteError from the call and
// ncclCommGetAsyncError; ncclCommAbort returns at once | nccl_api_fault_n3
static int faultRun(ncclComm_t comm) {
  float x = 1, y = 0;
  NCCLCHECK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL));
  if (rank == nranks - 1) _exit(0); /* leaves without a word */
  ncclResult_t r = ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, NULL);
  if (r == ncclSuccess) FAIL("all-reduce with a dead peer succeeded");
  ncclResult_t async = ncclSuccess;
  NCCLCHECK(ncclCommGetAsyncError(comm, &async));
  if (async != ncclRemoteError)
    FAIL("async error %d after a peer died, want ncclRemoteError (%s)", (int)async,
         ncclGetLastError(comm));
  double start = now();
  NCCLCHECK(ncclCommAbort(comm));
  if (now() - start > 5) FAIL("ncclCommAbort took %.1f s", now() - start);
  printf("nccl_api_check rank %d: fault run OK (%s)\n", rank, ncclGetErrorString(r));
  return 0;
}

/* One thread drives every rank of a communicator (ncclCommInitAll, as single-process
 * programs do): a group of all-reduces over all of them must complete, small ones
 * included (which run on the issuing thread and wait there for their peers). */
static void checkSingleThreadGroup(void) {
  enum { kComms = 3 };
  ncclComm_t comms[kComms];
  NCCLCHECK(ncclCommInitAll(comms, kComms, NULL));
  const size_t counts[] = {8, ((size_t)1 << 18) + 5};
  for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); ++c) {
    const size_t count = counts[c];
    float* bufs[kComms];
    for (int i = 0; i < kComms; ++i) {
      bufs[i] = (float*)xmalloc(count * sizeof(float));
      for (size_t k = 0; k < count; ++k) bufs[i][k] = (float)(i + 1) + (float)(k % 7);
    }
    NCCLCHECK(ncclGroupStart());
    for (int i = 0; i < kComms; ++i) {
      NCCLCHECK(ncclAllReduce(bufs[i], bufs[i], count, ncclFloat, ncclSum, comms[i], NULL));
    }
    NCCLCHECK(ncclGroupEnd());
    for (int i = 0; i < kComms; ++i) {
      for (size_t k = 0; k < count; ++k) {
        const float want = 6.0f + 3.0f * (float)(k % 7);
        if (bufs[i][k] != want)
          FAIL("single-thread group: comm %d element %zu of %zu is %g, want %g", i, k, count,
               (double)bufs[i][k], (double)want);
      }
      free(bufs[i]);
    }
  }
  for (int i = 0; i < kComms; ++i) NCCLCHECK(ncclCommDestroy(comms[i]));
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <id-file> [fault]  (under collie run)\n", argv[0]);
    return 2;
  }
  const char* r = getenv("COLLIE_RANK");
  const char* n = getenv("COLLIE_WORLD_SIZE");
  if (!r || !n) {
    fprintf(stderr, "COLLIE_RANK / COLLIE_WORLD_SIZE not set: start me with collie run\n");
    return 2;
  }
  rank = atoi(r);
  nranks = atoi(n);
  int version = 0;
  NCCLCHECK(ncclGetVersion(&version));
  if (version < 22800) FAIL("version %d", version);

  ncclUniqueId id;
  exchangeId(argv[1], &id);

  /* Non-blocking init: poll until ready. */
  ncclComm_t comm = NULL;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = "nccl_api_check";
  ncclResult_t init = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  if (init != ncclSuccess && init != ncclInProgress)
    FAIL("init returned %d: %s", (int)init, ncclGetLastError(NULL));
  ncclResult_t state = ncclInProgress;
  double deadline = now() + 60;
  do {
    NCCLCHECK(ncclCommGetAsyncError(comm, &state));
    if (now() > deadline) FAIL("communicator not ready after 60 s");
  } while (state == ncclInProgress);
  if (state != ncclSuccess) FAIL("init failed: %d %s", (int)state, ncclGetLastError(comm));

  int count = 0, me = -1, device = 0;
  NCCLCHECK(ncclCommCount(comm, &count));
  NCCLCHECK(ncclCommUserRank(comm, &me));
  NCCLCHECK(ncclCommCuDevice(comm, &device));
  if (count != nranks || me != rank) FAIL("count %d rank %d", count, me);

  if (argc > 2 && strcmp(argv[2], "fault") == 0) return faultRun(comm);

  checkAllReduce(comm, 1);
  checkAllReduce(comm, 1000);
  checkAllReduce(comm, ((size_t)1 << 20) + 3);
  checkTypes(comm);
  checkRooted(comm);
  checkGatherScatter(comm);
  checkPointToPoint(comm);
  checkSplit(comm);
  checkErrors(comm);
  checkGroupLifetimes(comm);
  checkStaleHandles(comm);
  checkOverlapRefused(comm);
  checkSingleThreadGroup();
  checkNccl228(comm, argv[1]);
  checkNccl229(comm);

  NCCLCHECK(ncclCommFinalize(comm));
  NCCLCHECK(ncclCommDestroy(comm));
  if (rank == 0) unlink(argv[1]);
  printf("nccl_api_check rank %d of %d: all checks passed\n", rank, nranks);
  return 0;
}
