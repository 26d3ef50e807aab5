/*
 * Pulls against slot copies, timed per collective and size class
 * (src/api/pull_choice.c).
 *
 * class: the state machine alone, fed made-up times: which calls allow
 * pulls and are trials, that the best (not the last or the mean) time of
 * each way decides, that a tie keeps pulls, and that it decides once.
 * comm_*: two ranks as processes, so that the pair goes over shm and can
 * pull (CMA). Eight all-reduces of 4 KiB (below the pull size: the class
 * stays untouched), then eight of 1 MiB, all of integers, so that the
 * expected sums are exact, and all must be right. The 1 MiB class must
 * have made its six trials, the connection's counters must show no send
 * pulled in the three with pulls withheld, and some pulled where they are
 * allowed. Then eight in-place broadcasts of 1 MiB from rank 0, checked:
 * the root's lone send is pulled in the three trials that allow pulls and
 * in none other, and never under HETCCL_SHM_CMA_TUNE=0 (no class is timed
 * there, and shm sends lone sends through slots).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/api/api_priv.h"
#include "../../src/net/shm_priv.h"
#include "testutil.h"

/* The made-up times below are written for this many trials of each way. */
_Static_assert(HC_PULL_TRIALS == 3, "test_class's times assume 3 trials per way");
#define TRIALS HC_PULL_TRIALS

static void test_class(void) {
  tu_set_case("class");
  struct hc_pull_class c = {0};
  /* pulls: 90, 50, 70 us; copies: 60, 55, 200 us -> pulls (50 < 55). */
  const uint64_t times[2 * TRIALS] = {90000, 50000, 70000, 60000, 55000, 200000};
  for (int i = 0; i < 2 * TRIALS; i++) {
    bool trial, allow = hc_pull_class_allows(&c, &trial);
    CHECK(trial, "call %d is a trial", i);
    CHECK(allow == (i < TRIALS), "call %d: pulls %s", i, allow ? "allowed" : "withheld");
    bool decided = hc_pull_class_record(&c, allow, times[i]);
    CHECK(decided == (i == 2 * TRIALS - 1), "call %d: decided %d", i, decided);
  }
  bool trial, allow = hc_pull_class_allows(&c, &trial);
  CHECK(!trial && allow && !c.copies, "after the trials: trial %d, pulls %d (best %llu / %llu)", trial, allow,
        (unsigned long long)c.best_ns[0], (unsigned long long)c.best_ns[1]);
  CHECK(c.best_ns[0] == 50000 && c.best_ns[1] == 55000, "best %llu / %llu", (unsigned long long)c.best_ns[0],
        (unsigned long long)c.best_ns[1]);

  /* copies faster by one best call; ties keep pulls. */
  const uint64_t copies_win[2 * TRIALS] = {50000, 50000, 50000, 90000, 49999, 90000};
  const uint64_t tie[2 * TRIALS] = {70000, 50000, 60000, 50000, 80000, 90000};
  for (int k = 0; k < 2; k++) {
    const uint64_t *t = k == 0 ? copies_win : tie;
    struct hc_pull_class d = {0};
    for (int i = 0; i < 2 * TRIALS; i++) {
      bool tr, al = hc_pull_class_allows(&d, &tr);
      hc_pull_class_record(&d, al, t[i]);
    }
    bool tr, al = hc_pull_class_allows(&d, &tr);
    CHECK(!tr && al == (k == 1), "%s: pulls %s afterwards", k == 0 ? "copies faster" : "tie",
          al ? "allowed" : "withheld");
  }
  tu_set_case("%s", "");
}

#define BIG_COUNT (256 * 1024) /* int32: 1 MiB */
#define SMALL_COUNT 1024       /* 4 KiB */
#define CALLS 8

static bool tune_on;

/* CALLS all-reduces of count int32, each checked against the exact sum;
 * pulled[k]: the messages call k sent to the peer by CMA (0 without conn). */
static bool allreduce_checked(hetcclComm_t comm, int rank, int nranks, size_t count, const struct hc_shm_conn *conn,
                              uint64_t pulled[CALLS]) {
  int32_t *in = malloc(count * sizeof(int32_t)), *out = malloc(count * sizeof(int32_t));
  bool ok = CHECK(in && out, "out of memory");
  const int32_t ranks_sum = nranks * (nranks + 1) / 2;
  for (int call = 0; ok && call < CALLS; call++) {
    for (size_t i = 0; i < count; i++) in[i] = (int32_t)(i % 1000) * (rank + 1) + call;
    const uint64_t before = conn ? conn->nsent[HC_SHM_CMA] : 0;
    ok = CHECK_OK(hetcclAllReduce(in, out, count, hetcclInt32, hetcclSum, comm, NULL));
    pulled[call] = conn ? conn->nsent[HC_SHM_CMA] - before : 0;
    for (size_t i = 0; ok && i < count; i++) {
      const int32_t want = (int32_t)(i % 1000) * ranks_sum + call * nranks;
      ok = CHECK(out[i] == want, "call %d, count %zu: out[%zu] = %d, want %d", call, count, i, out[i], want);
    }
  }
  free(in);
  free(out);
  return ok;
}

static uint64_t sends_of(const struct hc_shm_conn *conn) {
  uint64_t n = 0;
  for (int k = 0; k < HC_SHM_NKINDS; k++) n += conn->nsent[k];
  return n;
}

/* CALLS in-place broadcasts of count int32 from rank 0, checked against
 * the root's pattern; per call, the messages sent to the peer (sent) and
 * of them those pulled by CMA (pulled). */
static bool broadcast_checked(hetcclComm_t comm, int rank, size_t count, const struct hc_shm_conn *conn,
                              uint64_t sent[CALLS], uint64_t pulled[CALLS]) {
  int32_t *buf = malloc(count * sizeof(int32_t));
  bool ok = CHECK(buf != NULL, "out of memory");
  for (int call = 0; ok && call < CALLS; call++) {
    for (size_t i = 0; i < count; i++) buf[i] = rank == 0 ? (int32_t)(i % 997) + call : -1;
    const uint64_t sent_before = sends_of(conn), pulled_before = conn->nsent[HC_SHM_CMA];
    ok = CHECK_OK(hetcclBroadcast(buf, buf, count, hetcclInt32, 0, comm, NULL));
    sent[call] = sends_of(conn) - sent_before;
    pulled[call] = conn->nsent[HC_SHM_CMA] - pulled_before;
    for (size_t i = 0; ok && i < count; i++)
      ok = CHECK(buf[i] == (int32_t)(i % 997) + call, "broadcast call %d: buf[%zu] = %d, want %d", call, i, buf[i],
                 (int32_t)(i % 997) + call);
  }
  free(buf);
  return ok;
}

/* The root of a 2-rank broadcast sends alone, which shm sends through
 * slots by its own rule (HETCCL_SHM_LONE_SEND_SLOTS); a timed class pulls
 * every piece in the trials that allow pulls, and none in the others. */
static bool lone_send_timed(hetcclComm_t comm, int rank, const struct hc_shm_conn *conn) {
  uint64_t sent[CALLS], pulled[CALLS];
  bool ok = broadcast_checked(comm, rank, BIG_COUNT, conn, sent, pulled);
  if (rank != 0 || !ok) return ok;
  const struct hetcclComm *c = (const struct hetcclComm *)comm;
  const struct hc_pull_class *in_place = &c->pull_classes[HC_COLL_BROADCAST][1][20];
  const struct hc_pull_class *out_of_place = &c->pull_classes[HC_COLL_BROADCAST][0][20];
  ok = CHECK(in_place->calls == (tune_on ? 2 * TRIALS : 0) && out_of_place->calls == 0,
             "the 1 MiB broadcast's classes: %d calls timed in place, %d out of place", in_place->calls,
             out_of_place->calls) &&
       ok;
  for (int k = 0; k < 2 * TRIALS; k++) {
    const bool allowed = tune_on && k < TRIALS && conn->peer_cma;
    const char *way = !tune_on ? "untimed" : k < TRIALS ? "allowed" : "withheld";
    ok = CHECK(sent[k] > 0 && pulled[k] == (allowed ? sent[k] : 0),
               "broadcast call %d (pulls %s): %llu of %llu sends pulled", k, way, (unsigned long long)pulled[k],
               (unsigned long long)sent[k]) &&
         ok;
  }
  return ok;
}

static int comm_rank(int rank, int nranks, hetcclUniqueId id, void *arg) {
  (void)arg;
  hetcclComm_t comm;
  if (!CHECK_OK(hetcclCommInitRank(&comm, nranks, id, rank))) return 1;
  struct hetcclComm *c = (struct hetcclComm *)comm;
  const struct hc_pull_class *big = &c->pull_classes[HC_COLL_ALLREDUCE][0][20];
  const struct hc_pull_class *small = &c->pull_classes[HC_COLL_ALLREDUCE][0][12];
  uint64_t pulled[CALLS];
  /* The first call connects the pair. */
  bool ok = allreduce_checked(comm, rank, nranks, SMALL_COUNT, NULL, pulled);
  const struct hc_link *l = &c->links.peer[1 - rank];
  const struct hc_shm_conn *conn = l->net == &hc_net_shm ? l->conn : NULL;
  ok = CHECK(conn != NULL, "the pair does not go over shm") && ok;
  if (!ok) goto out;
  ok = allreduce_checked(comm, rank, nranks, BIG_COUNT, conn, pulled);
  ok = CHECK(small->calls == 0, "the 4 KiB class was timed (%d calls)", small->calls) && ok;
  uint64_t pulled_allowed = 0;
  for (int k = 0; k < CALLS; k++) pulled_allowed += tune_on && k >= TRIALS && k < 2 * TRIALS ? 0 : pulled[k];
  /* The peer's probe can fail (Yama, seccomp): then nothing is pulled. */
  if (conn->peer_cma) ok = CHECK(pulled_allowed > 0, "no send was pulled") && ok;
  if (tune_on) {
    ok = CHECK(c->pull_min_bytes > 0, "no pull size with HETCCL_SHM_CMA_TUNE=1") && ok;
    ok = CHECK(big->calls == 2 * TRIALS && big->best_ns[0] > 0 && big->best_ns[1] > 0,
               "the 1 MiB class: %d calls, best %llu / %llu ns", big->calls, (unsigned long long)big->best_ns[0],
               (unsigned long long)big->best_ns[1]) &&
         ok;
    for (int k = TRIALS; k < 2 * TRIALS; k++)
      ok = CHECK(pulled[k] == 0, "call %d, a trial with pulls withheld, pulled %llu sends", k,
                 (unsigned long long)pulled[k]) &&
           ok;
  } else {
    ok = CHECK(c->pull_min_bytes == 0 && big->calls == 0, "HETCCL_SHM_CMA_TUNE=0: pull size %zu, %d calls timed",
               c->pull_min_bytes, big->calls) &&
         ok;
  }
  ok = lone_send_timed(comm, rank, conn) && ok;
out:
  CHECK_OK(hetcclCommDestroy(comm));
  return !ok;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const char *only = argc > 1 ? argv[1] : NULL;
  if (only == NULL || !strcmp(only, "class")) test_class();
  for (int on = 1; on >= 0; on--) {
    const char *name = on ? "comm_tuned" : "comm_untuned";
    if (only != NULL && strcmp(only, name)) continue;
    setenv("HETCCL_SHM_CMA_TUNE", on ? "1" : "0", 1);
    hc_params_reset();
    tune_on = on;
    tu_set_case("%s", name);
    CHECK(tu_run_rank_processes(2, comm_rank, NULL) == 0, "%s: a rank failed", name);
  }
  return tu_finish("pull_choice");
}
