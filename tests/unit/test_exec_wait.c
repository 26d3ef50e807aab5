/*
 * The wait policy learns from every wait, the one that ends a plan
 * included (src/exec/exec.c, wait_state_moved).
 *
 * Two ranks as processes, HETCCL_SPIN_US=0 so that a wait sleeps at once
 * and never yields (a yield that ran another thread would restart the
 * count below). Rank 0 starts as if a yield had just run another thread
 * here: its next WAIT_PEER_HERE_WAITS waits skip bare polling. Then CALLS
 * all-gathers of 16 floats, checked, with rank 1 sleeping before each, so
 * that rank 0 waits in every call, and that wait is the plan's last: a
 * 2-rank all-gather this small takes one step, whose receive ends it. The
 * count must have run out. When only a pass that moved mid-plan taught
 * the policy, it stayed where it was for the comm's life, and such a rank
 * yielded in every wait (docs/perf.md, "Unbound ranks").
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../src/api/api_priv.h"
#include "testutil.h"

#define CALLS 48
#define COUNT 16
#define PEER_HERE_WAITS 32 /* exec.c's WAIT_PEER_HERE_WAITS */
#define RANK1_LATE_NS 2000000L

static bool allgather_checked(hetcclComm_t comm, int rank, int call) {
  float in[COUNT], out[2 * COUNT];
  for (int i = 0; i < COUNT; i++) in[i] = (float)(rank * 1000 + call * COUNT + i);
  if (rank == 1) nanosleep(&(struct timespec){.tv_nsec = RANK1_LATE_NS}, NULL);
  if (!CHECK_OK(hetcclAllGather(in, out, COUNT, hetcclFloat32, comm, NULL))) return false;
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < COUNT; i++)
      if (!CHECK(out[r * COUNT + i] == (float)(r * 1000 + call * COUNT + i), "call %d: out[%d] = %g", call,
                 r * COUNT + i, (double)out[r * COUNT + i]))
        return false;
  return true;
}

static int comm_rank(int rank, int nranks, hetcclUniqueId id, void *arg) {
  (void)arg;
  hetcclComm_t comm;
  if (!CHECK_OK(hetcclCommInitRank(&comm, nranks, id, rank))) return 1;
  struct hetcclComm *c = (struct hetcclComm *)comm;
  bool ok = allgather_checked(comm, rank, 0); /* connects the pair */
  const uint64_t waits_before = c->links.waits.waits;
  if (rank == 0) c->links.peer_here_waits = PEER_HERE_WAITS;
  for (int call = 1; ok && call <= CALLS; call++) ok = allgather_checked(comm, rank, call);
  if (ok && rank == 0) {
    const uint64_t waits = c->links.waits.waits - waits_before;
    ok = CHECK(waits >= PEER_HERE_WAITS, "rank 0 waited %llu times in %d calls", (unsigned long long)waits, CALLS) &&
         CHECK(c->links.peer_here_waits == 0,
               "after %llu waits, %d still skip bare polling (a yield ran another thread %d waits before)",
               (unsigned long long)waits, c->links.peer_here_waits, PEER_HERE_WAITS);
  }
  CHECK_OK(hetcclCommDestroy(comm));
  return !ok;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  setenv("HETCCL_SPIN_US", "0", 1);
  hc_params_reset();
  tu_set_case("%s", "last wait teaches");
  CHECK(tu_run_rank_processes(2, comm_rank, NULL) == 0, "a rank failed");
  return tu_finish("exec_wait");
}
