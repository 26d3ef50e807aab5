/*
 * Nonblocking comms (config blocking = 0), NCCL's contract (hetccl.h,
 * "Nonblocking comms"), over CPU ranks:
 *  1. 3 ranks as threads: rank 0 starts its init before the others do, so
 *     its init cannot have finished: GetAsyncError reads InProgress and
 *     calls on the comm are refused with InvalidArgument; then every rank
 *     polls until success and an all-reduce gives the exact sum; a split
 *     of the nonblocking comm is nonblocking too (polled, then a
 *     collective); a nonblocking finalize is polled, after which a
 *     collective is InvalidUsage; destroy.
 *  2. An init that fails: rank 0 of 2 alone, HETCCL_TIMEOUT=2: polling
 *     reads the error, GetLastError(comm) explains it, a collective gets
 *     the same code, destroy succeeds (LeakSanitizer: nothing left).
 *  3. Abort, then destroy, of an init that cannot finish (rank 0 of 2
 *     alone, HETCCL_TIMEOUT=600): each returns success well before the
 *     timeout (a deadline of 60 s that detects an abort that waits).
 *
 * Usage: test_api_nonblocking (no arguments).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define POLL_DEADLINE_S 120.0 /* polling longer than this is a hang */
#define NAME "nb-test"

/* Polls comm until its state is no longer InProgress; returns that state
 * (InProgress itself after POLL_DEADLINE_S). */
static hetcclResult_t poll_comm(hetcclComm_t comm) {
  const double t0 = tu_seconds();
  hetcclResult_t state = hetcclInProgress;
  while (tu_seconds() - t0 < POLL_DEADLINE_S) {
    if (!CHECK_OK(hetcclCommGetAsyncError(comm, &state))) return hetcclInternalError;
    if (state != hetcclInProgress) return state;
    usleep(1000);
  }
  CHECK(0, "still InProgress after %.0f s", POLL_DEADLINE_S);
  return state;
}

static hetcclConfig_t nonblocking_config(void) {
  hetcclConfig_t cfg = HETCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  cfg.commName = NAME;
  return cfg;
}

/* in[i] = rank + i; the sum over n ranks is n * i + n * (n - 1) / 2. */
static void check_allreduce(hetcclComm_t comm, int rank, int n, const char *what) {
  int32_t in[7], out[7];
  for (int i = 0; i < 7; i++) in[i] = rank + i, out[i] = -1;
  if (!CHECK_OK(hetcclAllReduce(in, out, 7, hetcclInt32, hetcclSum, comm, NULL))) return;
  for (int i = 0; i < 7; i++)
    CHECK(out[i] == n * i + n * (n - 1) / 2, "%s: all-reduce[%d] = %d, expected %d", what, i, out[i],
          n * i + n * (n - 1) / 2);
}

/* ---- 1. init, calls, split, finalize ---- */

static void refused_while_initialising(hetcclComm_t comm) {
  hetcclResult_t state = hetcclSuccess;
  CHECK_OK(hetcclCommGetAsyncError(comm, &state));
  CHECK(state == hetcclInProgress, "rank 0's init finished (%d) before any other rank started", (int)state);
  int32_t x = 1, y = 0;
  hc_set_last_error("");
  hetcclResult_t r = hetcclAllReduce(&x, &y, 1, hetcclInt32, hetcclSum, comm, NULL);
  CHECK(r == hetcclInvalidArgument, "AllReduce during init returned %d, expected InvalidArgument", (int)r);
  const char *msg = hetcclGetLastError(NULL);
  CHECK(strstr(msg, "still running") && strstr(msg, NAME), "AllReduce during init: message \"%s\"", msg);
  int n = 0;
  r = hetcclCommCount(comm, &n);
  CHECK(r == hetcclInvalidArgument, "CommCount during init returned %d, expected InvalidArgument", (int)r);
  r = hetcclCommFinalize(comm);
  CHECK(r == hetcclInvalidArgument, "CommFinalize during init returned %d, expected InvalidArgument", (int)r);
}

static int split_and_finalize(hetcclComm_t comm, int rank, int nranks) {
  hetcclComm_t child = NULL;
  /* Ranks 1.. form the child (config NULL: the parent's, nonblocking). */
  hetcclResult_t r = hetcclCommSplit(comm, rank == 0 ? HETCCL_SPLIT_NOCOLOR : 1, rank, &child, NULL);
  CHECK(r == hetcclInProgress || r == hetcclSuccess, "split returned %d: %s", (int)r, hetcclGetLastError(NULL));
  if (rank == 0) {
    CHECK(child == NULL, "NOCOLOR split gave a comm");
  } else if (CHECK(child != NULL, "split gave no comm")) {
    if (poll_comm(child) == hetcclSuccess) check_allreduce(child, rank - 1, nranks - 1, "child");
    CHECK_OK(hetcclCommDestroy(child));
  }
  r = hetcclCommFinalize(comm);
  CHECK(r == hetcclInProgress || r == hetcclSuccess, "finalize returned %d: %s", (int)r, hetcclGetLastError(NULL));
  CHECK(poll_comm(comm) == hetcclSuccess, "finalize ended in %d", (int)r);
  int32_t x = 1, y = 0;
  r = hetcclAllReduce(&x, &y, 1, hetcclInt32, hetcclSum, comm, NULL);
  CHECK(r == hetcclInvalidUsage, "AllReduce after finalize returned %d, expected InvalidUsage", (int)r);
  return 0;
}

static int nonblocking_rank(int rank, int nranks, hetcclUniqueId id, void *arg) {
  (void)arg;
  hetcclConfig_t cfg = nonblocking_config();
  hetcclComm_t comm = NULL;
  /* Rank 0 first, alone: its init waits for the others. */
  if (rank != 0 && !tu_barrier()) return 1;
  hetcclResult_t r = hetcclCommInitRankConfig(&comm, nranks, id, rank, &cfg);
  CHECK(r == hetcclInProgress || r == hetcclSuccess, "init returned %d: %s", (int)r, hetcclGetLastError(NULL));
  if (!CHECK(comm != NULL, "init gave no comm")) return 1;
  if (rank == 0) {
    refused_while_initialising(comm);
    if (!tu_barrier()) return 1;
  }
  hetcclResult_t state = poll_comm(comm);
  CHECK(state == hetcclSuccess, "init ended in %d: %s", (int)state, hetcclGetLastError(comm));
  if (state == hetcclSuccess) {
    int n = 0;
    CHECK_OK(hetcclCommCount(comm, &n));
    CHECK(n == nranks, "CommCount %d", n);
    check_allreduce(comm, rank, nranks, "comm");
    split_and_finalize(comm, rank, nranks);
  }
  CHECK_OK(hetcclCommDestroy(comm));
  return 0;
}

/* ---- 2, 3. alone of two ---- */

static void set_timeout(int seconds) {
  char t[16];
  snprintf(t, sizeof(t), "%d", seconds);
  setenv("HETCCL_TIMEOUT", t, 1);
  hc_params_reset();
}

/* Rank 0 of 2 of a fresh id; rank 1 never comes. */
static hetcclComm_t init_alone(void) {
  hetcclUniqueId id;
  hetcclConfig_t cfg = nonblocking_config();
  hetcclComm_t comm = NULL;
  if (!CHECK_OK(hetcclGetUniqueId(&id))) return NULL;
  hetcclResult_t r = hetcclCommInitRankConfig(&comm, 2, id, 0, &cfg);
  CHECK(r == hetcclInProgress, "init alone of 2 returned %d: %s", (int)r, hetcclGetLastError(NULL));
  CHECK(comm != NULL, "init alone of 2 gave no comm");
  return r == hetcclInProgress ? comm : NULL;
}

static void failed_init(void) {
  tu_set_case("nonblocking init, rank 0 alone of 2, HETCCL_TIMEOUT=2");
  set_timeout(2);
  hetcclComm_t comm = init_alone();
  if (comm == NULL) return;
  hetcclResult_t state = poll_comm(comm);
  CHECK(state == hetcclRemoteError || state == hetcclSystemError,
        "the init alone ended in %d (%s), expected RemoteError or SystemError", (int)state,
        hetcclGetErrorString(state));
  hc_set_last_error("");
  const char *why = hetcclGetLastError(comm);
  CHECK(strstr(why, NAME) && strstr(why, "bootstrap"), "GetLastError(comm) after the failed init: \"%s\"", why);
  int32_t x = 1, y = 0;
  hetcclResult_t r = hetcclAllReduce(&x, &y, 1, hetcclInt32, hetcclSum, comm, NULL);
  CHECK(r == state, "AllReduce after the failed init returned %d, expected %d", (int)r, (int)state);
  CHECK(strstr(hetcclGetLastError(NULL), "init failed"), "AllReduce after the failed init: \"%s\"",
        hetcclGetLastError(NULL));
  CHECK_OK(hetcclCommDestroy(comm));
}

static void stopped_init(bool abort) {
  tu_set_case("%s of a nonblocking init that waits for a peer, HETCCL_TIMEOUT=600", abort ? "abort" : "destroy");
  set_timeout(600);
  hetcclComm_t comm = init_alone();
  if (comm == NULL) return;
  hetcclResult_t state = hetcclSuccess;
  CHECK_OK(hetcclCommGetAsyncError(comm, &state));
  CHECK(state == hetcclInProgress, "init alone of 2 is no longer in progress: %d", (int)state);
  const double t0 = tu_seconds();
  CHECK_OK(abort ? hetcclCommAbort(comm) : hetcclCommDestroy(comm));
  const double took = tu_seconds() - t0;
  CHECK(took < 60, "%s of an init in progress took %.1f s", abort ? "abort" : "destroy", took);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  setenv("HETCCL_DEBUG", "NONE", 0);
  hc_params_reset();
  tu_set_case("3 ranks, nonblocking init, split, finalize");
  int bad = tu_run_ranks(3, nonblocking_rank, NULL);
  CHECK(bad == 0, "%d ranks failed", bad);
  failed_init();
  stopped_init(true);
  stopped_init(false);
  return tu_finish("test_api_nonblocking");
}
