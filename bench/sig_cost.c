/*
 * sig_cost: what the call signatures of mismatch checking
 * (docs/robustness.md, "Mismatched calls") cost the calling thread, each
 * part timed in isolation, next to the planning every call pays anyway:
 *   pack         hc_plan_sig + hc_plan_sig_add: once per call, every comm
 *   compare      hc_net_sig_equal: once per received message or piece
 *   gpu-expect   hc_engine_expect_sigs on the staged plan of a 2-rank
 *                all-reduce of 2 floats through a window: once per call of
 *                a GPU comm with window peers (the engine's table of the
 *                signatures its streams' pieces must carry)
 *   plan         hc_plan_add + hc_plan_stage + hc_plan_reset of that call
 * The stall probe (exec.c) runs only after a second without progress and
 * is not on this path at all.
 *
 * Usage: sig_cost [iterations]   (default 200000; ns per operation, the
 * minimum of 7 repetitions, since a shared machine only ever adds time)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/engine.h"
#include "plan/plan.h"

#define REPS 7
#define EXPECT_BATCH 10000 /* calls per engine client: its table grows by one run per call here */

static volatile uint64_t sink;

static void fail_cb(void *arg, hc_result_t r) {
  (void)arg;
  fprintf(stderr, "sig_cost: the engine failed the comm (%d): %s\n", (int)r, hc_last_error());
}

static double best_of(double *t, int n) {
  double m = t[0];
  for (int i = 1; i < n; i++) m = t[i] < m ? t[i] : m;
  return m;
}

int main(int argc, char **argv) {
  const long iters = argc > 1 ? atol(argv[1]) : 200000;
  if (iters <= 0) {
    fprintf(stderr, "usage: sig_cost [iterations > 0]\n");
    return 2;
  }
  /* One window with peer 1, in host memory, as api/comm.c opens one. */
  const size_t slot = 64 * 1024;
  static atomic_ullong counters[4], sigs[2][2 * HC_NET_WINDOW_SIGS], beats[2];
  static atomic_int notices[2];
  static struct hc_net_mismatch mismatches[2];
  uint8_t *tx = calloc(HC_WINDOW_SLOTS, slot), *rx = calloc(HC_WINDOW_SLOTS, slot);
  struct hc_plan_window windows[2] = {{.w = {0}}};
  windows[1] = (struct hc_plan_window){.w = {.tx = tx,
                                             .rx = rx,
                                             .bytes = HC_WINDOW_SLOTS * slot,
                                             .tx_filled = &counters[0],
                                             .tx_freed = &counters[1],
                                             .rx_filled = &counters[2],
                                             .rx_freed = &counters[3],
                                             .tx_sig = sigs[0],
                                             .rx_sig = sigs[1],
                                             .heartbeat = &beats[0],
                                             .peer_heartbeat = &beats[1],
                                             .notice = &notices[0],
                                             .peer_notice = &notices[1],
                                             .mismatch = &mismatches[0],
                                             .peer_mismatch = &mismatches[1]},
                                       .slot_bytes = slot};
  struct hc_scratch_pool *pool = NULL;
  if (tx == NULL || rx == NULL || hc_scratch_pool_create(HC_POOL_HOST, &hc_dev_host, 0, &pool) != HC_OK) {
    fprintf(stderr, "sig_cost: setup: %s\n", hc_last_error());
    return 1;
  }
  const struct hc_plan_ctx ctx = {.rank = 0,
                                  .nranks = 2,
                                  .chunk_bytes = slot, /* .algo: all HC_ALGO_AUTO */
                                  .ring_threshold = 1 << 20,
                                  .scratch_slots = 4,
                                  .ngroups = 1,
                                  .windows = windows};
  float buf[2] = {1, 2};
  struct hc_coll_args a = {
      .coll = HC_COLL_ALLREDUCE, .sendbuf = buf, .recvbuf = buf, .count = 2, .dtype = HC_FLOAT32, .op = HC_SUM};
  double t_pack[REPS], t_cmp[REPS], t_expect[REPS], t_plan[REPS];

  for (int rep = 0; rep < REPS; rep++) {
    struct hc_plan p = {.pool = pool, .mem = HC_MEM_HOST};
    uint64_t t0 = hc_now_ns();
    for (long i = 0; i < iters; i++) {
      a.seq = (uint32_t)i;
      const struct hc_net_sig sig = hc_plan_sig(&a, 0);
      if (p.nsigs == 64) p.nsigs = 0; /* a plan holds a group's calls, not millions */
      sink += hc_plan_sig_add(&p, &sig);
    }
    t_pack[rep] = (double)(hc_now_ns() - t0) / (double)iters;
    hc_plan_reset(&p);

    struct hc_net_sig x = hc_plan_sig(&a, 0), y = x;
    t0 = hc_now_ns();
    for (long i = 0; i < iters; i++) {
      y.w[1] ^= (uint64_t)(i & 1) << 40; /* equal half the time; the compiler cannot hoist it */
      sink += hc_net_sig_equal(&x, &y);
    }
    t_cmp[rep] = (double)(hc_now_ns() - t0) / (double)iters;

    t0 = hc_now_ns();
    for (long i = 0; i < iters; i++) {
      a.seq = (uint32_t)i;
      if (hc_plan_add(&p, &ctx, &a) != HC_OK || hc_plan_stage(&p, &ctx, false) != HC_OK) {
        fprintf(stderr, "sig_cost: plan: %s\n", hc_last_error());
        return 1;
      }
      sink += (uint64_t)p.nsteps;
      hc_plan_reset(&p);
    }
    t_plan[rep] = (double)(hc_now_ns() - t0) / (double)iters;

    /* The staged plan of one call, then the engine's table of it. */
    a.seq = 0;
    if (hc_plan_add(&p, &ctx, &a) != HC_OK || hc_plan_stage(&p, &ctx, false) != HC_OK) return 1;
    int32_t pids[2] = {0, 0};
    atomic_int active = 0;
    struct hc_link peers[2] = {{0}};
    struct hc_links links = {.rank = 0, .nranks = 2, .peer = peers};
    const struct hc_engine_desc desc = {
        .links = &links, .windows = windows, .peer_pid = pids, .active_calls = &active, .fail = fail_cb};
    uint64_t spent = 0;
    for (long done = 0; done < iters;) {
      struct hc_engine_comm *ec = NULL;
      if (hc_engine_register(&desc, &ec) != HC_OK) return 1;
      const long n = iters - done < EXPECT_BATCH ? iters - done : EXPECT_BATCH;
      t0 = hc_now_ns();
      for (long i = 0; i < n; i++) hc_engine_expect_sigs(ec, &p);
      spent += hc_now_ns() - t0;
      done += n;
      hc_engine_unregister(ec, NULL);
    }
    t_expect[rep] = (double)spent / (double)iters;
    hc_plan_reset(&p);
  }
  printf("sig_cost: %ld iterations, ns per operation, minimum of %d repetitions\n", iters, REPS);
  printf("  pack (hc_plan_sig + hc_plan_sig_add)        %8.1f\n", best_of(t_pack, REPS));
  printf("  compare (hc_net_sig_equal)                  %8.1f\n", best_of(t_cmp, REPS));
  printf("  gpu-expect (hc_engine_expect_sigs)          %8.1f\n", best_of(t_expect, REPS));
  printf("  plan (add + stage + reset), for scale       %8.1f\n", best_of(t_plan, REPS));
  hc_scratch_pool_destroy(pool);
  free(tx);
  free(rx);
  return sink == 42 ? 3 : 0;
}
