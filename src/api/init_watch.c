/* Watched waits of comm init; see init_watch.h. */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "init_watch.h"

#define WATCH_PAUSE_NS 1000000ull  /* between polls of the vendor's init */
#define WATCH_PEERS_NS 10000000ull /* between looks at the peers */

/* Has the process of a same-host peer exited, waiting up to wait_ms for
 * it to finish: the kernel closes a dying process's sockets before it
 * marks the process exited, so a peer whose connection just closed may
 * not have exited yet. */
static bool peer_exited(const struct hc_peer_info *p, int wait_ms) {
  const int pidfd = hc_pidfd_open(p->pid);
  bool exited = hc_pid_exited(p->pid, pidfd);
  for (int ms = 0; ms < wait_ms && !exited; ms++) {
    const struct timespec pause = {0, 1000000};
    nanosleep(&pause, NULL);
    exited = hc_pid_exited(p->pid, pidfd);
  }
  if (pidfd >= 0) close(pidfd);
  return exited;
}

static hc_result_t exited_during_init(int me, int i, int pid, const char *during) {
  hc_blame(i);
  return HC_FAIL(HC_ERR_REMOTE, "rank %d: rank %d (pid %d) exited during init, %s", me, i, pid, during);
}

hc_result_t hc_comm_init_peers_check(struct hetcclComm *comm, const char *during) {
  const int me = comm->rank;
  if (atomic_load(&comm->abort_flag))
    return HC_FAIL(HC_ERR_REMOTE, "rank %d: aborted (hetcclCommAbort) %s", me, during);
  if (comm->peers == NULL) return HC_OK;
  const struct hc_peer_info *mine = &comm->peers[me];
  for (int i = 0; i < comm->nranks; i++) {
    const struct hc_peer_info *p = &comm->peers[i];
    if (i == me || p->net.host != mine->net.host || p->pid <= 0) continue;
    if (peer_exited(p, 0)) return exited_during_init(me, i, (int)p->pid, during);
  }
  const int gone = comm->boot ? hc_bootstrap_hung_up(comm->boot) : -1;
  if (gone >= 0) {
    const struct hc_peer_info *p = &comm->peers[gone];
    if (p->net.host == mine->net.host && p->pid > 0 && peer_exited(p, 100))
      return exited_during_init(me, gone, (int)p->pid, during);
    hc_blame(gone);
    return HC_FAIL(HC_ERR_REMOTE,
                   "rank %d: rank %d closed its bootstrap connection during init (it died, or failed its own init), "
                   "%s",
                   me, gone, during);
  }
  return HC_OK;
}

hc_result_t hc_comm_vendor_init_watched_blocking(struct hetcclComm *comm, const struct hc_vendor *v, int nranks,
                                                 hc_vendor_id id, int rank, void **out) {
  *out = NULL;
  if (v->comm_init_rank_config == NULL) {
    HC_INFO(HC_VENDOR,
            "rank %d: %s %d has no ncclCommInitRankConfig: its init is blocking, and a peer that dies "
            "during it is not noticed there",
            comm->rank, v->name, v->version);
    return hc_vendor_check(v, NULL, v->comm_init_rank(out, nranks, id, rank), "CommInitRank");
  }
  struct hc_vendor_config config = {
      .size = sizeof(config), .magic = HC_VENDOR_CONFIG_MAGIC, .version = HC_VENDOR_CONFIG_VERSION, .blocking = 0};
  void *vc = NULL;
  int state = v->comm_init_rank_config(&vc, nranks, id, rank, &config);
  char during[128];
  snprintf(during, sizeof(during), "while the %s communicator of its group (%d ranks) was being set up", v->name,
           nranks);
  const uint64_t deadline = hc_deadline_ns();
  uint64_t next_look = 0;
  hc_result_t r = HC_OK;
  while (r == HC_OK) {
    if (state == HC_VENDOR_IN_PROGRESS && vc != NULL && hc_vendor_async_error(v, vc, &state) != 0)
      state = HC_VENDOR_IN_PROGRESS; /* asked again on the next pass */
    if (state == 0) break;
    if (state != HC_VENDOR_IN_PROGRESS) {
      r = hc_vendor_check(v, NULL, state, "CommInitRankConfig");
      break;
    }
    const uint64_t now = hc_now_ns();
    if (now > deadline) {
      r = HC_FAIL(HC_ERR_REMOTE, "rank %d: timed out after HETCCL_TIMEOUT=%llds %s", comm->rank,
                  (long long)hc_param_int(HC_P_TIMEOUT), during);
      break;
    }
    if (now >= next_look) {
      next_look = now + WATCH_PEERS_NS;
      r = hc_comm_init_peers_check(comm, during);
      if (r != HC_OK) break;
    }
    const struct timespec pause = {0, (long)WATCH_PAUSE_NS};
    nanosleep(&pause, NULL);
  }
  if (r != HC_OK) {
    /* Ends the library's own waits for the missing peer. */
    if (vc) v->comm_abort(vc);
    return r;
  }
  *out = vc;
  return HC_OK;
}
