/* The GPU benchmarks' clock and the statistic they print. */
#ifndef HC_BENCH_GPU_TIMING_H
#define HC_BENCH_GPU_TIMING_H

#include <stdlib.h>
#include <time.h>

static inline double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int bench_cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of n samples; sorts v. */
static inline double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
  return v[n / 2];
}

#endif
