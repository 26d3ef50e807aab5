/*
 * The flush of receives into GPU memory (net/ib's "flush") where it goes
 * wrong or runs out of room, over the fake libcuda and the fake
 * libibverbs (tests/ib/fake_verbs.c), ranks as threads, HETCCL_GDR_FLUSH=1.
 * FLUSH_TEST selects the case:
 *   readfail  a GPU rank receives from a CPU rank while the fake fails the
 *             third RDMA read of the process (FAKE_VERBS_READ_FAIL_AFTER=2):
 *             the first two receives complete with the sender's bytes,
 *             the third fails naming the flush read and the read's status,
 *             and the CPU rank's next send fails too, within the test's
 *             deadline (no hang); under ASan, nothing leaks.
 *   full      a GPU rank receives PER_PEER small messages from each of two
 *             CPU ranks, all of them landed before it polls once: the first
 *             peer's receives fill the flush queue pair (the fake refuses a
 *             read beyond its depth, as an adapter would), the second's land
 *             while it is full and wait for room; every receive completes
 *             with its sender's bytes after exactly one flush read.
 * Exits 77 unless both fakes are there.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "gpu_rank_mem.h"
#include "net/net.h"
#include "testutil.h"

#define FLUSH_DEPTH 64 /* HC_IB_FLUSH_DEPTH, written out: the fake enforces what hetccl asked for */
#define PER_PEER 64    /* receives from each CPU rank: the cts ring's 64 slots, all out at once */
#define MSG 256
#define FAIL_MSG 4000
#define DEADLINE_NS (60 * 1000000000ull)

static const struct hc_dev_ops *gpu;
static long long (*verbs_reads)(const char *src, int loopback);
static long long (*verbs_reads_unpolled)(void);
static long long (*verbs_reads_peak)(void);

struct end {
  void *ctx, *conn[3];
  struct hc_net_handle handle;
  struct hc_net_caps caps;
};

static uint8_t pattern(int rank, int k, size_t i) { return (uint8_t)(i * 13 + (size_t)rank * 71 + (size_t)k * 5 + 3); }

static bool end_open(struct end *e, int rank, int nranks, bool on_gpu) {
  struct hc_net_args a = {.rank = rank, .nranks = nranks, .device_kind = on_gpu ? HC_MEM_CUDA : HC_MEM_HOST};
  memcpy(a.secret, "0123456789abcdef", 16);
  return CHECK(hc_net_ib.open(&a, &e->caps, &e->handle, &e->ctx) == HC_OK, "open: %s", hc_last_error());
}

/* The GPU rank (0) connects to every other rank, each CPU rank to it. */
static bool end_connect(struct end *e, int rank, int nranks) {
  void *handles[3];
  if (!tu_allgather_ptr(&e->handle, handles)) return false;
  const uint64_t deadline = hc_now_ns() + DEADLINE_NS;
  for (int p = 0; p < nranks; p++) {
    if (p == rank || (rank != 0 && p != 0)) continue;
    while (e->conn[p] == NULL && hc_now_ns() < deadline) {
      if (!CHECK(hc_net_ib.connect(e->ctx, p, handles[p], &e->conn[p]) == HC_OK, "connect to %d: %s", p,
                 hc_last_error()))
        return false;
      if (e->conn[p] == NULL) hc_net_ib.wait_blocking(e->ctx, 10);
    }
    if (!CHECK(e->conn[p] != NULL, "rank %d: not connected to %d within 60 s", rank, p)) return false;
  }
  return true;
}

/* Tests req until done or a failure (returned); a deadline stands in for a
 * hang. */
static hc_result_t wait_req(struct end *e, void *req) {
  int done = 0;
  hc_result_t r = HC_OK;
  const uint64_t deadline = hc_now_ns() + DEADLINE_NS;
  while (r == HC_OK && !done) {
    r = hc_net_ib.test(req, &done);
    if (r == HC_OK && !done && hc_now_ns() > deadline) r = HC_FAIL(HC_ERR_REMOTE, "not done within 60 s");
    if (r == HC_OK && !done) r = hc_net_ib.wait_blocking(e->ctx, 10);
  }
  return r;
}

static hc_result_t transfer(struct end *e, int peer, bool send, void *buf, size_t n) {
  void *req = NULL;
  hc_result_t r =
      send ? hc_net_ib.isend(e->conn[peer], buf, n, NULL, &req) : hc_net_ib.irecv(e->conn[peer], buf, n, NULL, &req);
  return r == HC_OK ? wait_req(e, req) : r;
}

static int readfail_rank(int rank, int nranks, hetcclUniqueId id, void *arg) {
  (void)id, (void)arg;
  struct end e = {0};
  struct rank_mem m = {0};
  const bool on_gpu = rank == 0;
  uint8_t host[FAIL_MSG];
  if (on_gpu && !CHECK(rank_mem_open(&m, gpu, 0, FAIL_MSG), "GPU buffers: %s", hc_last_error())) goto out;
  if (!end_open(&e, rank, nranks, on_gpu) || !end_connect(&e, rank, nranks)) goto out;
  for (int k = 0; k < 2; k++) { /* the reads the fake lets through */
    tu_set_case("receive %d", k);
    tu_barrier();
    long long before = on_gpu ? verbs_reads("device", 1) : 0;
    if (on_gpu) {
      CHECK(transfer(&e, 1, false, m.recv, FAIL_MSG) == HC_OK, "%s", hc_last_error());
      get(&m, host, m.recv, FAIL_MSG);
      size_t bad = 0;
      for (size_t i = 0; i < FAIL_MSG; i++) bad += host[i] != pattern(1, k, i);
      CHECK(bad == 0 && verbs_reads("device", 1) - before == 1, "%zu bytes differ, %lld flush reads", bad,
            verbs_reads("device", 1) - before);
    } else {
      for (size_t i = 0; i < FAIL_MSG; i++) host[i] = pattern(1, k, i);
      CHECK(transfer(&e, 0, true, host, FAIL_MSG) == HC_OK, "%s", hc_last_error());
    }
  }
  tu_set_case("the failed flush read");
  tu_barrier();
  if (on_gpu) {
    hc_result_t r = transfer(&e, 1, false, m.recv, FAIL_MSG);
    printf("rank 0: the receive whose flush read failed: %s: %s\n", hc_result_str(r), hc_last_error());
    CHECK(r == HC_ERR_REMOTE && strstr(hc_last_error(), "flush read") &&
              strstr(hc_last_error(), "remote operation error"),
          "%s: %s", hc_result_str(r), hc_last_error());
    /* The connection stays failed: a later receive says the same. */
    void *req = NULL;
    r = hc_net_ib.irecv(e.conn[1], m.recv, FAIL_MSG, NULL, &req);
    CHECK(r == HC_ERR_REMOTE && strstr(hc_last_error(), "remote operation error"), "a later receive: %s: %s",
          hc_result_str(r), hc_last_error());
    hc_net_ib.close(e.ctx); /* as a failed comm does: its peer learns from the closed connection */
    e.ctx = NULL;
  } else {
    /* The message whose flush fails was acknowledged by the adapter, so
     * its send may well complete; the peer's failure shows at the next. */
    hc_result_t r = HC_OK;
    int sends = 0;
    for (; r == HC_OK && sends < 2; sends++) {
      for (size_t i = 0; i < FAIL_MSG; i++) host[i] = pattern(1, 2 + sends, i);
      r = transfer(&e, 0, true, host, FAIL_MSG);
    }
    printf("rank 1: send %d after the failed flush read: %s: %s\n", sends, hc_result_str(r), hc_last_error());
    CHECK(r == HC_ERR_REMOTE && strstr(hc_last_error(), "rank 0") && !strstr(hc_last_error(), "within 60 s"),
          "the sender after its peer's failed flush: %s: %s", hc_result_str(r), hc_last_error());
  }
  tu_barrier();
out:
  if (e.ctx) hc_net_ib.close(e.ctx);
  if (on_gpu) rank_mem_close(&m);
  return 0;
}

static int full_rank(int rank, int nranks, hetcclUniqueId id, void *arg) {
  (void)id, (void)arg;
  struct end e = {0};
  struct rank_mem m = {0};
  const bool on_gpu = rank == 0;
  const size_t bytes = (size_t)2 * PER_PEER * MSG;
  uint8_t *host = malloc(bytes);
  void *req[2][PER_PEER] = {{NULL}};
  if (!CHECK(host != NULL, "out of memory")) goto out;
  if (on_gpu && !CHECK(rank_mem_open(&m, gpu, 0, bytes), "GPU buffers: %s", hc_last_error())) goto out;
  if (!end_open(&e, rank, nranks, on_gpu) || !end_connect(&e, rank, nranks)) goto out;
  long long before = on_gpu ? verbs_reads("device", 1) : 0;
  if (on_gpu) /* every receive and its cts out before any message */
    for (int p = 0; p < 2; p++)
      for (int k = 0; k < PER_PEER; k++)
        CHECK(hc_net_ib.irecv(e.conn[1 + p], (uint8_t *)m.recv + ((size_t)p * PER_PEER + (size_t)k) * MSG, MSG, NULL,
                              &req[p][k]) == HC_OK,
              "irecv %d from %d: %s", k, 1 + p, hc_last_error());
  tu_barrier();
  if (!on_gpu) { /* all landed in the GPU rank's memory before it polls */
    for (int k = 0; k < PER_PEER; k++) {
      for (size_t i = 0; i < MSG; i++) host[(size_t)k * MSG + i] = pattern(rank, k, i);
      CHECK(hc_net_ib.isend(e.conn[0], host + (size_t)k * MSG, MSG, NULL, &req[0][k]) == HC_OK, "isend %d: %s", k,
            hc_last_error());
    }
    for (int k = 0; k < PER_PEER; k++)
      if (req[0][k]) CHECK(wait_req(&e, req[0][k]) == HC_OK, "send %d: %s", k, hc_last_error());
  }
  tu_barrier();
  if (on_gpu) {
    /* One pass of the first peer's connection lands its receives: their
     * flush reads fill the queue pair. */
    int done = 0;
    CHECK(hc_net_ib.test(req[0][0], &done) == HC_OK && !done, "first test: done %d, %s", done, hc_last_error());
    long long out_now = verbs_reads_unpolled();
    printf("rank 0: after one pass of rank 1's connection: %lld flush reads out\n", out_now);
    CHECK(out_now == FLUSH_DEPTH, "%lld flush reads out after rank 1's %d receives landed, expected a full queue of %d",
          out_now, PER_PEER, FLUSH_DEPTH);
    /* The second peer's land while it is full. */
    for (int p = 1; p >= 0; p--)
      for (int k = 0; k < PER_PEER; k++)
        if (req[p][k]) CHECK(wait_req(&e, req[p][k]) == HC_OK, "receive %d from %d: %s", k, 1 + p, hc_last_error());
    get(&m, host, m.recv, bytes);
    size_t bad = 0;
    for (int p = 0; p < 2; p++)
      for (int k = 0; k < PER_PEER; k++)
        for (size_t i = 0; i < MSG; i++)
          bad += host[((size_t)p * PER_PEER + (size_t)k) * MSG + i] != pattern(1 + p, k, i);
    long long flushes = verbs_reads("device", 1) - before;
    printf("rank 0: %d receives into GPU memory from 2 ranks: %zu bytes differ, %lld flush reads, at most %lld out at "
           "once, %lld unpolled\n",
           2 * PER_PEER, bad, flushes, verbs_reads_peak(), verbs_reads_unpolled());
    CHECK(bad == 0, "%zu bytes differ", bad);
    CHECK(flushes == 2 * PER_PEER, "%lld flush reads for %d receives", flushes, 2 * PER_PEER);
    CHECK(verbs_reads_peak() == FLUSH_DEPTH, "at most %lld flush reads out at once, expected %d", verbs_reads_peak(),
          FLUSH_DEPTH);
    CHECK(verbs_reads_unpolled() == 0, "%lld flush reads not polled after every receive completed",
          verbs_reads_unpolled());
  }
  tu_barrier();
out:
  if (e.ctx) hc_net_ib.close(e.ctx);
  if (on_gpu) rank_mem_close(&m);
  free(host);
  return 0;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  if (hc_params_load() != HC_OK) return 1;
  gpu = hc_dev_get(HC_MEM_CUDA);
  void *verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (verbs) *(void **)&verbs_reads = dlsym(verbs, "fake_verbs_reads");
  if (verbs) *(void **)&verbs_reads_unpolled = dlsym(verbs, "fake_verbs_reads_unpolled");
  if (verbs) *(void **)&verbs_reads_peak = dlsym(verbs, "fake_verbs_reads_peak");
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (gpu == NULL || verbs_reads == NULL || verbs_reads_unpolled == NULL || verbs_reads_peak == NULL || cuda == NULL ||
      dlsym(cuda, "fake_cuda_copied") == NULL) {
    printf("skip: needs the fake libcuda and the fake libibverbs (LD_LIBRARY_PATH)\n");
    return 77;
  }
  const char *which = getenv("FLUSH_TEST");
  if (which && strcmp(which, "readfail") == 0) tu_run_ranks(2, readfail_rank, NULL);
  else if (which && strcmp(which, "full") == 0) tu_run_ranks(3, full_rank, NULL);
  else CHECK(false, "FLUSH_TEST=%s: expected readfail or full", which ? which : "(unset)");
  return tu_finish("test_ib_flush_gdr");
}
