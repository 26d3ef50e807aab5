/*
 * The training shapes in a comm of 2 groups x 2 GPUs (groups "aabb", each
 * group on devices 0 and 1, so both run the vendor library inside), ranks
 * as threads over the fake libcuda and the fake NCCL (fake_nccl.c):
 *   FSDP: all-gather of parameter shards, then reduce-scatter of gradients
 *         (SUM and AVG), a few steps;
 *   MoE:  all-to-all of equal blocks and all-to-all-v of uneven ones;
 *   pipeline: send/recv between the two ranks of a group.
 * Results are compared bitwise with what the test computes itself, and the
 * fake NCCL's counters must show that the group's part ran on it: the
 * grouped sends and receives of the all-gather move n (m - 1) blocks per
 * call inside groups (each block to the group mate that lacks it), the
 * reduce-scatter is the vendor's reduce-scatter in 2 rounds per rank, the
 * all-to-all's blocks between group mates are n (m - 1) blocks in one
 * vendor group of sends and receives per rank. (test_plan_groups proves
 * that the plans then send no byte between group mates over hetccl's
 * transports.) Exits 77 unless the fake NCCL and two devices are there.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "gpu_rank_mem.h"
#include "testutil.h"

enum { NRANKS = 4, GROUP = 2, STEPS = 3 };
static const int device_of[NRANKS] = {0, 1, 0, 1};
static const size_t shard = 65536 + 5; /* elements per rank: several chunks, and a rest */
static const struct hc_dev_ops *gpu;

static long (*calls_of)(const char *name);
static long (*p2p_bytes)(void);

/* Counter deltas between two barriers, read by rank 0 only. */
struct counts {
  long sendrecv, reducescatter, bytes;
};
static struct counts now(void) {
  if (calls_of == NULL) return (struct counts){0};
  return (struct counts){calls_of("SendRecv"), calls_of("ReduceScatter"), p2p_bytes()};
}
/* Rank 0 reads the counters before any rank may start the next call. */
static struct counts snapshot(int rank) {
  struct counts c = rank == 0 ? now() : (struct counts){0};
  tu_barrier();
  return c;
}
static void expect_counts(int rank, struct counts before, long sendrecv, long reducescatter, long bytes,
                          const char *what) {
  tu_barrier();
  if (rank != 0) return;
  struct counts after = now();
  printf("%s: %ld groups of vendor sends/receives, %ld vendor reduce-scatters, %ld bytes between group mates\n", what,
         after.sendrecv - before.sendrecv, after.reducescatter - before.reducescatter, after.bytes - before.bytes);
  CHECK(after.sendrecv - before.sendrecv == sendrecv, "%s: %ld groups of vendor sends/receives, expected %ld", what,
        after.sendrecv - before.sendrecv, sendrecv);
  CHECK(after.reducescatter - before.reducescatter == reducescatter, "%s: %ld vendor reduce-scatters, expected %ld",
        what, after.reducescatter - before.reducescatter, reducescatter);
  CHECK(after.bytes - before.bytes == bytes, "%s: %ld bytes through the vendor's sends, expected %ld", what,
        after.bytes - before.bytes, bytes);
}

static void fsdp(hetcclComm_t comm, struct rank_mem *m, int rank, hetcclRedOp_t op) {
  const enum hc_dtype t = HC_FLOAT32;
  const size_t es = 4, full = shard * NRANKS;
  uint8_t *host = malloc(full * es), *expect = malloc(full * es);
  if (!CHECK(host && expect, "out of memory")) goto out;
  for (int step = 0; step < STEPS; step++) {
    tu_set_case("FSDP step %d %s", step, op == hetcclAvg ? "avg" : "sum");
    struct counts before = snapshot(rank);
    /* Parameters: each rank's shard, gathered everywhere. */
    const uint64_t seed = 1000 + (uint64_t)step;
    tu_data_fill(t, seed, rank, 0, shard, host);
    put(m, m->send, host, shard * es);
    CHECK_OK(hetcclAllGather(m->send, m->recv, shard, hetcclFloat, comm, m->stream));
    get(m, host, m->recv, full * es);
    for (int s = 0; s < NRANKS; s++) tu_data_fill(t, seed, s, 0, shard, expect + (size_t)s * shard * es);
    tu_compare(t, host, expect, full, "FSDP all-gather");
    /* Each of the n blocks to the group mate that lacks it, in each group. */
    expect_counts(rank, before, NRANKS * 2, 0, (long)(NRANKS / GROUP * NRANKS * (GROUP - 1) * shard * es),
                  "FSDP all-gather");
    /* Gradients: every rank's full buffer, each shard summed on its rank. */
    before = snapshot(rank);
    struct tu_red red = {t, (enum hc_redop)op, NRANKS, seed};
    tu_red_fill(&red, rank, 0, full, host);
    put(m, m->send, host, full * es);
    CHECK_OK(hetcclReduceScatter(m->send, m->recv, shard, hetcclFloat, op, comm, m->stream));
    get(m, host, m->recv, shard * es);
    for (size_t i = 0; i < shard; i++) tu_red_expect(&red, (size_t)rank * shard + i, expect + i * es);
    tu_compare(t, host, expect, shard, "FSDP reduce-scatter");
    expect_counts(rank, before, 0, NRANKS * 2, 0, "FSDP reduce-scatter");
  }
out:
  free(host);
  free(expect);
}

static void moe(hetcclComm_t comm, struct rank_mem *m, int rank) {
  const enum hc_dtype t = HC_BFLOAT16;
  const size_t es = 2, block = 4099, full = block * NRANKS;
  uint8_t *host = malloc(full * es), *expect = malloc(full * es);
  if (!CHECK(host && expect, "out of memory")) goto out;
  tu_set_case("MoE all-to-all");
  struct counts before = snapshot(rank);
  tu_data_fill(t, 7, rank, 0, full, host);
  put(m, m->send, host, full * es);
  CHECK_OK(hetcclAlltoAll(m->send, m->recv, block, hetcclBfloat16, comm, m->stream));
  get(m, host, m->recv, full * es);
  for (int s = 0; s < NRANKS; s++) tu_data_fill(t, 7, s, (size_t)rank * block, block, expect + (size_t)s * block * es);
  tu_compare(t, host, expect, full, "MoE all-to-all");
  expect_counts(rank, before, NRANKS, 0, (long)(NRANKS * (GROUP - 1) * block * es), "MoE all-to-all");
  /* Uneven: rank s sends (s + 1) * (d + 1) * 100 elements to rank d, laid
   * out in destination order; each rank receives in source order. */
  tu_set_case("MoE all-to-all-v");
  size_t sc[NRANKS], sd[NRANKS], rc[NRANKS], rd[NRANKS], stot = 0, rtot = 0;
  for (int d = 0; d < NRANKS; d++) {
    sc[d] = (size_t)(rank + 1) * (size_t)(d + 1) * 100, sd[d] = stot, stot += sc[d];
    rc[d] = (size_t)(d + 1) * (size_t)(rank + 1) * 100, rd[d] = rtot, rtot += rc[d];
  }
  long mates = 0; /* bytes between group mates, all ranks */
  for (int s = 0; s < NRANKS; s++)
    for (int d = 0; d < NRANKS; d++)
      if (s != d && s / GROUP == d / GROUP) mates += (long)((s + 1) * (d + 1) * 100) * (long)es;
  before = snapshot(rank);
  tu_data_fill(t, 8, rank, 0, stot, host);
  put(m, m->send, host, stot * es);
  CHECK_OK(hetcclAlltoAllv(m->send, sc, sd, m->recv, rc, rd, hetcclBfloat16, comm, m->stream));
  get(m, host, m->recv, rtot * es);
  for (int s = 0; s < NRANKS; s++) { /* s's elements for this rank start at its displacement for it */
    size_t first = 0;
    for (int d = 0; d < rank; d++) first += (size_t)(s + 1) * (size_t)(d + 1) * 100;
    tu_data_fill(t, 8, s, first, rc[s], expect + rd[s] * es);
  }
  tu_compare(t, host, expect, rtot, "MoE all-to-all-v");
  expect_counts(rank, before, NRANKS, 0, mates, "MoE all-to-all-v");
out:
  free(host);
  free(expect);
}

/* Pipeline stages: rank r and its group mate r ^ 1 swap activations. */
static void pipeline(hetcclComm_t comm, struct rank_mem *m, int rank) {
  const size_t count = 30001, es = 4;
  uint8_t *host = malloc(count * es), *expect = malloc(count * es);
  if (!CHECK(host && expect, "out of memory")) goto out;
  tu_set_case("pipeline send/recv");
  struct counts before = snapshot(rank);
  tu_data_fill(HC_INT32, 9, rank, 0, count, host);
  put(m, m->send, host, count * es);
  const int mate = rank ^ 1;
  CHECK_OK(hetcclGroupStart());
  CHECK_OK(hetcclSend(m->send, count, hetcclInt32, mate, comm, m->stream));
  CHECK_OK(hetcclRecv(m->recv, count, hetcclInt32, mate, comm, m->stream));
  CHECK_OK(hetcclGroupEnd());
  get(m, host, m->recv, count * es);
  tu_data_fill(HC_INT32, 9, mate, 0, count, expect);
  tu_compare(HC_INT32, host, expect, count, "pipeline send/recv");
  /* One vendor group per rank holds both its send and its receive. */
  expect_counts(rank, before, NRANKS, 0, (long)(NRANKS * count * es), "pipeline send/recv");
out:
  free(host);
  free(expect);
}

static int rank_main(int rank, int n, hetcclUniqueId id, void *arg) {
  (void)arg;
  struct rank_mem m;
  hetcclComm_t comm;
  if (!rank_comm_open(&m, gpu, device_of[rank], shard * NRANKS * 4, rank < GROUP ? "a" : "b", n, id, rank, &comm))
    return 1;
  if (rank == 0) { /* hetccl has loaded the fake NCCL now (before, this dlopen would make it look shared) */
    void *nccl = dlopen(getenv("HETCCL_NCCL_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
    if (nccl) {
      *(void **)&calls_of = dlsym(nccl, "fake_nccl_calls_of");
      *(void **)&p2p_bytes = dlsym(nccl, "fake_nccl_p2p_bytes");
      dlclose(nccl);
    }
  }
  tu_barrier();
  if (rank == 0 && !CHECK(calls_of && p2p_bytes, "%s is not the fake NCCL", getenv("HETCCL_NCCL_LIBRARY"))) {
    calls_of = NULL;
  }
  fsdp(comm, &m, rank, hetcclSum);
  fsdp(comm, &m, rank, hetcclAvg);
  moe(comm, &m, rank);
  pipeline(comm, &m, rank);
  tu_barrier();
  CHECK_OK(hetcclCommDestroy(comm));
  rank_mem_close(&m);
  return 0;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  gpu = hc_dev_get(HC_MEM_CUDA);
  if (getenv("HETCCL_NCCL_LIBRARY") == NULL || gpu == NULL || hc_dev_caps(HC_MEM_CUDA).device_count < 2) {
    printf("skip: needs the fake NCCL (HETCCL_NCCL_LIBRARY) and two CUDA devices\n");
    return 77;
  }
  tu_run_ranks(NRANKS, rank_main, NULL);
  return tu_finish("test_coll_shapes");
}
