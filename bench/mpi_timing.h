/* Shared by the MPI references (mpi_allreduce.c, mpi_exchange.c): size parsing and the
 * timing of one collective as collie perf times it (the slowest rank's average per
 * call, median over trials). Header-only, so that compare.py can build each reference
 * from its one source file with each MPI's mpicc. */
#pragma once

#include <mpi.h>
#include <stdlib.h>

/* "64", "4K", "16M", "1G" -> bytes. */
static inline long parseBytes(const char* text) {
  char* end = NULL;
  long value = strtol(text, &end, 10);
  if (*end == 'K' || *end == 'k') value <<= 10;
  if (*end == 'M' || *end == 'm') value <<= 20;
  if (*end == 'G' || *end == 'g') value <<= 30;
  return value;
}

/* The size sweep and the timing every reference takes: -b min, -e max, -f factor,
 * -n iters, -w warmup, -t trials. */
struct SweepArgs {
  long minBytes, maxBytes, factor;
  int iters, warmup, trials;
};
#define SWEEP_OPTIONS "b:e:f:n:w:t:"

static inline struct SweepArgs sweepDefaults(void) {
  struct SweepArgs a = {8, 64L << 20, 2, 20, 5, 5};
  return a;
}

/* Applies getopt's `opt` (with `arg`) if it is a sweep option; 0 when it is not one. */
static inline int takeSweepOption(struct SweepArgs* a, int opt, const char* arg) {
  switch (opt) {
    case 'b':
      a->minBytes = parseBytes(arg);
      return 1;
    case 'e':
      a->maxBytes = parseBytes(arg);
      return 1;
    case 'f':
      a->factor = atol(arg);
      return 1;
    case 'n':
      a->iters = atoi(arg);
      return 1;
    case 'w':
      a->warmup = atoi(arg);
      return 1;
    case 't':
      a->trials = atoi(arg);
      return 1;
    default:
      return 0;
  }
}

/* 4 <= min <= max, factor >= 2, iters and trials >= 1. */
static inline int sweepValid(const struct SweepArgs* a) {
  return a->minBytes >= 4 && a->maxBytes >= a->minBytes && a->factor >= 2 && a->iters >= 1 &&
         a->trials >= 1;
}

static inline int compareDoubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* `warmup` calls of call(ctx), then `trials` trials of `iters` back-to-back calls between
 * barriers; returns the median over trials of the slowest rank's average time per call,
 * in microseconds. */
static inline double timeCalls(void (*call)(void*), void* ctx, int iters, int warmup, int trials) {
  double* samples = malloc(sizeof(double) * (size_t)trials);
  for (int i = 0; i < warmup; ++i) call(ctx);
  for (int t = 0; t < trials; ++t) {
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i) call(ctx);
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
