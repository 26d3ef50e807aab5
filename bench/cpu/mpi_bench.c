/*
 * mpi_bench: time MPI_Allreduce (float sum), MPI_Allgather,
 * MPI_Reduce_scatter_block and MPI_Bcast (root 0) the way hetccl-perf times hetccl (nccl-tests'
 * method, shared/reference/nccl-tests.md), so that bench/cpu/compare.sh can
 * put the two side by side. Built by compare.sh with mpicc.
 *
 *   mpirun -n N mpi_bench <all_reduce|all_gather|reduce_scatter|broadcast>
 *          -G MIN-MAXxITERS[,MIN-MAXxITERS...] [-f F] [-w W]
 *
 * Each group MIN-MAXxITERS (sizes in bytes, K/M/G suffixes allowed) is
 * what one hetccl-perf invocation `-b MIN -e MAX -f F -n ITERS -w W -c 0`
 * does, out-of-place half only:
 *   - buffers of MAX bytes (send and receive), zero filled;
 *   - warm-up: W out-of-place operations at each of MIN, 2 MIN, 4 MIN ... <= MAX;
 *   - for each size MIN, F MIN, F^2 MIN ... <= MAX: one untimed operation,
 *     a barrier, ITERS operations back to back (iteration i works at offset
 *     (i mod steps) * footprint in the buffers, as nccl-tests does), time per
 *     operation on each rank, averaged over ranks (MPI_Allreduce of the
 *     times / N);
 *   - counts, algbw and busbw as nccl-tests: all_reduce count = S/4, busbw =
 *     algbw * 2(n-1)/n; broadcast count = S/4, busbw = algbw (MPI_Bcast is
 *     in place: the receive buffer of the root holds the data); all_gather and reduce_scatter per-rank count base =
 *     (S/4/n) rounded down to 16 bytes, size printed = base*n*4, algbw on
 *     that total, busbw = algbw * (n-1)/n.
 * Output (rank 0): one row per size in nccl-tests' layout, out-of-place half
 * only:  size count type redop root time(us) algbw busbw #wrong(N/A).
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum coll { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST };

struct group {
  long long min, max;
  int iters;
};

static int rank, nranks;

static void die(const char *msg) {
  if (rank == 0) fprintf(stderr, "mpi_bench: %s\n", msg);
  MPI_Abort(MPI_COMM_WORLD, 2);
  exit(2);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long long parse_size(const char *s, char **end) {
  char *e;
  long long v = strtoll(s, &e, 10);
  switch (*e) {
  case 'K':
  case 'k':
    v <<= 10;
    e++;
    break;
  case 'M':
  case 'm':
    v <<= 20;
    e++;
    break;
  case 'G':
  case 'g':
    v <<= 30;
    e++;
    break;
  default: break;
  }
  *end = e;
  return v;
}

/* "4K-256Kx100,1M-1Mx64" */
static int parse_groups(const char *spec, struct group *g, int cap) {
  int n = 0;
  const char *p = spec;
  while (*p) {
    char *e;
    if (n == cap) die("too many groups");
    g[n].min = parse_size(p, &e);
    if (*e != '-') die("bad -G: want MIN-MAXxITERS[,...]");
    g[n].max = parse_size(e + 1, &e);
    if (*e != 'x') die("bad -G: want MIN-MAXxITERS[,...]");
    g[n].iters = (int)strtol(e + 1, &e, 10);
    if (g[n].min <= 0 || g[n].max < g[n].min || g[n].iters <= 0) die("bad -G values");
    n++;
    if (*e == ',') e++;
    else if (*e) die("bad -G separator");
    p = e;
  }
  return n;
}

/* Elements of one operation of nominal size S (nccl-tests.md §3). */
struct counts {
  size_t count;      /* the MPI count argument */
  size_t send, recv; /* buffer elements */
  size_t printed;    /* printed size in bytes */
  double alg_bytes;  /* bytes for algbw */
  double factor;     /* busbw factor */
};

static struct counts counts_for(enum coll c, long long bytes) {
  struct counts k;
  size_t count = (size_t)bytes / sizeof(float);
  size_t n = (size_t)nranks;
  if (c == ALL_REDUCE || c == BROADCAST) {
    k.count = k.send = k.recv = count;
    k.printed = count * sizeof(float);
    k.alg_bytes = (double)k.printed;
    k.factor = c == BROADCAST ? 1.0 : 2.0 * (double)(n - 1) / (double)n;
  } else {
    size_t base = (count / n) & ~(size_t)(16 / sizeof(float) - 1);
    k.count = base;
    k.send = c == ALL_GATHER ? base : base * n;
    k.recv = c == ALL_GATHER ? base * n : base;
    k.printed = base * n * sizeof(float);
    k.alg_bytes = (double)k.printed;
    k.factor = (double)(n - 1) / (double)n;
  }
  return k;
}

static char *sendbuf, *recvbuf;
static size_t buf_bytes;

static void launch(enum coll c, const struct counts *k, int iter) {
  size_t total = (k->send > k->recv ? k->send : k->recv) * sizeof(float);
  size_t steps = total ? buf_bytes / total : 1;
  size_t shift = total * ((size_t)iter % (steps ? steps : 1));
  void *s = sendbuf + shift, *r = recvbuf + shift;
  int rc;
  if (k->count > (size_t)INT32_MAX) die("count too large for MPI int");
  switch (c) {
  case ALL_REDUCE: rc = MPI_Allreduce(s, r, (int)k->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
  case ALL_GATHER: rc = MPI_Allgather(s, (int)k->count, MPI_FLOAT, r, (int)k->count, MPI_FLOAT, MPI_COMM_WORLD); break;
  case BROADCAST: rc = MPI_Bcast(r, (int)k->count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
  default: rc = MPI_Reduce_scatter_block(s, r, (int)k->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
  }
  if (rc != MPI_SUCCESS) die("MPI call failed");
}

/* nccl-tests' number format (width w, 2 decimals, then fewer, then %e). */
static const char *fmt_num(char *s, size_t len, double v, int w) {
  int digits = 0;
  for (double p = 1; v >= p && digits < 40; p *= 10) digits++;
  if (digits < w - 2) snprintf(s, len, "%*.2f", w, v);
  else if (digits < w - 1) snprintf(s, len, "%*.1f", w, v);
  else if (digits < w + 1) snprintf(s, len, "%*.0f", w, v);
  else if (w >= 7) snprintf(s, len, "%*.1e", w, v);
  else snprintf(s, len, "%*.0e", w, v);
  return s;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  if (argc < 2)
    die("usage: mpi_bench <all_reduce|all_gather|reduce_scatter|broadcast> -G MIN-MAXxITERS[,...] [-f F] [-w W]");
  enum coll c;
  const char *name = argv[1];
  if (strcmp(name, "all_reduce") == 0) c = ALL_REDUCE;
  else if (strcmp(name, "all_gather") == 0) c = ALL_GATHER;
  else if (strcmp(name, "reduce_scatter") == 0) c = REDUCE_SCATTER;
  else if (strcmp(name, "broadcast") == 0) c = BROADCAST;
  else die("unknown collective");

  struct group groups[64];
  int ngroups = 0;
  long long factor = 4;
  int warmup = 2;
  for (int i = 2; i < argc; i++) {
    if (i + 1 >= argc) die("missing option value");
    if (strcmp(argv[i], "-G") == 0) ngroups = parse_groups(argv[++i], groups, 64);
    else if (strcmp(argv[i], "-f") == 0) factor = atoll(argv[++i]);
    else if (strcmp(argv[i], "-w") == 0) warmup = atoi(argv[++i]);
    else die("unknown option");
  }
  if (ngroups == 0) die("-G is required");
  if (factor < 2) die("-f must be >= 2");

  long long most = 0;
  for (int g = 0; g < ngroups; g++)
    if (groups[g].max > most) most = groups[g].max;
  sendbuf = aligned_alloc(4096, ((size_t)most + 4095) / 4096 * 4096);
  recvbuf = aligned_alloc(4096, ((size_t)most + 4095) / 4096 * 4096);
  if (!sendbuf || !recvbuf) die("out of memory");
  memset(sendbuf, 0, (size_t)most);
  memset(recvbuf, 0, (size_t)most);

  if (rank == 0) {
    int len;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n,")] = 0;
    printf("# mpi_bench %s: %d ranks, float, sum, warm-up %d, factor %lld; %s\n", name, nranks, warmup, factor, lib);
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop", "root", "time",
           "algbw", "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
           "(GB/s)", "");
    fflush(stdout);
  }

  for (int g = 0; g < ngroups; g++) {
    struct group *G = &groups[g];
    buf_bytes = (size_t)G->max;
    MPI_Barrier(MPI_COMM_WORLD);
    for (long long s = G->min; s <= G->max; s *= 2) {
      struct counts k = counts_for(c, s);
      for (int w = 0; w < warmup; w++) launch(c, &k, w);
    }
    for (long long s = G->min; s <= G->max; s *= factor) {
      struct counts k = counts_for(c, s);
      launch(c, &k, 0);
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = now();
      for (int it = 0; it < G->iters; it++) launch(c, &k, it);
      double sec = (now() - t0) / G->iters, sum = 0;
      MPI_Allreduce(&sec, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      sec = sum / nranks;
      double algbw = sec > 0 ? k.alg_bytes / 1e9 / sec : 0, busbw = algbw * k.factor;
      if (rank == 0) {
        char t[32], a[32], b[32];
        printf("%12zu  %12zu  %8s  %6s  %6d  %7s  %6s  %6s    N/A\n", k.printed, k.count, "float",
               c == ALL_GATHER || c == BROADCAST ? "none" : "sum", c == BROADCAST ? 0 : -1,
               fmt_num(t, sizeof t, sec * 1e6, 7), fmt_num(a, sizeof a, algbw, 6), fmt_num(b, sizeof b, busbw, 6));
        fflush(stdout);
      }
    }
  }
  free(sendbuf);
  free(recvbuf);
  MPI_Finalize();
  return 0;
}
