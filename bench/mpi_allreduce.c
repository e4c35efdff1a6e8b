/* Open MPI reference for `collie perf allreduce`: MPI_Allreduce of floats (sum), out of
 * place and in place. Per size: `-w` warmup calls, then `-t` trials of `-n` back-to-back
 * calls between barriers; a trial's time is the slowest rank's average per call, and the
 * reported time is the median over trials (microseconds).
 *
 * Usage: mpirun -np 2 mpi_allreduce [-b minbytes] [-e maxbytes] [-f factor] [-n iters]
 *                                   [-w warmup] [-t trials]
 * Output (rank 0): one line per size, "size_bytes out_of_place_us in_place_us". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi_timing.h"

struct Call {
  const void* src;
  float* recv;
  int count;
};

static void allreduceOnce(void* ctx) {
  struct Call* c = ctx;
  MPI_Allreduce(c->src, c->recv, c->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* Median over trials of the slowest rank's average time per call, in microseconds. */
static double timeAllreduce(float* send, float* recv, long count, int iters, int warmup, int trials,
                            int inPlace) {
  struct Call c = {inPlace ? MPI_IN_PLACE : send, recv, (int)count};
  return timeCalls(allreduceOnce, &c, iters, warmup, trials);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  struct SweepArgs args = sweepDefaults();
  int opt;
  while ((opt = getopt(argc, argv, SWEEP_OPTIONS)) != -1) {
    if (!takeSweepOption(&args, opt, optarg)) {
      fprintf(stderr,
              "usage: %s [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-t trials]\n",
              argv[0]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (!sweepValid(&args)) {
    fprintf(stderr, "mpi_allreduce: need 4 <= min <= max, factor >= 2, iters and trials >= 1\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const long minBytes = args.minBytes, maxBytes = args.maxBytes, factor = args.factor;
  const int iters = args.iters, warmup = args.warmup, trials = args.trials;
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  long maxCount = maxBytes / (long)sizeof(float);
  float* send = malloc(sizeof(float) * (size_t)maxCount);
  float* recv = malloc(sizeof(float) * (size_t)maxCount);
  if (send == NULL || recv == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
  for (long i = 0; i < maxCount; ++i) send[i] = recv[i] = (float)(1 + (i + rank) % 3);
  if (rank == 0) printf("# size_bytes out_of_place_us in_place_us (median of %d trials)\n", trials);
  for (long bytes = minBytes; bytes <= maxBytes; bytes *= factor) {
    long count = bytes / (long)sizeof(float);
    double oop = timeAllreduce(send, recv, count, iters, warmup, trials, 0);
    double ip = timeAllreduce(send, recv, count, iters, warmup, trials, 1);
    if (rank == 0) printf("%ld %.3f %.3f\n", count * (long)sizeof(float), oop, ip);
    fflush(stdout);
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
