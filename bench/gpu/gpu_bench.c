/*
 * GPU staging bound and cross-group all-reduce, on one GPU machine:
 *  1. pinned device->host and host->device copy rates (1 GiB, the device
 *     backend's own copies on one stream), each alone and both at once on
 *     two streams (what a pipeline that overlaps them can reach);
 *  2. all-reduce busbw, float sum, 1 KiB .. 1 GiB, the two ranks as threads
 *     of one process (one CUDA context: the GPU runs both at once, as two
 *     GPUs would), or with GPU_BENCH_PROCESSES=1 as two processes (two
 *     contexts, which one GPU time-slices: slower, not what two GPUs see):
 *     A. two GPU ranks on device 0 in different groups;
 *     B. one GPU rank and one CPU rank;
 *     with efficiency = busbw / bound. The bound: hetccl's 2-rank ring moves,
 *     per rank, B bytes device->host (its half for the peer's reduction,
 *     then its reduced half for the all-gather) and B bytes host->device
 *     (the peer's halves, the same way) for an all-reduce of B bytes, as
 *     does the one step that two GPU ranks take up to a window slot (its
 *     whole vector out, the peer's in); the shm window between the ranks
 *     adds no host copy.
 *     In A both ranks share one device's link, so time >= 2B / min(D2H, H2D)
 *     and, as the two directions run at once, time >= 4B / both: busbw
 *     (= algbw for 2 ranks) <= min(min(D2H, H2D) / 2, both / 4). In B only
 *     one rank copies: busbw <= min(min(D2H, H2D), both / 2).
 * Exits 77 where there is no CUDA device.
 *   gpu_bench [max_bytes]      default 1 GiB
 * GPU_BENCH_ONLY=A or B runs that case alone.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "device/device.h"
#include "hetccl.h"
#include "timing.h"
#include "util/util.h"

static const struct hc_dev_ops *gpu; /* in the children only: the parent never touches the driver */
static size_t max_bytes = 1ull << 30;
static bool gpu_rank[2];

/* What the children report, in memory shared with the parent. */
static struct shared {
  pthread_barrier_t bar; /* the two ranks' */
  double times[64];
  int ntimes;
  double sync_us, call_us, d2h, h2d, both; /* both: GB/s of the two directions at once, in all */
  double host_copy[3];                     /* GB/s, 1, 4 and 8 threads (host_copy_threads) */
  double small_us[2][8];                   /* [in place][size]: call to stream done, median */
  bool no_gpu;
  /* Rank 0 makes the id: made in the parent, its bootstrap thread could
   * hold a lock (the allocator's) at the fork, and a child would inherit
   * it held. */
  hetcclUniqueId id;
  atomic_int id_made; /* per run: 0, then 1 (or -1 when it failed) */
} * sh;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Pinned copies of 1 GiB: device->host, host->device, or both at once on
 * two streams, as a pipelined all-reduce overlaps them. GB/s: the bytes of
 * every direction over the time; 0 where the memory or a stream is not
 * there. */
static double copy_rate(bool to_host, bool to_device) {
  const size_t n = 1ull << 30;
  const bool way[2] = {to_host, to_device}; /* [0]: d[0] -> h[0], [1]: h[1] -> d[1] */
  void *d[2] = {NULL, NULL}, *h[2] = {NULL, NULL};
  hc_stream_t s[2];
  bool made[2] = {false, false}, ok = true;
  double rate = 0;
  hc_dev_set_device(gpu, 0);
  for (int i = 0; i < 2 && ok; i++)
    if (way[i]) {
      ok = (made[i] = hc_dev_stream_create(gpu, 0, &s[i]) == HC_OK) && hc_dev_mem_alloc(gpu, 0, n, &d[i]) == HC_OK &&
           hc_dev_host_alloc(gpu, n, &h[i]) == HC_OK;
      if (ok) memset(h[i], 1, n);
    }
  if (ok) {
    double t0 = 0;
    for (int round = 0; round < 6; round++) {
      if (round == 1) { /* after a round that warms the copies up */
        for (int i = 0; i < 2; i++)
          if (way[i]) hc_dev_stream_sync(gpu, s[i]);
        t0 = now();
      }
      if (to_host) hc_dev_copy(gpu, h[0], d[0], n, s[0]);
      if (to_device) hc_dev_copy(gpu, d[1], h[1], n, s[1]);
    }
    for (int i = 0; i < 2; i++)
      if (way[i]) hc_dev_stream_sync(gpu, s[i]);
    rate = 5.0 * (to_host + to_device) * (double)n / (now() - t0) / 1e9;
  }
  for (int i = 0; i < 2; i++) {
    if (d[i]) hc_dev_mem_free(gpu, 0, d[i]);
    if (h[i]) hc_dev_host_free(gpu, h[i]);
    if (made[i]) hc_dev_stream_destroy(gpu, s[i]);
  }
  return rate;
}

/* What the CPU rank of B moves its bytes with: the host backend's copy of
 * 256 MiB, alone and split with its helper threads (device/host_pool.c). */
static const int host_copy_threads[3] = {1, 4, 8};

static void host_rates(int unused) {
  (void)unused;
  const size_t n = 256u << 20;
  char *src = malloc(n), *dst = malloc(n);
  if (src == NULL || dst == NULL) return;
  memset(src, 1, n);
  memset(dst, 2, n);
  for (int k = 0; k < 3; k++) {
    struct hc_host_pool *pool = NULL;
    if (hc_host_pool_create(host_copy_threads[k] - 1, 1u << 20, &pool) != HC_OK) break;
    hc_dev_host.copy(NULL, dst, src, n, pool);
    double t0 = now();
    for (int i = 0; i < 5; i++) hc_dev_host.copy(NULL, dst, src, n, pool);
    sh->host_copy[k] = 5.0 * (double)n / (now() - t0) / 1e9;
    hc_host_pool_destroy(pool);
  }
  free(src);
  free(dst);
}

/* What the host pays to enqueue each driver operation of a small GPU
 * call, alone and on an idle stream: the part of "the call itself" that is
 * the driver's, not hetccl's. */
static void enqueue_costs(hc_stream_t s, void *d, uint64_t *flags) {
  enum { N = 200 };
  double capture[N], copy[N], batch[N], reduce[N], flag_write[N];
  const struct hc_reduce_args one = {.dst = d, .src0 = d, .src1 = d, .count = 1, .dtype = HC_FLOAT32, .op = HC_SUM};
  for (int i = 0; i < N; i++) {
    const struct hc_flag_op ops[] = {{&flags[2], (uint64_t)i, false},
                                     {&flags[3], (uint64_t)i, false},
                                     {&flags[4], (uint64_t)i, false},
                                     {&flags[4], (uint64_t)i, true}};
    bool capturing;
    double t0 = now();
    hc_dev_stream_capturing(gpu, s, &capturing);
    double t1 = now();
    hc_dev_copy(gpu, &flags[8], d, 4, s);
    double t2 = now();
    hc_dev_flag_batch(gpu, s, ops, (int)HC_ARRAY_LEN(ops));
    double t3 = now();
    hc_dev_reduce(gpu, &one, s);
    double t4 = now();
    hc_dev_flag_write(gpu, s, &flags[5], (uint64_t)i);
    double t5 = now();
    hc_dev_stream_sync(gpu, s);
    capture[i] = t1 - t0, copy[i] = t2 - t1, batch[i] = t3 - t2, reduce[i] = t4 - t3, flag_write[i] = t5 - t4;
  }
  const double c = median(capture, N), y = median(copy, N), b = median(batch, N), r = median(reduce, N),
               w = median(flag_write, N);
  printf("enqueue cost on the host, median us: capture check %.1f, 4-byte copy %.1f, flag batch (3 writes, 1 "
         "wait) %.1f, reduction kernel %.1f, flag write %.1f; sum %.1f\n",
         c * 1e6, y * 1e6, b * 1e6, r * 1e6, w * 1e6, (c + y + b + r + w) * 1e6);
}

/* Median seconds from enqueueing 4 bytes from device memory into pinned
 * host memory until an event behind them is seen done: by the copy engine,
 * or by_kernel (a one-element reduction, where the driver lets kernels use
 * host addresses: what a send by kernel instead of copy engine would take). */
static double put4_latency(hc_stream_t s, hc_event_t ev, void *host, const void *dev, bool by_kernel) {
  enum { N = 200 };
  double t[N];
  const struct hc_reduce_args put = {
      .dst = host, .src0 = dev, .src1 = dev, .count = 1, .dtype = HC_FLOAT32, .op = HC_SUM};
  for (int i = 0; i < N; i++) {
    double t0 = now();
    int done = 0;
    if (by_kernel) hc_dev_reduce(gpu, &put, s);
    else hc_dev_copy(gpu, host, dev, 4, s);
    hc_dev_event_record(gpu, ev, s);
    while (!done) hc_dev_event_query(gpu, ev, &done);
    t[i] = now() - t0;
  }
  return median(t, N);
}

/* The primitives a small GPU collective is made of, each timed alone:
 * the host releases a stream waiting on a pinned flag and sees the
 * stream's answer flag; a 4-byte device->host copy, and the same 4 bytes
 * written by a kernel, seen done by an event; then enqueue_costs. */
static void primitive_latency(void) {
  enum { N = 200 };
  double t[N];
  hc_stream_t s;
  hc_dev_set_device(gpu, 0);
  hc_dev_stream_create(gpu, 0, &s);
  uint64_t *flags = NULL;
  void *d = NULL;
  hc_event_t ev;
  /* Every word used below lies inside the allocation: the driver copies
   * to an address outside any pinned allocation as it does to pageable
   * memory, synchronously. */
  enum { FLAG_WORDS = 16 };
  if (hc_dev_host_alloc(gpu, FLAG_WORDS * sizeof(*flags), (void **)&flags) != HC_OK ||
      hc_dev_mem_alloc(gpu, 0, 64, &d) != HC_OK)
    return;
  hc_dev_event_create(gpu, &ev);
  flags[0] = flags[1] = 0;
  for (uint64_t i = 1; i <= N; i++) {
    hc_dev_flag_wait(gpu, s, &flags[0], i);
    hc_dev_flag_write(gpu, s, &flags[1], i);
    double t0 = now();
    __atomic_store_n(&flags[0], i, __ATOMIC_RELEASE);
    while (__atomic_load_n(&flags[1], __ATOMIC_ACQUIRE) != i) {}
    t[i - 1] = now() - t0;
  }
  printf("stream flag round trip (host -> stream wait -> stream write -> host): median %.1f us\n", median(t, N) * 1e6);
  printf("4-byte device->host copy, enqueued until its event is seen: median %.1f us\n",
         put4_latency(s, ev, &flags[8], d, false) * 1e6);
  printf("4-byte kernel write into pinned host memory, enqueued until its event is seen: median %.1f us\n",
         put4_latency(s, ev, &flags[8], d, true) * 1e6);
  enqueue_costs(s, d, flags);
  hc_dev_event_destroy(gpu, ev);
  hc_dev_stream_sync(gpu, s);
  hc_dev_mem_free(gpu, 0, d);
  hc_dev_host_free(gpu, flags);
  hc_dev_stream_destroy(gpu, s);
}

/* One synchronous all-reduce at a time (call, then wait for the stream);
 * *call_s: how long the call itself took (enqueueing, for a GPU rank). */
static double sync_latency(hetcclComm_t comm, const void *in, void *out, size_t count, hc_stream_t s, double *call_s) {
  enum { N = 100 };
  double t[N], c[N];
  for (int i = 0; i < N; i++) {
    pthread_barrier_wait(&sh->bar);
    double t0 = now();
    hetcclAllReduce(in, out, count, hetcclFloat, hetcclSum, comm, s);
    c[i] = now() - t0;
    if (s) hc_dev_stream_sync(gpu, s);
    t[i] = now() - t0;
  }
  *call_s = median(c, N);
  return median(t, N);
}

/* Small sizes one call at a time, in place and out of place: the latency
 * a size class or a buffer layout adds, which the busbw sweep hides. */
static const size_t small_bytes[] = {4, 64, 1024, 2048, 8192, 65536};

static void small_latencies(int rank, hetcclComm_t comm, void *const buf[2], hc_stream_t s) {
  for (int in_place = 0; in_place < 2; in_place++)
    for (size_t i = 0; i < HC_ARRAY_LEN(small_bytes); i++) {
      double call;
      const double t = sync_latency(comm, buf[0], buf[in_place ? 0 : 1], small_bytes[i] / 4, s, &call);
      if (rank == 0) sh->small_us[in_place][i] = t * 1e6;
    }
}

static void rank_main(int rank) {
  hetcclConfig_t cfg = HETCCL_CONFIG_INITIALIZER;
  char group[8];
  snprintf(group, sizeof(group), "g%d", rank);
  cfg.groupName = group;
  cfg.deviceKind = gpu_rank[rank] ? hetcclDeviceCuda : hetcclDeviceHost;
  hetcclComm_t comm;
  hc_stream_t s = NULL;
  if (gpu_rank[rank]) {
    hc_dev_set_device(gpu, 0);
    hc_dev_stream_create(gpu, 0, &s);
  }
  if (rank == 0) atomic_store(&sh->id_made, hetcclGetUniqueId(&sh->id) == hetcclSuccess ? 1 : -1);
  for (double end = now() + 60; atomic_load(&sh->id_made) == 0 && now() < end;) usleep(1000);
  if (atomic_load(&sh->id_made) != 1 || hetcclCommInitRankConfig(&comm, 2, sh->id, rank, &cfg) != hetcclSuccess) {
    fprintf(stderr, "rank %d: init failed: %s\n", rank, hetcclGetLastError(NULL));
    exit(1);
  }
  void *buf[2];
  const size_t buf_bytes = HC_MAX(max_bytes, small_bytes[HC_ARRAY_LEN(small_bytes) - 1]);
  for (int b = 0; b < 2; b++) {
    if (gpu_rank[rank]) hc_dev_mem_alloc(gpu, 0, buf_bytes, &buf[b]);
    else buf[b] = calloc(1, buf_bytes);
  }
  double call;
  double lat = sync_latency(comm, buf[0], buf[0], 1, s, &call);
  if (rank == 0) sh->sync_us = lat * 1e6, sh->call_us = call * 1e6;
  small_latencies(rank, comm, buf, s);
  sh->ntimes = 0;
  for (size_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
    int iters = bytes <= (1 << 20) ? 50 : bytes <= (64 << 20) ? 10 : 3;
    size_t count = bytes / 4;
    hetcclAllReduce(buf[0], buf[1], count, hetcclFloat, hetcclSum, comm, s); /* warm-up */
    if (s) hc_dev_stream_sync(gpu, s);
    pthread_barrier_wait(&sh->bar);
    double t0 = now();
    for (int i = 0; i < iters; i++) hetcclAllReduce(buf[0], buf[1], count, hetcclFloat, hetcclSum, comm, s);
    if (s) hc_dev_stream_sync(gpu, s);
    double t = (now() - t0) / iters;
    pthread_barrier_wait(&sh->bar);
    if (rank == 0) sh->times[sh->ntimes++] = t;
  }
  for (int b = 0; b < 2; b++) {
    if (gpu_rank[rank]) hc_dev_mem_free(gpu, 0, buf[b]);
    else free(buf[b]);
  }
  hetcclCommDestroy(comm);
  if (s) hc_dev_stream_destroy(gpu, s);
}

static void *rank_thread(void *arg) {
  rank_main((int)(long)arg);
  return NULL;
}

static void both_ranks(int unused) {
  (void)unused;
  pthread_t t[2];
  for (long r = 0; r < 2; r++) pthread_create(&t[r], NULL, rank_thread, (void *)r);
  for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
}

/* Runs fn(arg) in a child process; false when it failed. */
static bool in_child(void (*fn)(int), int arg, pid_t *pid) {
  fflush(stdout);
  *pid = fork();
  if (*pid < 0) return false;
  if (*pid > 0) return true;
  gpu = hc_dev_get(HC_MEM_CUDA);
  fn(arg);
  fflush(stdout);
  _exit(0);
}

static bool children_ok(const pid_t *pid, int n) {
  bool ok = true;
  for (int i = 0; i < n; i++) {
    int st = 0;
    ok &= waitpid(pid[i], &st, 0) == pid[i] && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  return ok;
}

static void run(const char *title, bool g0, bool g1, double bound) {
  gpu_rank[0] = g0;
  gpu_rank[1] = g1;
  atomic_store(&sh->id_made, 0);
  const bool processes = getenv("GPU_BENCH_PROCESSES") && atoi(getenv("GPU_BENCH_PROCESSES"));
  pid_t pid[2];
  for (int r = 0; r < (processes ? 2 : 1); r++)
    if (!in_child(processes ? rank_main : both_ranks, r, &pid[r])) exit(1);
  if (!children_ok(pid, processes ? 2 : 1)) {
    printf("\n%s: a rank failed\n", title);
    return;
  }
  const double *times = sh->times;
  printf("\n%s, ranks as %s (bound %.1f GB/s)\n4-byte all-reduce, one at a time, call to stream done: median %.1f us "
         "(the call itself: %.1f us)\n",
         title, processes ? "processes" : "threads", bound, sh->sync_us, sh->call_us);
  printf("one at a time, call to stream done, median (us):\n%12s %10s %12s\n", "bytes", "in place", "out of place");
  for (size_t k = 0; k < HC_ARRAY_LEN(small_bytes); k++)
    printf("%12zu %10.1f %12.1f\n", small_bytes[k], sh->small_us[1][k], sh->small_us[0][k]);
  printf("back to back, out of place:\n%12s %10s %10s %8s\n", "bytes", "time(us)", "busbw", "eff");
  int i = 0;
  for (size_t bytes = 1024; bytes <= max_bytes; bytes *= 4, i++) {
    double busbw = (double)bytes / times[i] / 1e9;
    printf("%12zu %10.1f %10.2f %7.0f%%\n", bytes, times[i] * 1e6, busbw, 100.0 * busbw / bound);
  }
}

static void primitives(int unused) {
  (void)unused;
  if (gpu == NULL) {
    sh->no_gpu = true;
    return;
  }
  primitive_latency();
  sh->d2h = copy_rate(true, false);
  sh->h2d = copy_rate(false, true);
  sh->both = copy_rate(true, true);
}

int main(int argc, char **argv) {
  if (argc > 1) max_bytes = strtoull(argv[1], NULL, 0);
  /* Streams of one process share the device's hardware queues, 8 by
   * default: a stream waiting on a flag would hold up whatever another
   * rank queued behind it there. */
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 1;
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&sh->bar, &attr, 2);
  pid_t pid;
  if (!in_child(primitives, 0, &pid) || !children_ok(&pid, 1)) return 1;
  if (sh->no_gpu) {
    printf("skip: no CUDA device\n");
    return 77;
  }
  double d2h = sh->d2h, h2d = sh->h2d, both = sh->both;
  double link = d2h < h2d ? d2h : h2d;
  double both_ways = both > 0 ? both : 2 * link; /* not measured: the two directions as independent */
  printf("pinned copies, 1 GiB: device->host %.1f GB/s, host->device %.1f GB/s, both at once %.1f GB/s in all\n", d2h,
         h2d, both);
  if (in_child(host_rates, 0, &pid) && children_ok(&pid, 1))
    printf("host copies, 256 MiB: %.1f GB/s with %d thread, %.1f with %d, %.1f with %d\n", sh->host_copy[0],
           host_copy_threads[0], sh->host_copy[1], host_copy_threads[1], sh->host_copy[2], host_copy_threads[2]);
  const char *only = getenv("GPU_BENCH_ONLY");
  if (only == NULL || strcmp(only, "A") == 0)
    run("A: all-reduce, 2 GPU ranks on device 0, two groups", true, true, HC_MIN(link / 2, both_ways / 4));
  if (only == NULL || strcmp(only, "B") == 0)
    run("B: all-reduce, 1 GPU rank + 1 CPU rank", true, false, HC_MIN(link, both_ways / 2));
  return 0;
}
