/*
 * Collectives with GPU buffers, one process per rank (as PyTorch runs
 * them), on the GPU machine's device 0 (several ranks may share it):
 *   A: 2 GPU ranks in two groups (HETCCL_GROUP-style names per rank);
 *   B: 1 GPU rank + 1 CPU rank;
 *   C: 2 GPU ranks + 2 CPU ranks;
 *   D: the same in two groups of two (GPU, CPU): the hierarchical plans;
 *   E: as D, the GPU ranks on devices 0 and 1: their group runs the vendor
 *      library (NCCL) inside;
 *   F: 4 GPU ranks in two interleaved groups, each with a rank on devices 0
 *      and 1: both groups run NCCL inside.
 * E and F need two devices (skipped with fewer); CI runs them over the
 * fake driver and the fake NCCL (fake_nccl.c), with ranks as threads.
 * GPU_TEST_SCENARIOS=<letters> runs only those scenarios.
 * Every collective x datatype x op, choosing cases so that each pair of
 * (collective, datatype, op, count, in-place) is covered, compared bitwise
 * with the results the test computes itself (testutil's generators), plus
 * a 1 GiB all-reduce, calls of one comm on two streams, and the
 * stream-order test: the stream is held on a
 * host flag, then writes the input, then runs the collective; the call must
 * return while the stream is still held, and the result must include what
 * the stream wrote after the hold.
 * GPU_TEST_KINDS gives the vendor of each GPU rank, rank r taking letter
 * r % length: c (CUDA, the default) or h (HIP). With "ch" a comm holds CUDA
 * and HIP ranks (CI runs it over the fake libcuda and libamdhip64), and
 *   G: 4 GPU ranks, CUDA and HIP alternating, grouped by device kind (the
 *      default, no group names): one group per vendor, the hierarchical
 *      plans across them.
 * Ranks of mixed vendors must be processes (TU_RANKS=threads shares one
 * backend pointer).
 * GPU_TEST_NONBLOCKING=1 makes every comm of the scenarios nonblocking
 * (config blocking = 0): init and finalize are polled until done.
 * GPU_TEST_CALLER_BLOCKS=1 skips the two-stream and stream-order cases,
 * which hold a stream while they call: where the GPU has no kernels, a
 * reduction's host fallback waits for its stream inside the call.
 * Exits 77 (skip) where no device of the kinds asked for is found.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "device/device.h"
#include "testutil.h"

static const struct hc_dev_ops *gpu; /* set by main (threads) or in each rank's process */
static bool as_threads;              /* TU_RANKS=threads, see main */

/* GPU_TEST_KINDS, see the header. */
static enum hc_mem_kind gpu_kind(int rank) {
  const char *k = getenv("GPU_TEST_KINDS");
  if (k == NULL || !k[0]) return HC_MEM_CUDA;
  return k[rank % (int)strlen(k)] == 'h' ? HC_MEM_HIP : HC_MEM_CUDA;
}

static bool kinds_mixed(void) {
  const char *k = getenv("GPU_TEST_KINDS");
  return k && strchr(k, 'c') && strchr(k, 'h');
}

static void rank_gpu(int rank) {
  if (!as_threads) gpu = hc_dev_get(gpu_kind(rank));
}

enum {
  K_ALLREDUCE,
  K_BROADCAST,
  K_REDUCE,
  K_ALLGATHER,
  K_REDUCESCATTER,
  K_ALLTOALL,
  K_GATHER,
  K_SCATTER,
  K_SENDRECV,
  K_NCOLL
};
static const char *const kname[K_NCOLL] = {"AllReduce", "Broadcast", "Reduce",  "AllGather", "ReduceScatter",
                                           "AlltoAll",  "Gather",    "Scatter", "SendRecv"};
static const enum hc_redop ops[] = {HC_SUM, HC_PROD, HC_MAX, HC_MIN, HC_AVG, HC_PREMULSUM};
static const size_t counts[] = {0, 1, 7, 1023, (1u << 20) + 3};

struct scenario {
  const char *name;
  int nranks;
  bool gpu_rank[4];
  const char *groups; /* a letter per rank; NULL: every rank its own group */
  int device[4];      /* of each GPU rank */
};
static const struct scenario scenarios[] = {
    {"A: 2 GPU ranks, two groups", 2, {true, true}, NULL, {0}},
    {"B: 1 GPU + 1 CPU", 2, {true, false}, NULL, {0}},
    {"C: 2 GPU + 2 CPU", 4, {true, false, true, false}, NULL, {0}},
    /* groups of two: the hierarchical plans */
    {"D: 2 GPU + 2 CPU, a GPU group and a CPU group", 4, {true, false, true, false}, "gcgc", {0}},
    {"E: 2 GPU (devices 0, 1) + 2 CPU, a GPU group and a CPU group",
     4,
     {true, false, true, false},
     "gcgc",
     {0, 0, 1, 0}},
    {"F: 4 GPU ranks, two groups each on devices 0 and 1", 4, {true, true, true, true}, "abab", {0, 0, 1, 1}},
    /* only with GPU_TEST_KINDS mixing vendors */
    {"G: 4 GPU ranks, CUDA and HIP alternating, one group per vendor", 4, {true, true, true, true}, "", {0}},
};

/* Device buffers are allocated once per run and reused: freeing device
 * memory waits for every stream of the context, and with several ranks in
 * one process another rank's stream may be waiting for this rank's next
 * call. */
struct mem {
  bool on_gpu;
  int device;
  hc_stream_t stream;
  void *spare[2];
  size_t spare_bytes;
  int next_spare;
};

static void *buf_new(struct mem *m, size_t bytes) {
  void *p = NULL;
  if (m->on_gpu) {
    if (bytes > m->spare_bytes) return NULL;
    p = m->spare[m->next_spare];
    m->next_spare ^= 1;
  } else {
    p = malloc(bytes ? bytes : 1);
  }
  return p;
}
static void buf_del(struct mem *m, void *p) {
  if (!m->on_gpu) free(p);
}
static bool spares_alloc(struct mem *m, size_t bytes) {
  m->spare_bytes = bytes;
  return !m->on_gpu || (hc_dev_mem_alloc(gpu, m->device, bytes, &m->spare[0]) == HC_OK &&
                        hc_dev_mem_alloc(gpu, m->device, bytes, &m->spare[1]) == HC_OK);
}
static void spares_free(struct mem *m) {
  tu_barrier(); /* every rank: no rank has a call in flight any more */
  if (!m->on_gpu) return;
  hc_dev_mem_free(gpu, m->device, m->spare[0]);
  hc_dev_mem_free(gpu, m->device, m->spare[1]);
}
static void to_buf(const struct mem *m, void *dst, const void *src, size_t bytes) {
  if (!bytes) return;
  if (m->on_gpu) {
    hc_dev_copy(gpu, dst, src, bytes, m->stream);
    hc_dev_stream_sync(gpu, m->stream);
  } else {
    memcpy(dst, src, bytes);
  }
}
static void from_buf(const struct mem *m, void *dst, const void *src, size_t bytes) {
  if (m->on_gpu) hc_dev_stream_sync(gpu, m->stream);
  if (!bytes) return;
  if (m->on_gpu) {
    hc_dev_copy(gpu, dst, src, bytes, m->stream);
    hc_dev_stream_sync(gpu, m->stream);
  } else {
    memcpy(dst, src, bytes);
  }
}

struct tcase {
  int coll, dtype, op, count, inplace;
};

/* Every pair of dimension values appears in some case: a greedy cover. */
static int build_cases(struct tcase *out, int max) {
  const int dims[5] = {K_NCOLL, HC_DTYPE_COUNT, (int)HC_ARRAY_LEN(ops), (int)HC_ARRAY_LEN(counts), 2};
  static bool seen[5][5][16][16];
  int n = 0;
  for (;;) {
    int best_gain = 0;
    struct tcase best = {0};
    for (int a = 0; a < dims[0]; a++)
      for (int b = 0; b < dims[1]; b++)
        for (int c = 0; c < dims[2]; c++)
          for (int d = 0; d < dims[3]; d++)
            for (int e = 0; e < dims[4]; e++) {
              int v[5] = {a, b, c, d, e}, gain = 0;
              for (int i = 0; i < 5; i++)
                for (int j = i + 1; j < 5; j++) gain += !seen[i][j][v[i]][v[j]];
              if (gain > best_gain) best_gain = gain, best = (struct tcase){a, b, c, d, e};
            }
    if (best_gain == 0 || n == max) return n;
    int v[5] = {best.coll, best.dtype, best.op, best.count, best.inplace};
    for (int i = 0; i < 5; i++)
      for (int j = i + 1; j < 5; j++) seen[i][j][v[i]][v[j]] = true;
    out[n++] = best;
  }
}

static struct tcase cases[256];
static int ncases;
static const struct scenario *cur;

static bool reducing(int coll) { return coll == K_ALLREDUCE || coll == K_REDUCE || coll == K_REDUCESCATTER; }

static void run_case(hetcclComm_t comm, struct mem *m, int rank, int n, const struct tcase *c, int index) {
  const enum hc_dtype t = (enum hc_dtype)c->dtype;
  const size_t es = hc_dtype_size(t), count = counts[c->count];
  const bool inplace = c->inplace;
  const int root = index % n;
  struct tu_red red = {t, reducing(c->coll) ? ops[c->op] : HC_SUM, n, (uint64_t)index * 7919 + 1};
  tu_set_case("%s %s #%d %s %s count %zu %s root %d", cur->name, kname[c->coll], index, hc_dtype_name(t),
              hc_redop_name(red.op), count, inplace ? "in-place" : "out-of-place", root);
  /* Sizes of the send and receive buffers, in elements. */
  size_t scount = count, rcount = count;
  switch (c->coll) {
  case K_ALLGATHER: rcount = count * (size_t)n; break;
  case K_REDUCESCATTER: scount = count * (size_t)n; break;
  case K_ALLTOALL: scount = rcount = count * (size_t)n; break;
  case K_GATHER: rcount = count * (size_t)n; break;
  case K_SCATTER: scount = count * (size_t)n; break;
  default: break;
  }
  size_t full = HC_MAX(scount, rcount);
  uint8_t *host_in = malloc(full * es + 1), *host_out = malloc(full * es + 1), *expect = malloc(full * es + 1);
  void *dsend = buf_new(m, full * es), *drecv = buf_new(m, full * es);
  if (!CHECK(host_in && host_out && expect && dsend && drecv, "out of memory")) goto out;
  /* Inputs, laid where the in-place form expects them. */
  void *sendp = dsend, *recvp = inplace ? dsend : drecv;
  size_t in_off = 0; /* element offset of this rank's input inside the send buffer */
  if (inplace && c->coll == K_ALLGATHER) in_off = (size_t)rank * count, sendp = (char *)dsend + in_off * es;
  if (inplace && c->coll == K_REDUCESCATTER) recvp = (char *)dsend + (size_t)rank * count * es;
  if (inplace && c->coll == K_GATHER) in_off = (size_t)root * count, sendp = (char *)dsend + in_off * es;
  if (inplace && c->coll == K_SCATTER) recvp = (char *)dsend + (size_t)root * count * es;
  memset(host_in, 0x5a, full * es);
  if (reducing(c->coll)) tu_red_fill(&red, rank, 0, scount, host_in);
  else tu_data_fill(t, red.seed, rank, 0, scount, host_in + in_off * es);
  to_buf(m, dsend, host_in, full * es);
  hetcclRedOp_t op = (hetcclRedOp_t)red.op;
  uint8_t scalar[8];
  if (red.op == HC_PREMULSUM) {
    tu_red_scalar(&red, rank, scalar);
    if (!CHECK_OK(hetcclRedOpCreatePreMulSum(&op, scalar, (hetcclDataType_t)t, hetcclScalarHostImmediate, comm)))
      goto out;
  }
  hetcclDataType_t dt = (hetcclDataType_t)t;
  hetcclResult_t r = hetcclSuccess;
  switch (c->coll) {
  case K_ALLREDUCE: r = hetcclAllReduce(sendp, recvp, count, dt, op, comm, m->stream); break;
  case K_BROADCAST: r = hetcclBroadcast(sendp, recvp, count, dt, root, comm, m->stream); break;
  case K_REDUCE: r = hetcclReduce(sendp, recvp, count, dt, op, root, comm, m->stream); break;
  case K_ALLGATHER: r = hetcclAllGather(sendp, recvp, count, dt, comm, m->stream); break;
  case K_REDUCESCATTER: r = hetcclReduceScatter(sendp, recvp, count, dt, op, comm, m->stream); break;
  case K_ALLTOALL: r = hetcclAlltoAll(sendp, recvp, count, dt, comm, m->stream); break;
  case K_GATHER: r = hetcclGather(sendp, recvp, count, dt, root, comm, m->stream); break;
  case K_SCATTER: r = hetcclScatter(sendp, recvp, count, dt, root, comm, m->stream); break;
  case K_SENDRECV:
    hetcclGroupStart();
    hetcclSend(sendp, count, dt, (rank + 1) % n, comm, m->stream);
    hetcclRecv(recvp, count, dt, (rank + n - 1) % n, comm, m->stream);
    r = hetcclGroupEnd();
    break;
  }
  if (!CHECK_OK(r)) goto out;
  if (red.op == HC_PREMULSUM) CHECK_OK(hetcclRedOpDestroy(op, comm));
  /* Expected output, computed here. */
  size_t out_count = rcount;
  const void *got = host_out;
  from_buf(m, host_out, recvp, 0);
  switch (c->coll) {
  case K_ALLREDUCE:
  case K_REDUCE:
    for (size_t i = 0; i < count; i++) tu_red_expect(&red, i, expect + i * es);
    break;
  case K_REDUCESCATTER:
    for (size_t i = 0; i < count; i++) tu_red_expect(&red, (size_t)rank * count + i, expect + i * es);
    break;
  case K_BROADCAST: tu_data_fill(t, red.seed, root, 0, count, expect); break;
  case K_ALLGATHER:
  case K_GATHER:
    for (int s = 0; s < n; s++) tu_data_fill(t, red.seed, s, 0, count, expect + (size_t)s * count * es);
    break;
  case K_ALLTOALL:
    /* Rank s sent its block `rank` to us; its data is s's values at those indices. */
    for (int s = 0; s < n; s++)
      tu_data_fill(t, red.seed, s, (size_t)rank * count, count, expect + (size_t)s * count * es);
    break;
  case K_SCATTER: tu_data_fill(t, red.seed, root, (size_t)rank * count, count, expect); break;
  case K_SENDRECV: tu_data_fill(t, red.seed, (rank + n - 1) % n, 0, count, expect); break;
  }
  if ((c->coll == K_REDUCE || c->coll == K_GATHER) && rank != root) out_count = 0;
  if (c->coll == K_REDUCE || c->coll == K_ALLREDUCE || c->coll == K_BROADCAST || c->coll == K_SCATTER ||
      c->coll == K_REDUCESCATTER || c->coll == K_SENDRECV)
    out_count = HC_MIN(out_count, count);
  from_buf(m, host_out, recvp, out_count * es);
  tu_compare(t, got, expect, out_count, kname[c->coll]);
out:
  if (dsend) buf_del(m, dsend);
  if (drecv) buf_del(m, drecv);
  free(host_in);
  free(host_out);
  free(expect);
}

/* GPU_TEST_NONBLOCKING=1: comms are nonblocking (config blocking = 0);
 * their init and finalize are polled until done. */
static bool nonblocking(void) {
  const char *v = getenv("GPU_TEST_NONBLOCKING");
  return v && !strcmp(v, "1");
}

/* Polls comm until GetAsyncError stops reading InProgress (300 s: longer
 * is a hang); true when it then reads success. */
static bool wait_done(hetcclComm_t comm, const char *what) {
  hetcclResult_t state = hetcclInProgress;
  const double t0 = tu_seconds();
  while (state == hetcclInProgress && tu_seconds() - t0 < 300) {
    if (!CHECK_OK(hetcclCommGetAsyncError(comm, &state))) return false;
    if (state == hetcclInProgress) usleep(1000);
  }
  return CHECK(state == hetcclSuccess, "nonblocking %s ended in %d: %s", what, (int)state, hetcclGetLastError(comm));
}

static hetcclComm_t make_comm(int rank, int n, hetcclUniqueId id, bool on_gpu, int device, const char *groups) {
  hetcclConfig_t cfg = HETCCL_CONFIG_INITIALIZER;
  char group[16];
  if (groups && groups[0]) snprintf(group, sizeof(group), "%c", groups[rank]);
  else snprintf(group, sizeof(group), "g%d", rank);
  cfg.deviceKind = !on_gpu ? hetcclDeviceHost : gpu_kind(rank) == HC_MEM_HIP ? hetcclDeviceHip : hetcclDeviceCuda;
  cfg.deviceId = device;
  /* By default every rank its own group: all cross-group paths; "" leaves
   * the grouping to hetccl (by device kind). */
  cfg.groupName = groups && !groups[0] ? NULL : group;
  hetcclComm_t comm = NULL;
  if (!nonblocking()) {
    CHECK_OK(hetcclCommInitRankConfig(&comm, n, id, rank, &cfg));
    return comm;
  }
  cfg.blocking = 0;
  hetcclResult_t r = hetcclCommInitRankConfig(&comm, n, id, rank, &cfg);
  CHECK(r == hetcclInProgress || r == hetcclSuccess, "nonblocking init returned %d: %s", (int)r,
        hetcclGetLastError(NULL));
  if (comm && !wait_done(comm, "init")) {
    hetcclCommDestroy(comm);
    comm = NULL;
  }
  return comm;
}

static int devices_needed(const struct scenario *sc) {
  int n = 1;
  for (int r = 0; r < sc->nranks; r++)
    if (sc->gpu_rank[r]) n = HC_MAX(n, sc->device[r] + 1);
  return n;
}

/* Collectives the fake NCCL of this process has run (fake_nccl.c), or -1
 * where the NCCL in use is not that fake. */
static long fake_nccl_calls(void) {
  const char *path = getenv("HETCCL_NCCL_LIBRARY");
  void *h = path && as_threads ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
  long (*calls)(void) = NULL;
  if (h) *(void **)&calls = dlsym(h, "fake_nccl_calls");
  long n = calls ? calls() : -1;
  if (h) dlclose(h);
  return n;
}

static int rank_scenario(int rank, int n, hetcclUniqueId id, void *arg) {
  (void)arg;
  rank_gpu(rank);
  if (devices_needed(cur) > 1 && devices_needed(cur) > hc_dev_caps(HC_MEM_CUDA).device_count) {
    if (rank == 0) printf("%s: skipped, needs %d devices\n", cur->name, devices_needed(cur));
    return 0;
  }
  struct mem m = {.on_gpu = cur->gpu_rank[rank], .device = cur->device[rank]};
  if (m.on_gpu) {
    hc_dev_set_device(gpu, m.device);
    if (!CHECK(hc_dev_stream_create(gpu, m.device, &m.stream) == HC_OK, "stream_create")) return 1;
  }
  hetcclComm_t comm = make_comm(rank, n, id, m.on_gpu, m.device, cur->groups);
  if (comm == NULL) return 1;
  /* The largest case: all-to-all of the largest count on n ranks. */
  if (!CHECK(spares_alloc(&m, counts[HC_ARRAY_LEN(counts) - 1] * 8 * (size_t)n), "device memory")) return 1;
  double t0 = tu_seconds();
  for (int i = 0; i < ncases; i++) run_case(comm, &m, rank, n, &cases[i], i);
  if (rank == 0) printf("%s: %d cases in %.1f s\n", cur->name, ncases, tu_seconds() - t0);
  spares_free(&m);
  if (nonblocking()) {
    hetcclResult_t r = hetcclCommFinalize(comm);
    CHECK(r == hetcclInProgress || r == hetcclSuccess, "nonblocking finalize returned %d", (int)r);
    wait_done(comm, "finalize");
  }
  CHECK_OK(hetcclCommDestroy(comm));
  if (m.on_gpu) hc_dev_stream_destroy(gpu, m.stream);
  return 0;
}

/* 1 GiB float all-reduce between two GPU ranks, with a time. */
static int rank_big(int rank, int n, hetcclUniqueId id, void *arg) {
  (void)arg;
  rank_gpu(rank);
  hc_dev_set_device(gpu, 0);
  struct mem m = {.on_gpu = true};
  hc_dev_stream_create(gpu, 0, &m.stream);
  hetcclComm_t comm = make_comm(rank, n, id, true, 0, NULL);
  const size_t count = (1ull << 30) / 4;
  struct tu_red red = {HC_FLOAT32, HC_SUM, n, 99};
  float *host = malloc(count * 4), *expect = malloc(count * 4);
  void *d = spares_alloc(&m, count * 4) ? buf_new(&m, count * 4) : NULL;
  if (!CHECK(comm && host && expect && d, "setup")) return 1;
  tu_red_fill(&red, rank, 0, count, host);
  to_buf(&m, d, host, count * 4);
  tu_barrier();
  double t0 = tu_seconds();
  CHECK_OK(hetcclAllReduce(d, d, count, hetcclFloat, hetcclSum, comm, m.stream));
  hc_dev_stream_sync(gpu, m.stream);
  double dt = tu_seconds() - t0;
  from_buf(&m, host, d, count * 4);
  for (size_t i = 0; i < count; i++) tu_red_expect(&red, i, &expect[i]);
  tu_compare(HC_FLOAT32, host, expect, count, "1 GiB AllReduce");
  if (rank == 0) printf("1 GiB all-reduce, 2 GPU ranks in two groups: %.3f s, busbw %.2f GB/s\n", dt, 1.073741824 / dt);
  free(host);
  free(expect);
  spares_free(&m);
  CHECK_OK(hetcclCommDestroy(comm));
  hc_dev_stream_destroy(gpu, m.stream);
  return 0;
}

/* Calls of one comm on two streams, with no synchronisation between them
 * from the caller: one after the other, alternating, then in one group.
 * The comm's scratch and slots are shared by all of them, so a call must
 * not start before the one before it (on the other stream) is done. */
static int rank_two_streams(int rank, int n, hetcclUniqueId id, void *arg) {
  (void)arg;
  rank_gpu(rank);
  enum { NBUF = 8 };
  const size_t count = (3u << 20) / 4 + 5; /* two pieces of a 2 MiB window, and a bit */
  hc_dev_set_device(gpu, 0);
  hc_stream_t s[2] = {NULL, NULL};
  void *d[NBUF] = {NULL};
  float *host = malloc(count * 4), *expect = malloc(count * 4);
  bool ok = host && expect;
  for (int k = 0; k < 2; k++) ok &= hc_dev_stream_create(gpu, 0, &s[k]) == HC_OK;
  for (int b = 0; b < NBUF; b++) ok &= hc_dev_mem_alloc(gpu, 0, count * 4, &d[b]) == HC_OK;
  hetcclComm_t comm = make_comm(rank, n, id, true, 0, NULL);
  if (!CHECK(ok && comm, "setup")) return 1;
  for (int b = 0; b < NBUF; b++) {
    struct tu_red red = {HC_FLOAT32, HC_SUM, n, 40 + b};
    tu_red_fill(&red, rank, 0, count, host);
    hc_dev_copy(gpu, d[b], host, count * 4, s[0]);
    hc_dev_stream_sync(gpu, s[0]); /* before host is filled again */
  }
  tu_barrier();
  for (int b = 0; b < NBUF / 2; b++)
    CHECK_OK(hetcclAllReduce(d[b], d[b], count, hetcclFloat, hetcclSum, comm, s[b % 2]));
  CHECK_OK(hetcclGroupStart());
  for (int b = NBUF / 2; b < NBUF; b++)
    CHECK_OK(hetcclAllReduce(d[b], d[b], count, hetcclFloat, hetcclSum, comm, s[b % 2]));
  CHECK_OK(hetcclGroupEnd());
  for (int k = 0; k < 2; k++) hc_dev_stream_sync(gpu, s[k]);
  for (int b = 0; b < NBUF; b++) {
    struct tu_red red = {HC_FLOAT32, HC_SUM, n, 40 + b};
    hc_dev_copy(gpu, host, d[b], count * 4, s[0]);
    hc_dev_stream_sync(gpu, s[0]);
    for (size_t i = 0; i < count; i++) tu_red_expect(&red, i, &expect[i]);
    char what[64];
    snprintf(what, sizeof(what), "two streams, buffer %d", b);
    tu_compare(HC_FLOAT32, host, expect, count, what);
  }
  CHECK_OK(hetcclCommDestroy(comm));
  tu_barrier(); /* no stream of the other rank waits for this one any more */
  for (int b = 0; b < NBUF; b++) hc_dev_mem_free(gpu, 0, d[b]);
  for (int k = 0; k < 2; k++) hc_dev_stream_destroy(gpu, s[k]);
  free(host);
  free(expect);
  return 0;
}

/* The stream holds on a host flag, then writes the input, then runs the
 * all-reduce. The call must come back while the stream is held. */
static int rank_stream_order(int rank, int n, hetcclUniqueId id, void *arg) {
  (void)arg;
  rank_gpu(rank);
  hc_dev_set_device(gpu, 0);
  struct mem m = {.on_gpu = true};
  hc_dev_stream_create(gpu, 0, &m.stream);
  hetcclComm_t comm = make_comm(rank, n, id, true, 0, NULL);
  const size_t count = 1 << 20;
  float *host = malloc(count * 4), *zeros = calloc(count, 4);
  uint64_t *flag = NULL;
  bool have = spares_alloc(&m, count * 4);
  void *d = have ? buf_new(&m, count * 4) : NULL, *staged = have ? buf_new(&m, count * 4) : NULL;
  if (!CHECK(comm && host && zeros && d && staged && hc_dev_host_alloc(gpu, 64, (void **)&flag) == HC_OK, "setup"))
    return 1;
  *flag = 0;
  for (size_t i = 0; i < count; i++) host[i] = (float)(rank + 1) * (float)(i % 100);
  to_buf(&m, staged, host, count * 4);
  to_buf(&m, d, zeros, count * 4);
  tu_barrier();
  hc_dev_flag_wait(gpu, m.stream, flag, 1);         /* the "long kernel": held until we say */
  hc_dev_copy(gpu, d, staged, count * 4, m.stream); /* then writes the input */
  double t0 = tu_seconds();
  CHECK_OK(hetcclAllReduce(d, d, count, hetcclFloat, hetcclSum, comm, m.stream));
  double call_s = tu_seconds() - t0;
  hc_event_t ev;
  int done = 1;
  hc_dev_event_create(gpu, &ev);
  hc_dev_event_record(gpu, ev, m.stream);
  hc_dev_event_query(gpu, ev, &done);
  CHECK(!done, "the stream finished while it was still held");
  CHECK(call_s < 0.5, "the call took %.3f s: it waited for the stream", call_s);
  if (rank == 0) printf("stream order: the call returned in %.1f us while the stream was held\n", call_s * 1e6);
  struct timespec hold = {0, 200 * 1000000};
  nanosleep(&hold, NULL);
  __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
  from_buf(&m, host, d, count * 4);
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) bad += host[i] != (float)(n * (n + 1) / 2) * (float)(i % 100);
  CHECK(bad == 0, "%zu elements do not include what the stream wrote before the call", bad);
  hc_dev_event_destroy(gpu, ev);
  hc_dev_host_free(gpu, flag);
  spares_free(&m);
  free(host);
  free(zeros);
  CHECK_OK(hetcclCommDestroy(comm));
  hc_dev_stream_destroy(gpu, m.stream);
  return 0;
}

/* Ranks are processes, not threads: the streams of one process share the
 * device's hardware queues, where a stream waiting for another rank's flag
 * can hold up what that rank queued behind it (the driver says so of
 * cuStreamWaitValue). The parent never loads the driver (a fork would not
 * carry it); a probe process looks for a device. TU_RANKS=threads runs
 * them as threads (the fake driver has no shared queues, and
 * ThreadSanitizer no fork after threads). */
static void run_ranks(int n, tu_rank_fn fn) {
  if (as_threads) tu_run_ranks(n, fn, NULL);
  else tu_run_rank_processes(n, fn, NULL);
}

/* Whether rank's GPU kind loads; where not, the skip line says why. */
static bool kind_loads(int rank) {
  const enum hc_mem_kind k = gpu_kind(rank);
  if (hc_dev_get(k) != NULL) return true;
  printf("skip: no %s device here (%s)\n", k == HC_MEM_HIP ? "HIP" : "CUDA", hc_dev_absent_reason(k));
  fflush(stdout); /* a probe process leaves by _exit */
  return false;
}

static bool have_gpu(void) {
  if (as_threads && kinds_mixed()) {
    printf("skip: GPU_TEST_KINDS mixes CUDA and HIP, which one process of rank threads cannot\n");
    return false;
  }
  if (as_threads) return kind_loads(0) && (gpu = hc_dev_get(gpu_kind(0))) != NULL;
  fflush(stdout);
  pid_t probe = fork();
  if (probe == 0) _exit(kind_loads(0) && kind_loads(1) ? 0 : 77); /* the driver stays out of this process */
  int st = 0;
  return probe > 0 && waitpid(probe, &st, 0) == probe && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  as_threads = getenv("TU_RANKS") && strcmp(getenv("TU_RANKS"), "threads") == 0;
  if (!have_gpu()) return 77; /* have_gpu said why */
  ncases = build_cases(cases, (int)HC_ARRAY_LEN(cases));
  printf("%d cases cover every pair of collective, datatype, op, count and in-place\n", ncases);
  const char *only = getenv("GPU_TEST_SCENARIOS");
  for (size_t s = 0; s < HC_ARRAY_LEN(scenarios); s++) {
    cur = &scenarios[s];
    if (only && strchr(only, cur->name[0]) == NULL) continue;
    if (cur->groups && !cur->groups[0] && !kinds_mixed()) continue;
    long before = HC_MAX(fake_nccl_calls(), 0);
    run_ranks(cur->nranks, rank_scenario);
    /* With the fake NCCL, E and F must have run steps on it. */
    const char *vendor = getenv("HETCCL_VENDOR");
    if (as_threads && getenv("HETCCL_NCCL_LIBRARY") && !(vendor && !strcmp(vendor, "0")) && devices_needed(cur) > 1 &&
        devices_needed(cur) <= hc_dev_caps(HC_MEM_CUDA).device_count) {
      long ran = fake_nccl_calls() - before;
      printf("%s: %ld collectives ran on the fake NCCL\n", cur->name, ran);
      CHECK(ran > 0, "%s: no collective ran on the vendor library", cur->name);
    }
  }
  if (getenv("GPU_TEST_CALLER_BLOCKS")) {
    printf("skip: two streams, stream order: GPU_TEST_CALLER_BLOCKS (the host fallback of a reduction waits for "
           "its stream in the call)\n");
  } else {
    tu_set_case("two streams");
    run_ranks(2, rank_two_streams);
    tu_set_case("stream order");
    run_ranks(2, rank_stream_order);
  }
  if (getenv("GPU_TEST_QUICK") == NULL) { /* the fake driver of CI runs without it */
    tu_set_case("1 GiB");
    run_ranks(2, rank_big);
  }
  return tu_finish("test_coll_gpu");
}
