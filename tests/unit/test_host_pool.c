/*
 * The host backend's helper pool (device/host_pool.c) and the backend's
 * copies, reductions and scalings split through it (device/host.c):
 * - every unit of a job is run exactly once, in parts of whole cache lines;
 * - helpers do take parts (a part that waits until another thread has
 *   run one ends only if a helper did);
 * - below the split size, without a pool, or while another caller's job
 *   runs, nothing is split and the caller works alone;
 * - copies, reductions and scalings through the pool against values
 *   computed here element by element, with two callers at once;
 * - a pool destroyed with its helpers asleep, spinning or never started.
 * Run: ./test_host_pool (no arguments).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device/device.h"
#include "testutil.h"

#define MAX_UNITS (3u << 20)

struct coverage {
  atomic_uchar *runs; /* per unit */
  size_t unit;
  atomic_int bad_parts; /* a part not of whole lines, except the last */
  size_t n;
};

static void cover_part(const void *job, size_t begin, size_t end) {
  const struct coverage *c = job;
  struct coverage *w = (struct coverage *)c;
  if (((begin * c->unit) % 64 != 0 || ((end * c->unit) % 64 != 0 && end != c->n)) && 64 % c->unit == 0)
    atomic_fetch_add(&w->bad_parts, 1);
  for (size_t i = begin; i < end; i++) atomic_fetch_add_explicit(&c->runs[i], 1, memory_order_relaxed);
}

static void check_coverage(struct hc_host_pool *pool) {
  struct coverage c = {.runs = calloc(MAX_UNITS, 1)};
  const size_t units[] = {1, 2, 4, 8};
  const size_t counts[] = {1u << 20, (1u << 20) + 3, 3u << 20};
  for (size_t u = 0; u < HC_ARRAY_LEN(units); u++)
    for (size_t k = 0; k < HC_ARRAY_LEN(counts); k++) {
      c.unit = units[u];
      c.n = counts[k];
      memset((void *)c.runs, 0, MAX_UNITS);
      atomic_store(&c.bad_parts, 0);
      tu_set_case("coverage, unit %zu, n %zu", c.unit, c.n);
      CHECK(hc_host_pool_run(pool, cover_part, &c, c.n, c.unit), "a job of %zu bytes was not split", c.n * c.unit);
      size_t wrong = 0;
      for (size_t i = 0; i < c.n; i++) wrong += atomic_load(&c.runs[i]) != 1;
      CHECK(wrong == 0, "%zu of %zu units not run exactly once", wrong, c.n);
      CHECK(atomic_load(&c.bad_parts) == 0, "%d parts cut a cache line", atomic_load(&c.bad_parts));
    }
  free((void *)c.runs);
}

/* A part that returns once a part has run on a thread other than the
 * caller's (or after 10 s): the job ends early only if a helper took one. */
struct helpers_seen {
  pthread_t caller;
  atomic_int others;
  atomic_bool waited; /* once: the caller's other parts return at once */
};

static void helper_part(const void *job, size_t begin, size_t end) {
  (void)begin;
  (void)end;
  struct helpers_seen *h = (struct helpers_seen *)job;
  if (!pthread_equal(pthread_self(), h->caller)) {
    atomic_fetch_add(&h->others, 1);
    return;
  }
  if (atomic_exchange(&h->waited, true)) return;
  for (int i = 0; i < 10000 && atomic_load(&h->others) == 0; i++) usleep(1000);
}

static void check_helpers_take_parts(struct hc_host_pool *pool) {
  tu_set_case("helpers take parts");
  struct helpers_seen h = {.caller = pthread_self()};
  CHECK(hc_host_pool_run(pool, helper_part, &h, 1u << 20, 1), "a job of 1 MiB was not split");
  CHECK(atomic_load(&h.others) > 0, "no helper ran a part");
}

static void count_part(const void *job, size_t begin, size_t end) {
  (void)begin;
  (void)end;
  atomic_fetch_add((atomic_int *)job, 1);
}

static void check_not_split(struct hc_host_pool *pool) {
  tu_set_case("not split");
  atomic_int calls = 0;
  CHECK(!hc_host_pool_run(NULL, count_part, &calls, 1u << 20, 1), "no pool, yet split");
  CHECK(!hc_host_pool_run(pool, count_part, &calls, (1u << 20) - 1, 1), "below the split size, yet split");
  CHECK(!hc_host_pool_run(pool, count_part, &calls, (1u << 17) - 1, 8), "below the split size, yet split");
  CHECK(atomic_load(&calls) == 0, "a job that was not split ran %d parts", atomic_load(&calls));
  struct hc_host_pool *none;
  CHECK(hc_host_pool_create(0, 1, &none) == HC_OK && none == NULL, "0 helpers made a pool");
}

/* ---- the backend's operations through the pool ---- */

struct op_caller {
  struct hc_host_pool *pool;
  int seed;
};

static void *ops_through_pool(void *arg) {
  const struct op_caller *me = arg;
  /* floats; not a whole number of lines; above and below HC_HOST_NT_BYTES */
  const size_t sizes[2] = {(5u << 20) / 4 + 7, (2u << 20) / 4 + 3}, n_max = sizes[0];
  size_t n = n_max;
  float *a = malloc(n_max * 4), *b = malloc(n_max * 4), *d = malloc(n_max * 4);
  int32_t *ia = malloc(n * 4), *ib = malloc(n * 4), *id = malloc(n * 4);
  uint8_t *ba = malloc(n * 4), *bd = malloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    a[i] = (float)((i * 7 + (size_t)me->seed) % 1000) / 8.0f;
    b[i] = (float)((i * 13 + 5) % 777) / 16.0f;
    ia[i] = (int32_t)((i * 2654435761u + (unsigned)me->seed) % 200001) - 100000;
    ib[i] = (int32_t)((i * 40503u) % 200001) - 100000;
  }
  for (size_t i = 0; i < n * 4; i++) ba[i] = (uint8_t)(i * 31 + (size_t)me->seed);
  const struct hc_dev_ops *host = &hc_dev_host;
  for (int round = 0; round < 4; round++) {
    n = sizes[round % 2];
    tu_set_case("caller %d, round %d, %zu elements", me->seed, round, n);
    memset(bd, 0, n * 4);
    CHECK(host->copy(NULL, bd + 1, ba + 1, n * 4 - 1, me->pool) == HC_OK, "copy failed");
    CHECK(bd[0] == 0 && memcmp(bd + 1, ba + 1, n * 4 - 1) == 0, "copy through the pool differs");
    struct hc_reduce_args r = {.dst = d, .src0 = a, .src1 = b, .count = n, .dtype = HC_FLOAT32, .op = HC_SUM};
    CHECK(host->reduce(NULL, &r, me->pool) == HC_OK, "reduce failed");
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += d[i] != (float)((double)a[i] + (double)b[i]);
    CHECK(wrong == 0, "float sum: %zu of %zu elements wrong", wrong, n);
    memcpy(id, ia, n * 4); /* in place, dst == src0 */
    r = (struct hc_reduce_args){.dst = id, .src0 = id, .src1 = ib, .count = n, .dtype = HC_INT32, .op = HC_MAX};
    CHECK(host->reduce(NULL, &r, me->pool) == HC_OK, "reduce failed");
    wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += id[i] != (ia[i] > ib[i] ? ia[i] : ib[i]);
    CHECK(wrong == 0, "int32 max in place: %zu of %zu elements wrong", wrong, n);
    struct hc_scale_args sc = {.dst = d, .src = a, .count = n, .dtype = HC_FLOAT32, .kind = HC_SCALE_DIV, .divisor = 3};
    CHECK(host->scale(NULL, &sc, me->pool) == HC_OK, "scale failed");
    wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += d[i] != a[i] / 3.0f;
    CHECK(wrong == 0, "float divide: %zu of %zu elements wrong", wrong, n);
  }
  /* Overlapping ranges are moved whole, as memmove does. */
  n = n_max;
  tu_set_case("caller %d, overlapping copy", me->seed);
  memcpy(bd, ba, n * 4);
  CHECK(host->copy(NULL, bd + 4096, bd, n * 4 - 4096, me->pool) == HC_OK, "copy failed");
  CHECK(memcmp(bd, ba, 4096) == 0 && memcmp(bd + 4096, ba, n * 4 - 4096) == 0, "overlapping copy differs");
  free(a), free(b), free(d), free(ia), free(ib), free(id), free(ba), free(bd);
  return NULL;
}

static void check_ops(struct hc_host_pool *pool) {
  struct op_caller callers[2] = {{pool, 1}, {pool, 2}};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, ops_through_pool, &callers[1]) == 0, "thread");
  ops_through_pool(&callers[0]);
  pthread_join(t, NULL);
}

static void check_lifetimes(void) {
  tu_set_case("lifetimes");
  struct hc_host_pool *pool;
  CHECK(hc_host_pool_create(3, 4096, &pool) == HC_OK && pool, "create"); /* never started */
  hc_host_pool_destroy(pool);
  CHECK(hc_host_pool_create(3, 4096, &pool) == HC_OK && pool, "create");
  atomic_int calls = 0;
  CHECK(hc_host_pool_run(pool, count_part, &calls, 1u << 20, 1), "not split");
  hc_host_pool_destroy(pool); /* helpers still polling */
  CHECK(hc_host_pool_create(2, 4096, &pool) == HC_OK && pool, "create");
  CHECK(hc_host_pool_run(pool, count_part, &calls, 1u << 20, 1), "not split");
  usleep(300 * 1000); /* helpers asleep */
  CHECK(hc_host_pool_run(pool, count_part, &calls, 1u << 20, 1), "not split after a sleep");
  hc_host_pool_destroy(pool);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  struct hc_host_pool *pool;
  if (hc_host_pool_create(3, 1u << 20, &pool) != HC_OK || pool == NULL) {
    printf("FAIL: no pool\n");
    return 1;
  }
  check_not_split(pool);
  check_coverage(pool);
  check_helpers_take_parts(pool);
  check_ops(pool);
  hc_host_pool_destroy(pool);
  check_lifetimes();
  return tu_finish("host_pool");
}
