/* MPI reference for `collie perf alltoall|gather|scatter`: MPI_Alltoall, MPI_Gather
 * (root 0) or MPI_Scatter (root 0) of floats, out of place. Sizes as nccl-tests and
 * collie perf count them: `size` is the larger buffer (alltoall: each buffer; gather:
 * the root's receive buffer; scatter: its send buffer), each rank's block size / nranks.
 * Per size: `-w` warmup calls, then `-t` trials of `-n` back-to-back calls between
 * barriers; a trial's time is the slowest rank's average per call, and the reported time
 * is the median over trials (microseconds).
 *
 * Usage: mpirun -np N mpi_exchange -c alltoall|gather|scatter [-b minbytes] [-e maxbytes]
 *                                  [-f factor] [-n iters] [-w warmup] [-t trials]
 * Output (rank 0): one line per size, "size_bytes out_of_place_us". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum Collective { kAllToAll, kGather, kScatter };

static long parseBytes(const char* text) {
  char* end = NULL;
  long value = strtol(text, &end, 10);
  if (*end == 'K' || *end == 'k') value <<= 10;
  if (*end == 'M' || *end == 'm') value <<= 20;
  if (*end == 'G' || *end == 'g') value <<= 30;
  return value;
}

static int compareDoubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static void runOnce(enum Collective c, float* send, float* recv, int block) {
  switch (c) {
    case kAllToAll:
      MPI_Alltoall(send, block, MPI_FLOAT, recv, block, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case kGather:
      MPI_Gather(send, block, MPI_FLOAT, recv, block, MPI_FLOAT, 0, MPI_COMM_WORLD);
      break;
    case kScatter:
      MPI_Scatter(send, block, MPI_FLOAT, recv, block, MPI_FLOAT, 0, MPI_COMM_WORLD);
      break;
  }
}

/* Median over trials of the slowest rank's average time per call, in microseconds. */
static double timeExchange(enum Collective c, float* send, float* recv, int block, int iters,
                           int warmup, int trials) {
  double* samples = malloc(sizeof(double) * (size_t)trials);
  for (int i = 0; i < warmup; ++i) runOnce(c, send, recv, block);
  for (int t = 0; t < trials; ++t) {
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i) runOnce(c, send, recv, block);
    double mine = (MPI_Wtime() - start) / iters * 1e6, slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    samples[t] = slowest;
  }
  qsort(samples, (size_t)trials, sizeof(double), compareDoubles);
  double median =
      trials % 2 ? samples[trials / 2] : (samples[trials / 2 - 1] + samples[trials / 2]) / 2.0;
  free(samples);
  return median;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  long minBytes = 8, maxBytes = 64L << 20, factor = 2;
  int iters = 20, warmup = 5, trials = 5, opt, known = 0;
  enum Collective c = kAllToAll;
  while ((opt = getopt(argc, argv, "c:b:e:f:n:w:t:")) != -1) {
    switch (opt) {
      case 'c':
        known = 1;
        if (strcmp(optarg, "alltoall") == 0) {
          c = kAllToAll;
        } else if (strcmp(optarg, "gather") == 0) {
          c = kGather;
        } else if (strcmp(optarg, "scatter") == 0) {
          c = kScatter;
        } else {
          known = 0;
        }
        break;
      case 'b':
        minBytes = parseBytes(optarg);
        break;
      case 'e':
        maxBytes = parseBytes(optarg);
        break;
      case 'f':
        factor = atol(optarg);
        break;
      case 'n':
        iters = atoi(optarg);
        break;
      case 'w':
        warmup = atoi(optarg);
        break;
      case 't':
        trials = atoi(optarg);
        break;
      default:
        known = 0;
        break;
    }
  }
  if (!known || minBytes < 4 || maxBytes < minBytes || factor < 2 || iters < 1 || trials < 1) {
    fprintf(stderr,
            "usage: %s -c alltoall|gather|scatter [-b min] [-e max] [-f factor >= 2] "
            "[-n iters] [-w warmup] [-t trials]\n",
            argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  long maxCount = maxBytes / (long)sizeof(float);
  float* send = malloc(sizeof(float) * (size_t)maxCount);
  float* recv = malloc(sizeof(float) * (size_t)maxCount);
  if (send == NULL || recv == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
  for (long i = 0; i < maxCount; ++i) send[i] = recv[i] = (float)(1 + (i + rank) % 3);
  if (rank == 0) printf("# size_bytes out_of_place_us (median of %d trials)\n", trials);
  for (long bytes = minBytes; bytes <= maxBytes; bytes *= factor) {
    long block = bytes / (long)sizeof(float) / nranks;
    if (block == 0) continue; /* fewer elements than ranks: nothing to move (as collie perf) */
    double us = timeExchange(c, send, recv, (int)block, iters, warmup, trials);
    if (rank == 0) printf("%ld %.3f\n", block * nranks * (long)sizeof(float), us);
    fflush(stdout);
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
