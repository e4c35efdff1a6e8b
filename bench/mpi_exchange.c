/* MPI reference for `collie perf alltoall|gather|scatter`: MPI_Alltoall, MPI_Gather
 * (root 0) or MPI_Scatter (root 0) of floats, out of place, or with -i MPI_Alltoall in
 * place (MPI_IN_PLACE: the receive buffer is also the send buffer). Sizes as nccl-tests and
 * collie perf count them: `size` is the larger buffer (alltoall: each buffer; gather:
 * the root's receive buffer; scatter: its send buffer), each rank's block size / nranks.
 * Per size: `-w` warmup calls, then `-t` trials of `-n` back-to-back calls between
 * barriers; a trial's time is the slowest rank's average per call, and the reported time
 * is the median over trials (microseconds).
 *
 * Usage: mpirun -np N mpi_exchange -c alltoall|gather|scatter [-i] [-b minbytes]
 *                                  [-e maxbytes] [-f factor] [-n iters] [-w warmup]
 *                                  [-t trials]
 * Output (rank 0): one line per size, "size_bytes us" (out of place, or in place with -i). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi_timing.h"

enum Collective { kAllToAll, kGather, kScatter };

static void runOnce(enum Collective c, float* send, float* recv, int block, int inPlace) {
  switch (c) {
    case kAllToAll:
      if (inPlace) {
        MPI_Alltoall(MPI_IN_PLACE, block, MPI_FLOAT, recv, block, MPI_FLOAT, MPI_COMM_WORLD);
      } else {
        MPI_Alltoall(send, block, MPI_FLOAT, recv, block, MPI_FLOAT, MPI_COMM_WORLD);
      }
      break;
    case kGather:
      MPI_Gather(send, block, MPI_FLOAT, recv, block, MPI_FLOAT, 0, MPI_COMM_WORLD);
      break;
    case kScatter:
      MPI_Scatter(send, block, MPI_FLOAT, recv, block, MPI_FLOAT, 0, MPI_COMM_WORLD);
      break;
  }
}

struct Call {
  enum Collective c;
  float* send;
  float* recv;
  int block;
  int inPlace;
};

static void exchangeOnce(void* ctx) {
  struct Call* call = ctx;
  runOnce(call->c, call->send, call->recv, call->block, call->inPlace);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  struct SweepArgs args = sweepDefaults();
  int opt, known = 0, inPlace = 0;
  enum Collective c = kAllToAll;
  while ((opt = getopt(argc, argv, "ic:" SWEEP_OPTIONS)) != -1) {
    if (opt == 'i') {
      inPlace = 1;
    } else if (opt == 'c') {
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
    } else if (!takeSweepOption(&args, opt, optarg)) {
      known = 0;
    }
  }
  if (!known || !sweepValid(&args) || (inPlace && c != kAllToAll)) {
    fprintf(stderr,
            "usage: %s -c alltoall|gather|scatter [-i (alltoall only)] [-b min] [-e max] "
            "[-f factor >= 2] [-n iters] [-w warmup] [-t trials]\n",
            argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const long minBytes = args.minBytes, maxBytes = args.maxBytes, factor = args.factor;
  const int iters = args.iters, warmup = args.warmup, trials = args.trials;
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  long maxCount = maxBytes / (long)sizeof(float);
  float* send = malloc(sizeof(float) * (size_t)maxCount);
  float* recv = malloc(sizeof(float) * (size_t)maxCount);
  if (send == NULL || recv == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
  for (long i = 0; i < maxCount; ++i) send[i] = recv[i] = (float)(1 + (i + rank) % 3);
  if (rank == 0) {
    printf("# size_bytes %s_us (median of %d trials)\n", inPlace ? "in_place" : "out_of_place",
           trials);
  }
  for (long bytes = minBytes; bytes <= maxBytes; bytes *= factor) {
    long block = bytes / (long)sizeof(float) / nranks;
    if (block == 0) continue; /* fewer elements than ranks: nothing to move (as collie perf) */
    struct Call call = {c, send, recv, (int)block, inPlace};
    double us = timeCalls(exchangeOnce, &call, iters, warmup, trials);
    if (rank == 0) printf("%ld %.3f\n", block * nranks * (long)sizeof(float), us);
    fflush(stdout);
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
