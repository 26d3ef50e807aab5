/*
 * Shared test helpers; see testutil.h for the contract.
 *
 * Why the reduction values are exact. Every algorithm may combine the ranks'
 * contributions in its own order and round after each step, so a test that
 * wants to compare bitwise must pick inputs for which every partial result,
 * in any order, is representable:
 * - integers wrap modulo 2^bits in SUM, PROD and PREMULSUM, which is exact
 *   whatever the order, so their inputs are any bits; AVG divides the sum,
 *   so its inputs are bounded (|v| <= max / nranks) and the sum never wraps;
 *   the expected AVG is that sum divided by nranks, truncated toward zero.
 * - floats in SUM, AVG and PREMULSUM are integer multiples m * unit with
 *   sum |m * scalar| <= L, where every integer of magnitude <= L is exact in
 *   the type (fp8 e5m2: 8, e4m3: 16, bf16: 256, fp16: 2048, fp32: 2^24,
 *   fp64: 2^53). When nranks values of 1 would not fit (fp8 with many ranks
 *   and a scalar of 2), only every g-th rank contributes a non-zero value to
 *   element i, g chosen so that the active ones fit. The expected AVG is the
 *   exact sum / nranks rounded once into the type (what a sum exact in the
 *   type followed by one division gives: the division is computed in float
 *   or double, which is wide enough that rounding twice equals once).
 * - PROD of floats multiplies +-2^k, k in {-1, 0, 1} (sometimes 0): every
 *   partial product is +-2^j with |j| <= nranks <= 8, exact even in fp8.
 * - MAX and MIN take any non-NaN bit pattern (-0 is replaced by +0, whose
 *   order against +0 is unspecified); the expected result is the winning
 *   input's bits (for fp8 with 2+ ranks, saturated: see tu_red_expect).
 */
#include "testutil.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "device/device.h"

static bool verbose_cases; /* TU_VERBOSE: print each case as it starts */

extern char **environ;

/* ---- checks ---- */

static char repro_env[1024]; /* HETCCL_* variables set at start */
static char repro_argv0[512];
static atomic_long n_checks, n_failures;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local char tl_case[512];
static _Thread_local char tl_repro[256];
static _Thread_local long tl_failures;
static _Thread_local int tl_rank = -1;

void tu_init(int argc, char **argv) {
  (void)argc;
  snprintf(repro_argv0, sizeof(repro_argv0), "%s", argv && argv[0] ? argv[0] : "?");
  size_t at = 0;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "HETCCL_", 7) != 0) continue;
    int n = snprintf(repro_env + at, sizeof(repro_env) - at, "%s ", *e);
    if (n < 0 || (size_t)n >= sizeof(repro_env) - at) break;
    at += (size_t)n;
  }
  verbose_cases = getenv("TU_VERBOSE") != NULL;
  tu_seconds();
}

void tu_set_case(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_case, sizeof(tl_case), fmt, ap);
  va_end(ap);
  /* TU_VERBOSE=1: each case as it starts, so a hang names its case. */
  if (verbose_cases) fprintf(stderr, "case: %s\n", tl_case);
}

void tu_set_repro(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_repro, sizeof(tl_repro), fmt, ap);
  va_end(ap);
}

static void vfail(const char *file, int line, const char *cond, const char *fmt, va_list ap) {
  long k = atomic_fetch_add(&n_failures, 1) + 1;
  tl_failures++;
  if (k > TU_MAX_PRINTED) return;
  char msg[1024];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  pthread_mutex_lock(&print_lock);
  fprintf(stderr, "FAIL %s:%d", file, line);
  if (tl_rank >= 0) fprintf(stderr, " [rank %d]", tl_rank);
  if (tl_case[0]) fprintf(stderr, " case {%s}", tl_case);
  if (cond && strcmp(cond, "false") != 0) fprintf(stderr, ": %s  (check: %s)\n", msg, cond);
  else fprintf(stderr, ": %s\n", msg);
  /* hetccl's own words for the failure, where a call of this thread left any. */
  if (hc_last_error()[0]) fprintf(stderr, "  last error: %s\n", hc_last_error());
  fprintf(stderr, "  reproduce: %s%s %s\n", repro_env, repro_argv0, tl_repro);
  if (k == TU_MAX_PRINTED) fprintf(stderr, "(further failures are counted, not printed)\n");
  fflush(stderr);
  pthread_mutex_unlock(&print_lock);
}

bool tu_check_at(bool ok, const char *file, int line, const char *cond, const char *fmt, ...) {
  atomic_fetch_add(&n_checks, 1);
  if (ok) return true;
  va_list ap;
  va_start(ap, fmt);
  vfail(file, line, cond, fmt, ap);
  va_end(ap);
  return false;
}

bool tu_check_ok_at(hetcclResult_t r, const char *file, int line, const char *call) {
  return tu_check_at(r == hetcclSuccess, file, line, NULL, "%s returned %d (%s): %s", call, (int)r,
                     hetcclGetErrorString(r), hetcclGetLastError(NULL));
}

long tu_checks(void) { return atomic_load(&n_checks); }
long tu_failures(void) { return atomic_load(&n_failures); }
long tu_thread_failures(void) { return tl_failures; }

int tu_finish(const char *name) {
  long f = tu_failures();
  printf("%s: %ld checks, %ld failures, %.1f s: %s\n", name, tu_checks(), f, tu_seconds(), f ? "FAILED" : "passed");
  fflush(stdout);
  return f ? 1 : 0;
}

double tu_seconds(void) {
  static atomic_ullong start;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  unsigned long long now = (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
  unsigned long long zero = 0;
  atomic_compare_exchange_strong(&start, &zero, now);
  return (double)(now - atomic_load(&start)) / 1e9;
}

/* ---- ranks as threads ---- */

struct tu_run {
  int nranks;
  hetcclUniqueId id;
  tu_rank_fn fn;
  void *arg;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived, exited;
  unsigned gen;
  bool broken;
  void **ptrs;
  int *result; /* per rank: fn's return, or -1 when a CHECK failed */
  /* Ranks as processes: this struct and result[] are shared memory, and
   * the children add their counts here. */
  bool processes;
  atomic_long checks, failures;
  atomic_int id_state; /* processes: 0 until the parent has made id, 1 made, -1 failed */
};
struct tu_thread_arg {
  struct tu_run *run;
  int rank;
};
static _Thread_local struct tu_run *tl_run;

int tu_rank(void) { return tl_rank; }

static void *rank_main(void *p) {
  struct tu_thread_arg *ta = p;
  struct tu_run *R = ta->run;
  tl_run = R;
  tl_rank = ta->rank;
  tl_failures = 0;
  tl_case[0] = 0;
  int rc = R->fn(ta->rank, R->nranks, R->id, R->arg);
  if (rc == 0 && tl_failures) rc = -1;
  R->result[ta->rank] = rc;
  pthread_mutex_lock(&R->mu);
  R->exited++;
  pthread_cond_broadcast(&R->cv);
  pthread_mutex_unlock(&R->mu);
  tl_run = NULL;
  tl_rank = -1;
  return NULL;
}

int tu_run_ranks(int nranks, tu_rank_fn fn, void *arg) {
  struct tu_run R = {.nranks = nranks, .fn = fn, .arg = arg};
  hetcclResult_t r = hetcclGetUniqueId(&R.id);
  if (!tu_check_at(r == hetcclSuccess, __FILE__, __LINE__, NULL, "hetcclGetUniqueId returned %d: %s", (int)r,
                   hetcclGetLastError(NULL)))
    return nranks;
  pthread_mutex_init(&R.mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&R.cv, &ca);
  pthread_condattr_destroy(&ca);
  R.ptrs = calloc((size_t)nranks, sizeof(void *));
  R.result = calloc((size_t)nranks, sizeof(int));
  pthread_t *th = calloc((size_t)nranks, sizeof(pthread_t));
  struct tu_thread_arg *ta = calloc((size_t)nranks, sizeof(*ta));
  if (!R.ptrs || !R.result || !th || !ta) {
    fprintf(stderr, "tu_run_ranks: out of memory\n");
    abort();
  }
  int started = 0;
  for (; started < nranks; started++) {
    ta[started] = (struct tu_thread_arg){.run = &R, .rank = started};
    if (pthread_create(&th[started], NULL, rank_main, &ta[started]) != 0) {
      fprintf(stderr, "tu_run_ranks: pthread_create failed for rank %d\n", started);
      abort();
    }
  }
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  int failed = 0;
  for (int i = 0; i < nranks; i++)
    if (R.result[i] != 0) {
      failed++;
      fprintf(stderr, "rank %d of %d: FAILED (%s)\n", i, nranks,
              R.result[i] == -1 ? "checks failed" : "returned an error");
    }
  free(ta);
  free(th);
  free(R.result);
  free(R.ptrs);
  pthread_cond_destroy(&R.cv);
  pthread_mutex_destroy(&R.mu);
  return failed;
}

/* Ranks as processes: one child per rank, after a fork; the barrier and the
 * results live in shared memory. The children are forked before the id is
 * made: making it starts the bootstrap root's thread, and a child forked
 * while that thread holds a lock (the allocator's) would inherit it held. */
int tu_run_rank_processes(int nranks, tu_rank_fn fn, void *arg) {
  size_t bytes = sizeof(struct tu_run) + (size_t)nranks * sizeof(int);
  struct tu_run *R = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (R == MAP_FAILED) {
    fprintf(stderr, "tu_run_rank_processes: mmap failed\n");
    abort();
  }
  *R = (struct tu_run){.nranks = nranks, .fn = fn, .arg = arg, .processes = true, .result = (int *)(R + 1)};
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  pthread_mutex_init(&R->mu, &ma);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  pthread_cond_init(&R->cv, &ca);
  fflush(stdout);
  fflush(stderr);
  pid_t *pid = calloc((size_t)nranks, sizeof(pid_t));
  for (int i = 0; i < nranks; i++) {
    R->result[i] = -2;
    pid[i] = fork();
    if (pid[i] < 0) {
      fprintf(stderr, "tu_run_rank_processes: fork failed for rank %d\n", i);
      abort();
    }
    if (pid[i] == 0) {
      for (double end = tu_seconds() + TU_SYNC_SECONDS; atomic_load(&R->id_state) == 0 && tu_seconds() < end;)
        usleep(1000);
      if (atomic_load(&R->id_state) != 1) _exit(3);
      long checks0 = tu_checks(), failures0 = tu_failures();
      struct tu_thread_arg ta = {.run = R, .rank = i};
      rank_main(&ta);
      atomic_fetch_add(&R->checks, tu_checks() - checks0);
      atomic_fetch_add(&R->failures, tu_failures() - failures0);
      fflush(stdout);
      fflush(stderr);
      _exit(0);
    }
  }
  hetcclResult_t r = hetcclGetUniqueId(&R->id);
  atomic_store(&R->id_state, r == hetcclSuccess ? 1 : -1);
  tu_check_at(r == hetcclSuccess, __FILE__, __LINE__, NULL, "hetcclGetUniqueId returned %d: %s", (int)r,
              hetcclGetLastError(NULL));
  int failed = 0;
  for (int i = 0; i < nranks; i++) {
    int st = 0;
    if (waitpid(pid[i], &st, 0) != pid[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) R->result[i] = -3;
    if (R->result[i] != 0) {
      failed++;
      fprintf(stderr, "rank %d of %d (a process): FAILED (%s)\n", i, nranks,
              R->result[i] == -1   ? "checks failed"
              : R->result[i] == -3 ? "died"
                                   : "returned an error");
    }
  }
  atomic_fetch_add(&n_checks, atomic_load(&R->checks));
  atomic_fetch_add(&n_failures, atomic_load(&R->failures) + (failed && !atomic_load(&R->failures)));
  free(pid);
  munmap(R, bytes);
  return failed;
}

bool tu_barrier(void) {
  struct tu_run *R = tl_run;
  if (R == NULL) return true;
  pthread_mutex_lock(&R->mu);
  if (R->broken) {
    pthread_mutex_unlock(&R->mu);
    return false;
  }
  unsigned gen = R->gen;
  if (++R->arrived == R->nranks) {
    R->arrived = 0;
    R->gen++;
    pthread_cond_broadcast(&R->cv);
    pthread_mutex_unlock(&R->mu);
    return true;
  }
  struct timespec dl;
  clock_gettime(CLOCK_MONOTONIC, &dl);
  dl.tv_sec += TU_SYNC_SECONDS;
  const char *why = NULL;
  while (R->gen == gen && !R->broken) {
    if (R->exited > 0) {
      why = "a rank returned before reaching it";
      break;
    }
    if (pthread_cond_timedwait(&R->cv, &R->mu, &dl) != 0) {
      why = "timed out";
      break;
    }
  }
  bool ok = R->gen != gen;
  if (!ok) {
    R->broken = true;
    pthread_cond_broadcast(&R->cv);
  }
  pthread_mutex_unlock(&R->mu);
  if (!ok)
    tu_check_at(false, __FILE__, __LINE__, NULL, "rank-thread barrier broken: %s",
                why ? why : "another rank's barrier failed");
  return ok;
}

bool tu_allgather_ptr(void *mine, void **all) {
  struct tu_run *R = tl_run;
  if (R == NULL) {
    all[0] = mine;
    return true;
  }
  if (R->processes) return CHECK(false, "tu_allgather_ptr: ranks are processes, pointers mean nothing to the others");
  R->ptrs[tl_rank] = mine;
  if (!tu_barrier()) return false;
  memcpy(all, R->ptrs, (size_t)R->nranks * sizeof(void *));
  return tu_barrier();
}

/* ---- covering arrays ---- */

static long gcd(long a, long b) {
  while (b) {
    long t = a % b;
    a = b;
    b = t;
  }
  return a;
}

int tu_pairwise(const struct tu_dims *D, int **out) {
  const int nd = D->ndims;
  *out = NULL;
  /* Pair (d1 < d2, a, b) lives at base[d1 * nd + d2] + a * sizes[d2] + b. */
  int *base = calloc((size_t)nd * (size_t)nd, sizeof(int));
  long ntuples = 1, nslots = 0;
  for (int d = 0; d < nd; d++) ntuples *= D->sizes[d];
  for (int d1 = 0; d1 < nd && base; d1++)
    for (int d2 = d1 + 1; d2 < nd; d2++) {
      base[d1 * nd + d2] = (int)nslots;
      nslots += (long)D->sizes[d1] * D->sizes[d2];
    }
  int *tuples = malloc((size_t)ntuples * (size_t)nd * sizeof(int));
  char *need = calloc((size_t)nslots + 1, 1); /* 1: occurs and not yet covered */
  int *v = malloc((size_t)nd * sizeof(int));
  int cap = 64, ncases = 0, *cases = malloc((size_t)cap * (size_t)nd * sizeof(int));
  char *used = NULL;
  long nvalid = 0, uncovered = 0;
  if (!base || !tuples || !need || !v || !cases) goto oom;
#define PAIR(t, d1, d2) (base[(d1)*nd + (d2)] + (t)[d1] * D->sizes[d2] + (t)[d2])
  for (long k = 0; k < ntuples; k++) {
    long x = k;
    for (int d = nd - 1; d >= 0; d--) {
      v[d] = (int)(x % D->sizes[d]);
      x /= D->sizes[d];
    }
    bool ok = true;
    for (int d = 0; d < nd && ok; d++) ok = D->relevant(v, d) || v[d] == 0;
    if (!ok || !D->valid(v, D->arg)) continue;
    memcpy(&tuples[nvalid * nd], v, (size_t)nd * sizeof(int));
    nvalid++;
    for (int d1 = 0; d1 < nd; d1++)
      for (int d2 = d1 + 1; d2 < nd; d2++)
        if (D->relevant(v, d1) && D->relevant(v, d2)) need[PAIR(v, d1, d2)] = 1;
  }
  for (long i = 0; i < nslots; i++) uncovered += need[i];
  used = calloc((size_t)nvalid + 1, 1);
  if (!used) goto oom;
  /* A stride prime to nvalid visits the tuples in a scrambled order, so
   * that ties do not always go to low values. */
  long stride = 7919;
  while (nvalid > 1 && gcd(stride, nvalid) != 1) stride += 2;
  while (uncovered > 0) {
    long best = -1, best_score = 0;
    for (long s = 0; s < nvalid; s++) {
      long k = (s * stride) % nvalid;
      if (used[k]) continue;
      const int *t = &tuples[k * nd];
      long gain = 0;
      for (int d1 = 0; d1 < nd; d1++)
        for (int d2 = d1 + 1; d2 < nd; d2++)
          if (D->relevant(t, d1) && D->relevant(t, d2)) gain += need[PAIR(t, d1, d2)];
      long score = gain * 1024 - (D->cost ? D->cost(t) : 0);
      if (gain > 0 && (best < 0 || score > best_score)) {
        best = k;
        best_score = score;
      }
    }
    if (best < 0) break;
    used[best] = 1;
    const int *t = &tuples[best * nd];
    for (int d1 = 0; d1 < nd; d1++)
      for (int d2 = d1 + 1; d2 < nd; d2++)
        if (D->relevant(t, d1) && D->relevant(t, d2)) {
          uncovered -= need[PAIR(t, d1, d2)];
          need[PAIR(t, d1, d2)] = 0;
        }
    if (ncases == cap) {
      int *more = realloc(cases, (size_t)(cap *= 2) * (size_t)nd * sizeof(int));
      if (!more) goto oom;
      cases = more;
    }
    memcpy(&cases[ncases * nd], t, (size_t)nd * sizeof(int));
    ncases++;
  }
#undef PAIR
  free(used);
  free(need);
  free(tuples);
  free(base);
  free(v);
  *out = cases;
  return ncases;
oom:
  free(used);
  free(need);
  free(tuples);
  free(base);
  free(v);
  free(cases);
  return -1;
}

/* ---- buffers ---- */

#define GUARD 64
#define GUARD_BYTE 0xa5

struct buf_hdr {
  size_t bytes;
  size_t pad[7]; /* keeps the payload 64-byte aligned */
};

void *tu_buf_alloc(size_t bytes, uint8_t fill_byte) {
  size_t total = sizeof(struct buf_hdr) + GUARD + bytes + GUARD;
  char *p = aligned_alloc(64, HC_DIV_UP(total, 64) * 64);
  if (p == NULL) {
    fprintf(stderr, "tu_buf_alloc: out of memory for %zu bytes\n", bytes);
    abort();
  }
  ((struct buf_hdr *)p)->bytes = bytes;
  char *payload = p + sizeof(struct buf_hdr) + GUARD;
  memset(payload - GUARD, GUARD_BYTE, GUARD);
  memset(payload, fill_byte, bytes);
  memset(payload + bytes, GUARD_BYTE, GUARD);
  return payload;
}

bool tu_buf_guards_ok(const void *buf, const char *what) {
  if (buf == NULL) return true;
  const uint8_t *payload = buf;
  const struct buf_hdr *h = (const struct buf_hdr *)(payload - GUARD - sizeof(struct buf_hdr));
  for (int i = 0; i < GUARD; i++) {
    if (payload[-GUARD + i] != GUARD_BYTE)
      return CHECK(false, "%s: guard before the buffer overwritten at byte %d of %d", what, i, GUARD);
    if (payload[h->bytes + (size_t)i] != GUARD_BYTE)
      return CHECK(false, "%s: guard after the %zu-byte buffer overwritten at byte %d", what, h->bytes, i);
  }
  return true;
}

void tu_buf_free(void *buf) {
  if (buf == NULL) return;
  free((char *)buf - GUARD - sizeof(struct buf_hdr));
}

/* ---- values ---- */

static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t tu_hash(uint64_t a, uint64_t b, uint64_t c) {
  return mix64(a * 0x9e3779b97f4a7c15ull + mix64(b + 0x632be59bd9b4e019ull) + mix64(c ^ 0x85157af5ull));
}

static void store_bits(enum hc_dtype t, void *elem, uint64_t bits) {
  memcpy(elem, &bits, hc_dtype_size(t)); /* little-endian: the low bytes */
}

void tu_data_elem(enum hc_dtype t, uint64_t seed, int src, size_t i, void *elem) {
  store_bits(t, elem, tu_hash(seed, (uint64_t)src, i));
}

void tu_data_fill(enum hc_dtype t, uint64_t seed, int src, size_t first, size_t count, void *buf) {
  size_t es = hc_dtype_size(t);
  for (size_t k = 0; k < count; k++) tu_data_elem(t, seed, src, first + k, (char *)buf + k * es);
}

static bool is_signed_int(enum hc_dtype t) { return t == HC_INT8 || t == HC_INT32 || t == HC_INT64; }
static unsigned bits_of(enum hc_dtype t) { return (unsigned)hc_dtype_size(t) * 8; }

/* The element as a 64-bit integer: sign-extended for signed types. */
static uint64_t load_int(enum hc_dtype t, const void *elem) {
  uint64_t v = 0;
  memcpy(&v, elem, hc_dtype_size(t));
  unsigned b = bits_of(t);
  if (b < 64 && is_signed_int(t) && (v >> (b - 1)) & 1) v |= ~0ull << b;
  return v;
}

/* Every integer of magnitude <= L is exact in t; unit: the step of m * unit. */
static double float_limit(enum hc_dtype t) {
  switch (t) {
  case HC_FP8_E5M2: return 8;
  case HC_FP8_E4M3: return 16;
  case HC_BFLOAT16: return 256;
  case HC_FLOAT16: return 2048;
  case HC_FLOAT32: return 16777216.0;
  default: return 9007199254740992.0;
  }
}
static double float_unit(enum hc_dtype t) { return t == HC_FP8_E5M2 ? 1.0 : t == HC_FP8_E4M3 ? 0.5 : 0.25; }

static bool is_nan_bits(enum hc_dtype t, const void *elem) {
  double v = hc_dtype_load(t, elem);
  return v != v;
}

/* Largest |m| of one rank's value, and the spacing g of the ranks that
 * contribute non-zero values to an element (see the file comment). */
static void float_budget(const struct tu_red *s, uint64_t *vmax, int *g) {
  double L = float_limit(s->dtype), smax = s->op == HC_PREMULSUM ? 2.0 : 1.0;
  double v = L / ((double)s->nranks * smax);
  if (v > 1099511627776.0) v = 1099511627776.0; /* 2^40 */
  uint64_t vm = v < 1.0 ? 1 : (uint64_t)v;
  uint64_t most = (uint64_t)(L / ((double)vm * smax)); /* ranks that fit, >= 1 */
  *vmax = vm;
  *g = (int)HC_DIV_UP((uint64_t)s->nranks, most);
}

void tu_red_scalar(const struct tu_red *s, int rank, void *elem) {
  if (hc_dtype_is_float(s->dtype)) {
    hc_dtype_store(s->dtype, elem, rank % 2 == 0 ? 2.0 : -1.0);
  } else {
    int64_t v = is_signed_int(s->dtype) && rank % 2 ? -(int64_t)(rank + 1) : (int64_t)rank + 2;
    store_bits(s->dtype, elem, (uint64_t)v);
  }
}

void tu_red_input(const struct tu_red *s, int rank, size_t i, void *elem) {
  const enum hc_dtype t = s->dtype;
  uint64_t h = tu_hash(s->seed ^ ((uint64_t)s->op << 56), (uint64_t)rank, i);
  if (!hc_dtype_is_float(t)) {
    unsigned b = bits_of(t);
    uint64_t v = h;
    if (s->op == HC_PROD) {
      uint64_t k = 1ull << (b / 4);                             /* |v| <= 2^(bits/4): products wrap soon */
      v = is_signed_int(t) ? h % (2 * k + 1) - k : h % (k + 1); /* wraps to two's complement */
    } else if (s->op == HC_AVG) {
      uint64_t tmax = is_signed_int(t) ? (~0ull >> (65 - b)) : (~0ull >> (64 - b));
      uint64_t vmax = tmax / (uint64_t)s->nranks;
      if (is_signed_int(t)) v = h % (2 * vmax + 1) - vmax; /* in [-vmax, vmax], two's complement */
      else v = vmax + 1 == 0 ? h : h % (vmax + 1);
    }
    store_bits(t, elem, v);
    return;
  }
  switch (s->op) {
  case HC_MAX:
  case HC_MIN:
    for (uint64_t k = 1;; k++) {
      store_bits(t, elem, h);
      if (!is_nan_bits(t, elem)) break;
      h = mix64(h + k);
    }
    if (hc_dtype_load(t, elem) == 0.0) memset(elem, 0, hc_dtype_size(t)); /* -0 -> +0 */
    return;
  case HC_PROD: {
    double v = (h & 31) == 0 ? 0.0 : (double[]){0.5, 1.0, 2.0}[(h >> 8) % 3];
    if (s->nranks > 8) v = v == 0.0 ? 0.0 : 1.0;
    hc_dtype_store(t, elem, (h >> 16) & 1 ? -v : v);
    return;
  }
  default: { /* SUM, AVG, PREMULSUM */
    uint64_t vmax;
    int g;
    float_budget(s, &vmax, &g);
    int64_t m = 0;
    if ((size_t)rank % (size_t)g == i % (size_t)g) m = (int64_t)(h % (2 * vmax + 1)) - (int64_t)vmax;
    hc_dtype_store(t, elem, (double)m * float_unit(t));
    return;
  }
  }
}

void tu_red_fill(const struct tu_red *s, int rank, size_t first, size_t count, void *buf) {
  size_t es = hc_dtype_size(s->dtype);
  for (size_t k = 0; k < count; k++) tu_red_input(s, rank, first + k, (char *)buf + k * es);
}

void tu_red_expect(const struct tu_red *s, size_t i, void *elem) {
  const enum hc_dtype t = s->dtype;
  const int n = s->nranks;
  uint8_t in[8], sc[8], best[8];
  if (!hc_dtype_is_float(t)) {
    const bool sg = is_signed_int(t);
    uint64_t acc = 0;
    for (int r = 0; r < n; r++) {
      tu_red_input(s, r, i, in);
      uint64_t v = load_int(t, in);
      switch (s->op) {
      case HC_SUM:
      case HC_AVG: acc = r ? acc + v : v; break;
      case HC_PROD: acc = r ? acc * v : v; break;
      case HC_MAX: acc = r == 0 || (sg ? (int64_t)v > (int64_t)acc : v > acc) ? v : acc; break;
      case HC_MIN: acc = r == 0 || (sg ? (int64_t)v < (int64_t)acc : v < acc) ? v : acc; break;
      default: /* PREMULSUM */
        tu_red_scalar(s, r, sc);
        acc += v * load_int(t, sc);
        break;
      }
    }
    if (s->op == HC_AVG) /* the sum fits by construction; C division truncates */
      acc = sg ? (uint64_t)((int64_t)acc / (int64_t)n) : acc / (uint64_t)n;
    store_bits(t, elem, acc);
    return;
  }
  double acc = 0;
  bool have = false;
  for (int r = 0; r < n; r++) {
    tu_red_input(s, r, i, in);
    double v = hc_dtype_load(t, in);
    switch (s->op) {
    case HC_SUM:
    case HC_AVG: acc += v; break;
    case HC_PROD: acc = r ? acc * v : v; break;
    case HC_MAX:
    case HC_MIN:
      if (!have || (s->op == HC_MAX ? v > acc : v < acc)) {
        acc = v;
        memcpy(best, in, hc_dtype_size(t));
        have = true;
      }
      break;
    default:
      tu_red_scalar(s, r, sc);
      acc += v * hc_dtype_load(t, sc);
      break;
    }
  }
  if (s->op == HC_MAX || s->op == HC_MIN) {
    /* With two ranks or more every element passes through the reduction
     * kernel, whose fp8 store saturates (inf becomes the largest finite
     * value, as NCCL's __NV_SATFINITE); one rank only copies. */
    if (n > 1 && (t == HC_FP8_E4M3 || t == HC_FP8_E5M2)) hc_dtype_store(t, elem, hc_dtype_load(t, best));
    else memcpy(elem, best, hc_dtype_size(t));
    return;
  }
  if (s->op == HC_AVG) acc /= n;
  hc_dtype_store(t, elem, acc);
}

const char *tu_elem_str(enum hc_dtype t, const void *elem, char *buf, size_t len) {
  uint64_t bits = 0;
  size_t es = hc_dtype_size(t);
  memcpy(&bits, elem, es);
  if (hc_dtype_is_float(t))
    snprintf(buf, len, "0x%0*llx (%.9g)", (int)es * 2, (unsigned long long)bits, hc_dtype_load(t, elem));
  else if (is_signed_int(t))
    snprintf(buf, len, "0x%0*llx (%lld)", (int)es * 2, (unsigned long long)bits, (long long)load_int(t, elem));
  else snprintf(buf, len, "0x%0*llx (%llu)", (int)es * 2, (unsigned long long)bits, (unsigned long long)bits);
  return buf;
}

bool tu_compare(enum hc_dtype t, const void *got, const void *expected, size_t count, const char *what) {
  size_t es = hc_dtype_size(t);
  if (count == 0 || memcmp(got, expected, count * es) == 0) return CHECK(true, "%s", what);
  size_t first = SIZE_MAX, ndiff = 0;
  for (size_t i = 0; i < count; i++)
    if (memcmp((const char *)got + i * es, (const char *)expected + i * es, es) != 0) {
      if (first == SIZE_MAX) first = i;
      ndiff++;
    }
  char e[80], g[80];
  return CHECK(false, "%s: %zu of %zu elements differ; first at index %zu: expected %s, got %s", what, ndiff, count,
               first, tu_elem_str(t, (const char *)expected + first * es, e, sizeof(e)),
               tu_elem_str(t, (const char *)got + first * es, g, sizeof(g)));
}
