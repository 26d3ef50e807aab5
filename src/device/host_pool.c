/*
 * The host backend's helper threads: they take parts of a CPU rank's large
 * copies, reductions and scalings, so that its memory work is not held to
 * what one core moves (10-15 GB/s, where a GPU peer's copy engines move 55
 * each way). One pool per comm (hc_links.host_pool), passed to the host
 * backend as its stream (host.c).
 *
 * A job is cut into parts, claimed one at a time through one atomic word
 * that holds the job's number, its part count and the next part. The
 * calling thread claims parts too and then waits only for parts a helper
 * has begun, each a bounded memory operation of a thread of this process:
 * a helper that has not woken delays nothing, the caller takes its parts.
 * A helper reads the job's fields only after its claim succeeded, and the
 * job cannot end before that part is done, so the fields it reads are the
 * job's own.
 *
 * Idle helpers poll for HC_HOST_POOL_SPIN_NS (the copies and reductions of
 * one plan come back to back), pausing, not yielding: a yield is a system
 * call, and a polling helper shares its core with the caller's threads
 * where cores are hyperthreads. Then they sleep on a condition variable until
 * the next job or the pool's end; a sleeping helper waits for work, not for
 * a peer, so that wait has no deadline.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "device.h"

#ifndef HC_HOST_POOL_SPIN_NS
#define HC_HOST_POOL_SPIN_NS 50000ull
#endif
/* Parts per thread of a job: a helper that wakes late still finds some. */
#define HC_HOST_POOL_PARTS_PER_THREAD 4
#define HC_HOST_POOL_MIN_PART_BYTES (128u << 10)
#define HC_HOST_POOL_MAX_HELPERS 64
/* The default's ceilings, measured on the 16-CPU GPU machines
 * (bench/gpu/README.md, 2026-12-06). A CPU rank with a GPU peer on its
 * host carries that GPU's bytes through its memory: with 3 helpers it
 * moved 11-20 GB/s of all-reduce from 16 MiB, with 7 22-32 (since helpers
 * poll 50 us instead of 200 and window pieces are reduced in their slots;
 * before those, 7 lost to 3). Two CPU-only ranks, unbound, ran 10-20 %
 * slower with 7 than with 3. */
#define HC_HOST_POOL_AUTO_HELPERS_MAX 3
#define HC_HOST_POOL_AUTO_HELPERS_MAX_GPU_PEER 7

/* The claim word: job number (32 bits) | part count (16) | next part (16). */
#define CLAIM(job, nparts, next) (((uint64_t)(job) << 32) | ((uint64_t)(nparts) << 16) | (uint64_t)(next))
#define CLAIM_JOB(c) ((uint32_t)((c) >> 32))
#define CLAIM_NPARTS(c) ((unsigned)(((c) >> 16) & 0xffff))
#define CLAIM_NEXT(c) ((unsigned)((c)&0xffff))

struct hc_host_pool {
  int nhelpers;       /* wanted */
  int nstarted;       /* running; fewer when a thread could not start */
  size_t split_bytes; /* jobs from this size are split */
  pthread_t threads[HC_HOST_POOL_MAX_HELPERS];
  pthread_mutex_t lock;
  pthread_cond_t wake;
  atomic_bool stop;
  atomic_int nsleeping; /* helpers in (or entering) the condition wait */
  atomic_flag busy;     /* a caller is running a job */
  atomic_ullong claim;
  atomic_uint parts_done;
  uint32_t jobs; /* jobs posted; the caller's */
  /* The job: written by the caller before it publishes claim. */
  hc_host_part_fn fn;
  const void *job;
  size_t n, part;
};

static void cpu_relax(void) {
#ifdef __SSE2__
  _mm_pause();
#endif
}

/* Claims the next part of job number job; -1 when none is left. */
static int part_claim(struct hc_host_pool *pool, uint32_t job) {
  uint64_t c = atomic_load_explicit(&pool->claim, memory_order_acquire);
  while (CLAIM_JOB(c) == job && CLAIM_NEXT(c) < CLAIM_NPARTS(c))
    if (atomic_compare_exchange_weak_explicit(&pool->claim, &c, c + 1, memory_order_acq_rel, memory_order_acquire))
      return (int)CLAIM_NEXT(c);
  return -1;
}

static void parts_run(struct hc_host_pool *pool, uint32_t job) {
  int k;
  while ((k = part_claim(pool, job)) >= 0) {
    size_t begin = (size_t)k * pool->part;
    pool->fn(pool->job, begin, HC_MIN(begin + pool->part, pool->n));
    atomic_fetch_add_explicit(&pool->parts_done, 1, memory_order_release);
  }
}

static void *helper_main(void *arg) {
  struct hc_host_pool *pool = arg;
  uint32_t seen = CLAIM_JOB(atomic_load(&pool->claim));
  uint64_t idle_since = hc_now_ns();
  while (!atomic_load_explicit(&pool->stop, memory_order_relaxed)) {
    uint32_t job = CLAIM_JOB(atomic_load_explicit(&pool->claim, memory_order_acquire));
    if (job != seen) {
      seen = job;
      parts_run(pool, job);
      idle_since = hc_now_ns();
      continue;
    }
    if (hc_now_ns() - idle_since < HC_HOST_POOL_SPIN_NS) {
      cpu_relax();
      continue;
    }
    /* nsleeping before the claim's last load, the caller's claim before
     * its load of nsleeping (seq_cst both): one of the two sees the other,
     * so a job is never posted past a helper that goes to sleep. */
    pthread_mutex_lock(&pool->lock);
    atomic_fetch_add(&pool->nsleeping, 1);
    while (!atomic_load(&pool->stop) && CLAIM_JOB(atomic_load(&pool->claim)) == seen)
      pthread_cond_wait(&pool->wake, &pool->lock);
    atomic_fetch_sub(&pool->nsleeping, 1);
    pthread_mutex_unlock(&pool->lock);
    idle_since = hc_now_ns();
  }
  return NULL;
}

hc_result_t hc_host_pool_create(int helpers, size_t split_bytes, struct hc_host_pool **out) {
  *out = NULL;
  if (helpers <= 0) return HC_OK;
  struct hc_host_pool *pool;
  HC_TRY(hc_calloc(&pool, 1, sizeof(*pool), "host helper pool"));
  pool->nhelpers = HC_MIN(helpers, HC_HOST_POOL_MAX_HELPERS);
  pool->split_bytes = HC_MAX(split_bytes, (size_t)1);
  atomic_flag_clear(&pool->busy);
  if (pthread_mutex_init(&pool->lock, NULL) != 0) {
    free(pool);
    return HC_FAIL(HC_ERR_SYSTEM, "host helper pool: cannot create its mutex");
  }
  if (pthread_cond_init(&pool->wake, NULL) != 0) {
    pthread_mutex_destroy(&pool->lock);
    free(pool);
    return HC_FAIL(HC_ERR_SYSTEM, "host helper pool: cannot create its condition variable");
  }
  *out = pool;
  return HC_OK;
}

void hc_host_pool_destroy(struct hc_host_pool *pool) {
  if (pool == NULL) return;
  pthread_mutex_lock(&pool->lock);
  atomic_store(&pool->stop, true);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->lock);
  for (int i = 0; i < pool->nstarted; i++) pthread_join(pool->threads[i], NULL);
  pthread_cond_destroy(&pool->wake);
  pthread_mutex_destroy(&pool->lock);
  free(pool);
}

/* The helpers start with the first job that is split: most comms never
 * split one. A thread that cannot start leaves the pool smaller. */
static void helpers_start(struct hc_host_pool *pool) {
  while (pool->nstarted < pool->nhelpers) {
    if (pthread_create(&pool->threads[pool->nstarted], NULL, helper_main, pool) != 0) {
      HC_INFO(HC_DEV, "host helper pool: %d of %d helper threads started", pool->nstarted, pool->nhelpers);
      pool->nhelpers = pool->nstarted;
      return;
    }
    pool->nstarted++;
  }
}

bool hc_host_pool_run(struct hc_host_pool *pool, hc_host_part_fn fn, const void *job, size_t n, size_t unit) {
  if (pool == NULL || n == 0 || n > SIZE_MAX / unit || n * unit < pool->split_bytes) return false;
  /* One job at a time: a second caller of the comm does its work alone. */
  if (atomic_flag_test_and_set_explicit(&pool->busy, memory_order_acquire)) return false;
  helpers_start(pool);
  if (pool->nstarted == 0) {
    atomic_flag_clear_explicit(&pool->busy, memory_order_release);
    return false;
  }
  /* Parts of whole cache lines, so that no two threads write one line. */
  const size_t line = unit < 64 && 64 % unit == 0 ? 64 / unit : 1;
  const size_t nthreads = (size_t)pool->nstarted + 1;
  size_t part = HC_MAX(HC_DIV_UP(n, nthreads * HC_HOST_POOL_PARTS_PER_THREAD), HC_HOST_POOL_MIN_PART_BYTES / unit);
  part = HC_DIV_UP(part, line) * line;
  const size_t nparts = HC_DIV_UP(n, part); /* < 0xffff: at most 4 per thread */
  pool->fn = fn;
  pool->job = job;
  pool->n = n;
  pool->part = part;
  atomic_store_explicit(&pool->parts_done, 0, memory_order_relaxed);
  const uint32_t number = ++pool->jobs;
  atomic_store(&pool->claim, CLAIM(number, nparts, 0));
  if (atomic_load(&pool->nsleeping) > 0) {
    pthread_mutex_lock(&pool->lock);
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
  }
  parts_run(pool, number);
  /* The parts helpers took are under way: each a bounded copy or
   * reduction by a thread of this process. Yield now and then in case one
   * was preempted. */
  for (unsigned spins = 1; atomic_load_explicit(&pool->parts_done, memory_order_acquire) < nparts; spins++) {
    if (spins % 256 == 0) sched_yield();
    else cpu_relax();
  }
  atomic_flag_clear_explicit(&pool->busy, memory_order_release);
  return true;
}

int hc_host_pool_auto_helpers(int local_ranks, bool gpu_peer) {
  cpu_set_t mine;
  if (local_ranks <= 0 || sched_getaffinity(0, sizeof(mine), &mine) != 0) return 0;
  const int ceiling = gpu_peer ? HC_HOST_POOL_AUTO_HELPERS_MAX_GPU_PEER : HC_HOST_POOL_AUTO_HELPERS_MAX;
  return HC_MAX(HC_MIN(CPU_COUNT(&mine) / local_ranks - 1, ceiling), 0);
}
