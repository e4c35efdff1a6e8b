/* One rank of a multi-process check of the C API, started by `collie run`: the
 * communicator comes from the launcher's variables (collieCommInitFromEnv), then the
 * five reducing and gathering collectives run at sizes below and past the shm board, with
 * every element compared to its exact value (int32 sums of small values are exact in any
 * order). Run with COLLIE_ALGO=hier and distinct COLLIE_HOST_IDs it checks the two-level
 * collectives through the C API. Prints "c api ok" and exits 0, or names the first wrong
 * element and exits 1. */
#include <collie/collie.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int fail(const char* what, collieResult_t result) {
  fprintf(stderr, "c_api_rank: %s: %s (%s)\n", what, collieGetErrorString(result),
          collieGetLastError());
  return 1;
}

/* Rank r's element i: small, so that sums over 64 ranks stay exact. */
static int32_t value(int rank, size_t i) { return (int32_t)((rank + 1) * 3 + (int32_t)(i % 97)); }

static int32_t sumOver(int nranks, size_t i) {
  int32_t s = 0;
  for (int r = 0; r < nranks; ++r) s += value(r, i);
  return s;
}

static int wrong(const char* what, size_t count, size_t i, int32_t got, int32_t want) {
  fprintf(stderr, "c_api_rank: %s of %zu elements: element %zu is %d, expected %d\n", what, count,
          i, (int)got, (int)want);
  return 1;
}

static int checkSize(collieComm_t comm, int rank, int nranks, size_t count) {
  const size_t total = count * (size_t)nranks;
  int32_t* send = malloc(total * sizeof(int32_t));
  int32_t* recv = malloc(total * sizeof(int32_t));
  if (send == NULL || recv == NULL) return 1;
  collieResult_t rc;
  int bad = 0;

  for (size_t i = 0; i < total; ++i) send[i] = value(rank, i);
  rc = collieAllReduce(send, recv, total, collieInt32, collieSum, comm);
  if (rc != collieSuccess) return fail("allreduce", rc);
  for (size_t i = 0; i < total && !bad; ++i)
    if (recv[i] != sumOver(nranks, i))
      bad = wrong("allreduce", total, i, recv[i], sumOver(nranks, i));

  rc = collieReduceScatter(send, recv, count, collieInt32, collieSum, comm);
  if (rc != collieSuccess) return fail("reducescatter", rc);
  for (size_t i = 0; i < count && !bad; ++i) {
    const int32_t want = sumOver(nranks, (size_t)rank * count + i);
    if (recv[i] != want) bad = wrong("reducescatter", count, i, recv[i], want);
  }

  for (size_t i = 0; i < count; ++i) send[i] = value(rank, i);
  rc = collieAllGather(send, recv, count, collieInt32, comm);
  if (rc != collieSuccess) return fail("allgather", rc);
  for (size_t i = 0; i < total && !bad; ++i) {
    const int32_t want = value((int)(i / count), i % count);
    if (recv[i] != want) bad = wrong("allgather", total, i, recv[i], want);
  }

  const int root = nranks - 1;
  for (size_t i = 0; i < total; ++i) send[i] = value(rank, i);
  rc = collieBroadcast(send, recv, total, collieInt32, root, comm);
  if (rc != collieSuccess) return fail("broadcast", rc);
  for (size_t i = 0; i < total && !bad; ++i)
    if (recv[i] != value(root, i)) bad = wrong("broadcast", total, i, recv[i], value(root, i));

  rc = collieReduce(send, recv, total, collieInt32, collieSum, 0, comm);
  if (rc != collieSuccess) return fail("reduce", rc);
  for (size_t i = 0; i < total && rank == 0 && !bad; ++i)
    if (recv[i] != sumOver(nranks, i)) bad = wrong("reduce", total, i, recv[i], sumOver(nranks, i));

  free(send);
  free(recv);
  return bad;
}

int main(void) {
  collieComm_t comm;
  collieResult_t rc = collieCommInitFromEnv(&comm);
  if (rc != collieSuccess) return fail("collieCommInitFromEnv", rc);
  int rank = 0, nranks = 0;
  collieCommRank(comm, &rank);
  collieCommSize(comm, &nranks);
  /* Per-rank counts: below the board's sizes, past them, and not a multiple of anything. */
  const size_t counts[] = {1, 1000, 262147};
  for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); ++k) {
    if (checkSize(comm, rank, nranks, counts[k]) != 0) {
      collieCommAbort(comm);
      return 1;
    }
  }
  rc = collieCommDestroy(comm);
  if (rc != collieSuccess) return fail("collieCommDestroy", rc);
  printf("rank %d of %d: c api ok\n", rank, nranks);
  return 0;
}
