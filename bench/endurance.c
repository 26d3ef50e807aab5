/*
 * Endurance: many small all-reduces on one comm, then many init/destroy
 * cycles, printing (rank 0) resident memory, open file descriptors and
 * hetccl entries in /dev/shm at the start, between and at the end. The
 * figures must stay flat. Run under hetccl-run: bench/endurance.sh.
 *   endurance [allreduces] [init_cycles]      default 100000 1000
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hetccl.h"

static long count_dir(const char *path, const char *prefix) {
  DIR *d = opendir(path);
  long n = 0;
  if (!d) return -1;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.' && !strncmp(e->d_name, prefix, strlen(prefix))) n++;
  closedir(d);
  return n;
}

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof(line), f))
    if (!strncmp(line, "VmRSS:", 6)) kib = atol(line + 6);
  if (f) fclose(f);
  return kib;
}

static void report(int rank, const char *when) {
  if (rank != 0) return;
  printf("%-28s RSS %7ld KiB   fds %4ld   /dev/shm hetccl entries %3ld\n", when, rss_kib(),
         count_dir("/proc/self/fd", "") - 1, count_dir("/dev/shm", "hetccl"));
  fflush(stdout);
}

#define CHECK(call)                                                                                      \
  do {                                                                                                   \
    hetcclResult_t r_ = (call);                                                                          \
    if (r_ != hetcclSuccess) {                                                                           \
      fprintf(stderr, "%s failed: %s: %s\n", #call, hetcclGetErrorString(r_), hetcclGetLastError(NULL)); \
      return 1;                                                                                          \
    }                                                                                                    \
  } while (0)

int main(int argc, char **argv) {
  long nreduce = argc > 1 ? atol(argv[1]) : 100000, ncycles = argc > 2 ? atol(argv[2]) : 1000;
  hetcclComm_t comm;
  CHECK(hetcclCommInitFromEnv(&comm, NULL));
  int rank, n;
  CHECK(hetcclCommUserRank(comm, &rank));
  CHECK(hetcclCommCount(comm, &n));
  report(rank, "start");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < nreduce; i++) {
    float v[2] = {(float)rank, 1.0f}, out[2];
    CHECK(hetcclAllReduce(v, out, 2, hetcclFloat, hetcclSum, comm, NULL));
    if (out[1] != (float)n) {
      fprintf(stderr, "rank %d: all-reduce %ld gave %g, expected %d\n", rank, i, out[1], n);
      return 1;
    }
    if (i == nreduce / 10) report(rank, "after 10% of all-reduces");
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double us = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / (double)(nreduce ? nreduce : 1);
  if (rank == 0) printf("%ld all-reduces of 8 B: %.1f us each\n", nreduce, us);
  report(rank, "after all-reduces");
  /* Each cycle splits a fresh comm off the first (the split's id travels
   * through the parent's bootstrap), uses it once and destroys it. */
  for (long c = 0; c < ncycles; c++) {
    hetcclComm_t child;
    CHECK(hetcclCommSplit(comm, 0, rank, &child, NULL));
    CHECK(hetcclBarrier(child, NULL));
    CHECK(hetcclCommDestroy(child));
    if (c == ncycles / 10) report(rank, "after 10% of init/destroy");
  }
  report(rank, "after init/destroy cycles");
  CHECK(hetcclCommDestroy(comm));
  report(rank, "end");
  return 0;
}
