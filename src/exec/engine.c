/* The progress engine of the process; see engine.h. */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "../vendor/vendor.h"
#include "engine.h"

#define HC_ENGINE_SPIN_NS 2000000ull          /* looks for new work this long before sleeping */
#define HC_ENGINE_TICK_MS 10                  /* watch period while some wait is outstanding */
#define HC_ENGINE_IDLE_MS 100                 /* ... and while none is */
#define HC_ENGINE_BEAT_NS 50000000ull         /* heartbeat period */
#define HC_ENGINE_STALE_NS 1000000000ull      /* a heartbeat this old: its engine is stopped or stuck */
#define HC_ENGINE_VENDOR_POLL_NS 100000000ull /* vendor async error */
/* After a failure the streams are released this much later (at once on
 * abort and destroy): a framework that polls the async error (PyTorch's
 * watchdog) must see the error while the work is still pending, as with
 * NCCL, not a completed collective. Measured on the H200 with immediate
 * release: 1 try in 8 of a 4-rank kill, the survivors read the wrong data
 * of a work that had completed before the watchdog looked. A release after
 * the grace arms the lanes' trap first (enqueue.h), so the work it lets go
 * fails instead of completing; 2 tries in 48 had read wrong data with the
 * grace alone. */
#define HC_ENGINE_RELEASE_GRACE_NS 2000000000ull
/* Window stall probes (window_probe): after this long without a piece,
 * looked at this often, as exec.c's host runs do. */
#define HC_ENGINE_PROBE_NS 1000000000ull
#define HC_ENGINE_PROBE_LOOK_NS 100000000ull

enum { TX = 0, RX = 1 };

/* Window pieces [first, end) that this rank's streams receive from a peer
 * for calls of signature sig. */
struct sig_run {
  uint64_t first, end;
  struct hc_net_sig sig;
};

/* One peer of one comm, as the engine watches it. */
struct peer_watch {
  int pidfd;                  /* same-host peer: hc_pidfd_open's answer */
  atomic_ullong expect[2];    /* window pieces this rank's streams will have sent / received */
  uint64_t seen[2], since[2]; /* the waited counter's last value, and since when it has it */
  uint64_t beat, beat_since;  /* the peer's heartbeat, and since when it has not moved */
  /* The signatures the received pieces must carry (hc_engine_expect_sigs
   * appends, the engine checks and drops), under hc_engine_comm.sigs_lock. */
  struct sig_run *runs;
  int nruns, runs_cap;
  uint64_t sig_next; /* the engine thread's: the next received piece to check */
  /* Stall probe (window_probe): what this rank published to the peer, and
   * the peer's probe generation at the last look, + 1 (0: none yet). */
  struct hc_net_sig probe_sent;
  uint64_t probe_seen;
};

struct hc_engine_comm {
  struct hc_engine_desc d;
  int rank, nranks;
  struct peer_watch *peers;
  pthread_mutex_t sigs_lock; /* peer_watch.runs */
  atomic_bool failed, vendor_aborted;
  /* Under engine.lock: */
  struct hc_engine_job *head, *tail;
  bool busy;    /* a job of this comm is in flight */
  bool leaving; /* unregister waits for it to be removed */
  bool gone;
  struct hc_engine_comm *next;
  /* The engine thread's: */
  struct hc_engine_job *job; /* in flight */
  struct hc_exec_run *run;
  uint64_t run_moved_ns, next_vendor_poll_ns, next_pid_check_ns, next_probe_look_ns;
  uint32_t last_done; /* seq of the latest job that completed */
  int culprit;
  uint64_t release_at_ns; /* once failed: when the streams are released */
  bool trap_armed;
};

static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake, changed;
  struct hc_engine_comm *comms; /* new ones at the head; only the engine thread unlinks */
  int ncomms;
  bool running, stop;
  atomic_bool queued; /* a job came since the engine last looked */
  pthread_t thread;
} eng = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER};

/* Serialises register and unregister, so that a thread stopping and one
 * starting never overlap. */
static pthread_mutex_t eng_life = PTHREAD_MUTEX_INITIALIZER;

static volatile sig_atomic_t dump_requested;

static void on_dump_signal(int sig) {
  (void)sig;
  dump_requested = 1;
}

/* HETCCL_DUMP_SIGNAL: USR1, SIGUSR1 or a number; installed once. */
static void dump_signal_install(void) {
  static atomic_bool installed;
  const char *s = hc_param_str(HC_P_DUMP_SIGNAL);
  if (s[0] == '\0' || atomic_exchange(&installed, true)) return;
  int sig = 0;
  if (!strncasecmp(s, "SIG", 3)) s += 3;
  if (!strcasecmp(s, "USR1")) sig = SIGUSR1;
  else if (!strcasecmp(s, "USR2")) sig = SIGUSR2;
  else if (!strcasecmp(s, "HUP")) sig = SIGHUP;
  else if (!strcasecmp(s, "URG")) sig = SIGURG;
  else sig = atoi(s);
  struct sigaction sa = {.sa_handler = on_dump_signal, .sa_flags = SA_RESTART};
  sigemptyset(&sa.sa_mask);
  if (sig <= 0 || sig >= NSIG || sigaction(sig, &sa, NULL) != 0) {
    HC_WARN(HC_EXEC, "HETCCL_DUMP_SIGNAL=%s: not a signal this process can catch (USR1, USR2, HUP, URG or a number)",
            hc_param_str(HC_P_DUMP_SIGNAL));
    return;
  }
  HC_INFO(HC_EXEC, "engine: signal %d dumps the state of every communicator", sig);
}

static uint64_t timeout_ns(void) { return (uint64_t)hc_param_int(HC_P_TIMEOUT) * 1000000000ull; }

static const struct hc_net_window *window_of(const struct hc_engine_comm *c, int peer) {
  if (c->d.windows == NULL || peer == c->rank || c->d.windows[peer].w.bytes == 0) return NULL;
  return &c->d.windows[peer].w;
}

static void job_drop(struct hc_engine_job *job) {
  if (job == NULL) return;
  hc_plan_reset(&job->host);
  free(job);
}

void hc_engine_job_free(struct hc_engine_job *job) { job_drop(job); }

void hc_engine_release(struct hc_engine_comm *c) {
  hc_gpu_lanes_release(c->d.lanes, NULL);
  for (int p = 0; p < c->nranks; p++) {
    const struct hc_net_window *w = window_of(c, p);
    if (w == NULL) continue;
    atomic_ullong *waited[2] = {w->tx_freed, w->rx_filled};
    for (int d = 0; d < 2; d++)
      if (atomic_load(waited[d]) < HC_GPU_RELEASED) atomic_store(waited[d], HC_GPU_RELEASED);
  }
}

/* The peer to name for a wait that failed on peer fallback: a same-host
 * peer whose engine has stopped (the oldest such heartbeat) caused it,
 * whoever this rank was waiting for. */
static int blame(const struct hc_engine_comm *c, uint64_t now, int fallback) {
  int culprit = -1;
  uint64_t oldest = now;
  for (int p = 0; p < c->nranks; p++)
    if (window_of(c, p) && now - c->peers[p].beat_since > HC_ENGINE_STALE_NS && c->peers[p].beat_since < oldest) {
      oldest = c->peers[p].beat_since;
      culprit = p;
    }
  return culprit >= 0 ? culprit : fallback;
}

static void run_end(struct hc_engine_comm *c) {
  hc_exec_end(c->run);
  c->run = NULL;
  job_drop(c->job);
  c->job = NULL;
  pthread_mutex_lock(&eng.lock);
  c->busy = false;
  pthread_cond_broadcast(&eng.changed);
  pthread_mutex_unlock(&eng.lock);
}

/* The failure path (engine.h); the message is this thread's last error. */
static void comm_fail(struct hc_engine_comm *c, hc_result_t r, int culprit) {
  if (atomic_load(&c->failed)) return;
  const bool aborted = c->d.links->abort_flag && atomic_load(c->d.links->abort_flag);
  c->release_at_ns = hc_now_ns() + (aborted ? 0 : HC_ENGINE_RELEASE_GRACE_NS);
  c->culprit = culprit;
  hc_blame(culprit);
  c->d.fail(c->d.arg, r);
  atomic_store(&c->failed, true);
  for (int p = 0; p < c->nranks; p++) {
    const struct hc_net_window *w = window_of(c, p);
    int none = 0;
    if (w) atomic_compare_exchange_strong(w->notice, &none, culprit + 1);
  }
  if (c->run) run_end(c);
  pthread_mutex_lock(&eng.lock);
  struct hc_engine_job *dropped = c->head;
  c->head = c->tail = NULL;
  pthread_cond_broadcast(&eng.changed);
  pthread_mutex_unlock(&eng.lock);
  for (struct hc_engine_job *next; dropped; dropped = next) {
    next = dropped->next;
    job_drop(dropped);
  }
  if (aborted) hc_engine_release(c);
}

/* The grace ran out with nobody aborting the failed comm: what the streams
 * run from here on ends in a trap (enqueue.h). The vendor sub-comm is
 * aborted only now too: its kernels would also end without their data. */
static void trap_arm(struct hc_engine_comm *c) {
  c->trap_armed = true;
  if (c->d.lanes == NULL) return;
  hc_gpu_lanes_arm_trap(c->d.lanes);
  if (hc_param_int(HC_P_RELEASE_TRAP))
    HC_WARN(HC_EXEC,
            "rank %d: nobody aborted the failed comm within %.0f s: its streams are released, and a GPU call still in "
            "flight ends in a trap (a sticky device error) rather than complete without its data "
            "(HETCCL_RELEASE_TRAP)",
            c->rank, (double)HC_ENGINE_RELEASE_GRACE_NS / 1e9);
}

/* Once failed: a vendor kernel waiting for a dead peer ends only when its
 * comm is aborted; that waits until no call of the comm is inside the
 * library (later calls fail before they reach it). */
static void vendor_abort(struct hc_engine_comm *c) {
  if (c->d.vendor_comm == NULL || atomic_load(&c->vendor_aborted) || atomic_load(c->d.active_calls) > 0) return;
  c->d.vendor->comm_abort(c->d.vendor_comm);
  atomic_store(&c->vendor_aborted, true);
}

/* The signature this rank expects on received piece k from the peer, or
 * NULL (nothing recorded: not checked). Under sigs_lock. */
static const struct hc_net_sig *expected_sig(const struct peer_watch *pw, uint64_t k) {
  for (int r = 0; r < pw->nruns; r++)
    if (k >= pw->runs[r].first && k < pw->runs[r].end) return &pw->runs[r].sig;
  return NULL;
}

/* A GPU receiver's pieces from peer p: its stream waits for filled and
 * uses the piece with no host thread looking, so the engine checks each
 * piece's signature words (net.h) after the fact. A piece's words stay
 * until the sender's piece HC_NET_WINDOW_SIGS later, which waits until
 * this rank has freed piece k + HC_NET_WINDOW_SIGS - HC_WINDOW_SLOTS; so
 * words read before freed has passed that are piece k's. A piece the
 * streams left behind further than that before the engine looked (the
 * engine looks every 10 ms while a wait is outstanding, else every
 * 100 ms) goes unchecked; in a mismatch the later pieces, or a stall,
 * still show it. Returns whether the comm failed. */
static bool window_sigs_check(struct hc_engine_comm *c, int p, const struct hc_net_window *w) {
  struct peer_watch *pw = &c->peers[p];
  uint64_t filled = atomic_load(w->rx_filled);
  if (filled <= pw->sig_next) return false;
  pthread_mutex_lock(&c->sigs_lock);
  /* Pieces the calls enqueued so far receive; not what a peer released. */
  const uint64_t upto = HC_MIN(filled, pw->nruns ? pw->runs[pw->nruns - 1].end : pw->sig_next);
  uint64_t from = HC_MAX(pw->sig_next, upto > HC_NET_WINDOW_SIGS ? upto - HC_NET_WINDOW_SIGS : 0);
  struct hc_net_sig got[HC_NET_WINDOW_SIGS];
  for (uint64_t k = from; k < upto; k++) {
    const atomic_ullong *words = w->rx_sig + 2 * (k % HC_NET_WINDOW_SIGS);
    got[k - from] = (struct hc_net_sig){{atomic_load(&words[0]), atomic_load(&words[1])}};
  }
  const uint64_t freed = atomic_load(w->rx_freed);
  struct hc_net_sig bad_got, bad_want;
  bool bad = false;
  for (uint64_t k = from; k < upto && !bad; k++) {
    const struct hc_net_sig *want = expected_sig(pw, k);
    if (want == NULL || freed > k + HC_NET_WINDOW_SIGS - HC_WINDOW_SLOTS) continue; /* words reused: unchecked */
    if (hc_net_sig_equal(&got[k - from], want)) continue;
    bad = true;
    bad_got = got[k - from];
    bad_want = *want;
  }
  if (upto > pw->sig_next) pw->sig_next = upto;
  int done = 0;
  while (done < pw->nruns && pw->runs[done].end <= pw->sig_next) done++;
  if (done > 0) {
    memmove(pw->runs, pw->runs + done, (size_t)(pw->nruns - done) * sizeof(*pw->runs));
    pw->nruns -= done;
  }
  pthread_mutex_unlock(&c->sigs_lock);
  if (!bad) return false;
  /* Before the notice (comm_fail), so that the sender names both calls. */
  hc_net_mismatch_publish(w->mismatch, &bad_got, &bad_want);
  hc_result_t r = hc_net_sig_fail(hc_plan_sig_explain, c->rank, &bad_want, p, &bad_got, false);
  comm_fail(c, r, c->rank);
  return true;
}

/* Whether the comm was aborted (hetcclCommAbort); fails it if so. */
static bool watch_abort(struct hc_engine_comm *c) {
  if (c->d.links->abort_flag == NULL || !atomic_load(c->d.links->abort_flag)) return false;
  char text[128];
  snprintf(text, sizeof(text), "rank %d: the communicator was aborted (hetcclCommAbort)", c->rank);
  hc_set_last_error(text);
  HC_INFO(HC_EXEC, "%s", text);
  comm_fail(c, HC_ERR_REMOTE, c->rank);
  return true;
}

/* A stalled window wait: the peer and the direction (TX, RX). */
struct window_stall {
  int peer, dir;
};

/* The window shared with peer p: the peer's mismatch record and notice,
 * the signatures of the pieces received, its heartbeat, the counters the
 * streams wait on and, once a tick (check_pid), whether the peer exited.
 * Returns whether the comm failed; sets *waits when a counter is short of
 * what the streams wait for, and *stall (if not set yet) when one has not
 * moved for HETCCL_TIMEOUT. */
static bool watch_window(struct hc_engine_comm *c, int p, const struct hc_net_window *w, uint64_t now, bool check_pid,
                         bool *waits, struct window_stall *stall) {
  const int me = c->rank;
  struct peer_watch *pw = &c->peers[p];
  /* The notice first: a peer publishes its mismatch before its notice. */
  const int notice = atomic_load(w->peer_notice);
  if (w->peer_mismatch != NULL && atomic_load(&w->peer_mismatch->set)) {
    comm_fail(c, hc_net_mismatch_fail(w->peer_mismatch, hc_plan_sig_explain, me, p), p);
    return true;
  }
  if (notice > 0) {
    const int culprit = notice - 1;
    if (culprit == p)
      HC_FAIL(HC_ERR_REMOTE, "rank %d: rank %d failed (it timed out, lost a peer or was aborted)", me, p);
    else HC_FAIL(HC_ERR_REMOTE, "rank %d: rank %d failed because of rank %d", me, p, culprit);
    comm_fail(c, HC_ERR_REMOTE, culprit);
    return true;
  }
  if (window_sigs_check(c, p, w)) return true;
  const uint64_t beat = atomic_load(w->peer_heartbeat);
  if (beat != pw->beat) {
    pw->beat = beat;
    pw->beat_since = now;
  }
  atomic_ullong *waited[2] = {w->tx_freed, w->rx_filled};
  for (int d = 0; d < 2; d++) {
    const uint64_t v = atomic_load(waited[d]), target = atomic_load(&pw->expect[d]);
    if (v >= target || v != pw->seen[d]) {
      pw->seen[d] = v;
      pw->since[d] = now;
    }
    if (v >= target) continue;
    *waits = true;
    if (now - pw->since[d] > timeout_ns() && stall->peer < 0) *stall = (struct window_stall){p, d};
  }
  if (*waits && check_pid && c->d.peer_pid[p] > 0 && hc_pid_exited(c->d.peer_pid[p], pw->pidfd)) {
    HC_FAIL(HC_ERR_REMOTE, "rank %d: rank %d (pid %d) exited while this rank's streams waited for it", me, p,
            (int)c->d.peer_pid[p]);
    comm_fail(c, HC_ERR_REMOTE, p);
    return true;
  }
  return false;
}

/* A window counter that has not moved for HETCCL_TIMEOUT: fails the comm,
 * blaming a peer whose heartbeat stopped rather than the one waited for. */
static void window_stall_fail(struct hc_engine_comm *c, uint64_t now, struct window_stall st) {
  const struct peer_watch *pw = &c->peers[st.peer];
  const int culprit = blame(c, now, st.peer);
  HC_FAIL(HC_ERR_REMOTE,
          "rank %d: timed out after HETCCL_TIMEOUT=%llds waiting for rank %d (its window counter stayed at %llu, "
          "expected %llu %s)%s%.0d%s",
          c->rank, (long long)hc_param_int(HC_P_TIMEOUT), st.peer, (unsigned long long)pw->seen[st.dir],
          (unsigned long long)atomic_load(&pw->expect[st.dir]), st.dir == TX ? "pieces freed" : "pieces filled",
          culprit != st.peer ? "; rank " : "", culprit != st.peer ? culprit : 0,
          culprit != st.peer ? " stopped making progress (no heartbeat), blamed" : "");
  comm_fail(c, HC_ERR_REMOTE, culprit);
}

/* The transfers of the call in flight: failed once they have not moved
 * for HETCCL_TIMEOUT. Returns whether the comm failed. */
static bool watch_run(struct hc_engine_comm *c, uint64_t now) {
  if (c->run == NULL || now - c->run_moved_ns <= timeout_ns()) return false;
  struct hc_exec_state st;
  hc_exec_describe(c->run, &st);
  const int culprit = blame(c, now, st.awaited_peer);
  HC_FAIL(HC_ERR_REMOTE, "rank %d: timed out after HETCCL_TIMEOUT=%llds waiting for rank %d (call %u, step %d of %d)",
          c->rank, (long long)hc_param_int(HC_P_TIMEOUT), culprit, c->job->seq, st.steps_done, st.steps);
  comm_fail(c, HC_ERR_REMOTE, culprit);
  return true;
}

/* The vendor sub-comm's async error, every HC_ENGINE_VENDOR_POLL_NS. */
static void watch_vendor(struct hc_engine_comm *c, uint64_t now) {
  if (c->d.vendor_comm == NULL || now < c->next_vendor_poll_ns) return;
  c->next_vendor_poll_ns = now + HC_ENGINE_VENDOR_POLL_NS;
  int e = 0;
  hc_vendor_async_error(c->d.vendor, c->d.vendor_comm, &e);
  /* In progress: a call of the (nonblocking) sub-comm is still being set
   * up inside the library, as its caller waits for. */
  if (e != 0 && e != HC_VENDOR_IN_PROGRESS) {
    HC_FAIL(HC_ERR_REMOTE, "rank %d: the %s communicator of this rank's group failed (%s error %d)", c->rank,
            c->d.vendor->name, c->d.vendor->name, e);
    comm_fail(c, HC_ERR_REMOTE, c->rank);
  }
}

/* Publishes sig to peer p's stall probe (through the pair's shm
 * connection, net.h), unless it is what the peer already reads. */
static void probe_publish(struct hc_engine_comm *c, int p, const struct hc_net_sig *sig) {
  struct peer_watch *pw = &c->peers[p];
  const struct hc_link *l = &c->d.links->peer[p];
  if (hc_net_sig_equal(&pw->probe_sent, sig) || !hc_link_probes(l)) return;
  hc_link_stall_publish(l, sig);
  pw->probe_sent = *sig;
}

/* The call of the piece the streams wait for from peer p (all zeroes:
 * none, or none known) and that call's number. Under sigs_lock. */
static struct hc_net_sig rx_waited_sig(const struct hc_engine_comm *c, int p, uint32_t *seq) {
  const struct peer_watch *pw = &c->peers[p];
  const struct hc_net_window *w = window_of(c, p);
  const uint64_t filled = atomic_load(w->rx_filled);
  const struct hc_net_sig *want = filled < atomic_load(&pw->expect[RX]) ? expected_sig(pw, filled) : NULL;
  if (want == NULL) return (struct hc_net_sig){{0, 0}};
  *seq = (uint32_t)(want->w[1] >> 32);
  return *want;
}

/* Window stall probes: a mismatch in which two GPU ranks only wait to
 * receive from each other (Reduce with roots 0 and 1) puts no piece, so no
 * signature, in the window. A rank whose streams can be waiting only to
 * receive (no window piece it sends is unfreed, no transfer in flight: a
 * piece counts at enqueue, so a stream that has not reached a send yet
 * counts too) and whose receive has not moved for HC_ENGINE_PROBE_NS
 * publishes, to each peer it waits for in its oldest call (the lowest
 * number among the calls of the pieces it waits for), that call's
 * signature, as exec.c's host runs do on shm. A peer that publishes a
 * different call is stalled on this rank as well, under the same rules;
 * with the same calls in the same order on both, one of the two would
 * have sent what the other waits for, so the calls differ: both fail
 * naming both calls (the finder's record in the window tells the other,
 * which may find it too). Seen unchanged on two looks HC_ENGINE_PROBE_LOOK_NS
 * apart, so that a probe being cleared is not taken. Returns whether the
 * comm failed. */
static bool window_probe(struct hc_engine_comm *c, uint64_t now, bool may_probe) {
  uint32_t oldest = UINT32_MAX;
  pthread_mutex_lock(&c->sigs_lock);
  for (int p = 0; p < c->nranks && may_probe; p++) {
    const struct hc_net_window *w = window_of(c, p);
    if (w == NULL) continue;
    if (atomic_load(w->tx_freed) < atomic_load(&c->peers[p].expect[TX])) may_probe = false;
    uint32_t seq = UINT32_MAX;
    rx_waited_sig(c, p, &seq);
    if (seq < oldest) oldest = seq;
  }
  const bool look = now >= c->next_probe_look_ns;
  if (look) c->next_probe_look_ns = now + HC_ENGINE_PROBE_LOOK_NS;
  int bad_peer = -1;
  struct hc_net_sig bad_mine, bad_theirs;
  for (int p = 0; p < c->nranks && bad_peer < 0; p++) {
    struct peer_watch *pw = &c->peers[p];
    const struct hc_net_window *w = window_of(c, p);
    if (w == NULL) continue;
    uint32_t seq = UINT32_MAX;
    struct hc_net_sig mine = rx_waited_sig(c, p, &seq);
    const struct hc_net_sig none = {{0, 0}};
    if (!may_probe || seq != oldest || now - pw->since[RX] < HC_ENGINE_PROBE_NS) mine = none;
    probe_publish(c, p, &mine);
    const struct hc_link *l = &c->d.links->peer[p];
    if (hc_net_sig_equal(&mine, &none) || !look || !hc_link_probes(l)) continue;
    struct hc_net_sig theirs;
    uint64_t gen;
    hc_link_stall_peek(l, &theirs, &gen);
    const bool confirmed = pw->probe_seen == gen + 1;
    pw->probe_seen = gen + 1;
    if (!confirmed || hc_net_sig_equal(&theirs, &none) || hc_net_sig_equal(&theirs, &mine)) continue;
    bad_peer = p;
    bad_mine = mine;
    bad_theirs = theirs;
  }
  pthread_mutex_unlock(&c->sigs_lock);
  if (bad_peer < 0) return false;
  /* Before the notice (comm_fail), so that the peer names both calls. */
  hc_net_mismatch_publish(window_of(c, bad_peer)->mismatch, &bad_theirs, &bad_mine);
  comm_fail(c, hc_net_sig_fail(hc_plan_sig_explain, c->rank, &bad_mine, bad_peer, &bad_theirs, false), c->rank);
  return true;
}

/* Looks at everything the comm's streams may wait for; fails the comm on
 * the first fault. *outstanding: some wait is not satisfied yet. */
static void watch(struct hc_engine_comm *c, uint64_t now, bool *outstanding) {
  if (watch_abort(c)) return;
  struct window_stall stall = {-1, TX};
  /* A syscall per peer: once a tick, not on every pass of a busy loop. */
  const bool check_pids = now >= c->next_pid_check_ns;
  if (check_pids) c->next_pid_check_ns = now + HC_ENGINE_TICK_MS * 1000000ull;
  for (int p = 0; p < c->nranks; p++) {
    const struct hc_net_window *w = window_of(c, p);
    bool waits = false;
    if (w != NULL && watch_window(c, p, w, now, check_pids, &waits, &stall)) return;
    *outstanding |= waits;
  }
  if (stall.peer >= 0) {
    window_stall_fail(c, now, stall);
    return;
  }
  if (c->d.windows != NULL && window_probe(c, now, c->run == NULL)) return;
  if (watch_run(c, now)) return;
  watch_vendor(c, now);
}

/* One pass over the comm's job in flight. Returns whether it moved. */
static bool run_pass(struct hc_engine_comm *c, uint64_t now) {
  if (c->run == NULL) return false;
  bool done = false, moved = false;
  hc_blame(-1);
  hc_result_t r = hc_exec_poll(c->run, &done, &moved);
  if (r != HC_OK) {
    /* The transport names whom it blames (a peer's notice included). */
    struct hc_exec_state st;
    hc_exec_describe(c->run, &st);
    const int culprit = hc_blamed() >= 0 ? hc_blamed() : blame(c, now, st.failed_peer >= 0 ? st.failed_peer : c->rank);
    comm_fail(c, r, culprit);
    return true;
  }
  if (moved) c->run_moved_ns = now;
  if (done) {
    HC_TRACE(HC_EXEC, "engine: rank %d: call %u's transfers done", c->rank, c->job->seq);
    c->last_done = c->job->seq;
    run_end(c);
    return true;
  }
  return moved;
}

static void dump(struct hc_engine_comm *c, uint64_t now) {
  int queued = 0;
  uint32_t first = 0, last = 0;
  pthread_mutex_lock(&eng.lock);
  for (const struct hc_engine_job *j = c->head; j; j = j->next, queued++) {
    if (queued == 0) first = j->seq;
    last = j->seq;
  }
  pthread_mutex_unlock(&eng.lock);
  fprintf(stderr, "hetccl dump: pid %d rank %d of %d: %s; transfers of calls up to %u done, %d queued", (int)getpid(),
          c->rank, c->nranks, atomic_load(&c->failed) ? "FAILED" : "healthy", c->last_done, queued);
  if (queued) fprintf(stderr, " (calls %u..%u)", first, last);
  if (atomic_load(&c->failed)) fprintf(stderr, "; culprit rank %d", c->culprit);
  fprintf(stderr, "\n");
  if (c->run) {
    struct hc_exec_state st;
    hc_exec_describe(c->run, &st);
    fprintf(stderr, "hetccl dump:   call %u in flight: step %d of %d, waiting for rank %d, idle %.1f s", c->job->seq,
            st.steps_done, st.steps, st.awaited_peer, (double)(now - c->run_moved_ns) / 1e9);
    if (st.counter)
      fprintf(stderr, ", stream counter %p at %llu of %llu", (const void *)st.counter,
              (unsigned long long)atomic_load(st.counter), (unsigned long long)st.counter_target);
    fprintf(stderr, "\n");
  }
  for (int p = 0; p < c->nranks; p++) {
    const struct hc_net_window *w = window_of(c, p);
    if (w == NULL) continue;
    const struct peer_watch *pw = &c->peers[p];
    fprintf(stderr,
            "hetccl dump:   window with rank %d: pieces sent %llu (freed by it %llu), received %llu (filled by it "
            "%llu)%s; its heartbeat %.1f s old\n",
            p, (unsigned long long)atomic_load(&pw->expect[TX]), (unsigned long long)atomic_load(w->tx_freed),
            (unsigned long long)atomic_load(&pw->expect[RX]), (unsigned long long)atomic_load(w->rx_filled),
            atomic_load(w->tx_freed) < atomic_load(&pw->expect[TX]) ||
                    atomic_load(w->rx_filled) < atomic_load(&pw->expect[RX])
                ? ": the streams wait"
                : "",
            (double)(now - pw->beat_since) / 1e9);
  }
}

/* A comm that unregister may take away: its calls have run, or it failed
 * (an aborted one once the watch has failed it, streams released). */
static bool settled(const struct hc_engine_comm *c) {
  const bool aborted = c->d.links->abort_flag && atomic_load(c->d.links->abort_flag);
  return c->leaving && (atomic_load(&c->failed) || (!aborted && c->head == NULL && !c->busy));
}

/* Under eng.lock: takes away the comms that unregister waits for, and
 * gives each idle comm its next queued job. */
static void comms_take_jobs(void) {
  for (struct hc_engine_comm **pc = &eng.comms; *pc;) {
    struct hc_engine_comm *c = *pc;
    if (settled(c)) {
      *pc = c->next;
      eng.ncomms--;
      c->gone = true;
      pthread_cond_broadcast(&eng.changed);
      continue;
    }
    if (!c->busy && c->head && !atomic_load(&c->failed)) {
      c->job = c->head;
      c->head = c->job->next;
      if (c->head == NULL) c->tail = NULL;
      c->busy = true;
    }
    pc = &c->next;
  }
}

/* What one pass over the comms found: whether anything moved, whether a
 * wait is outstanding (tick soon), the runs to sleep on and how long to
 * spin before sleeping. */
struct engine_pass {
  bool moved, outstanding;
  struct hc_exec_run *runs[8];
  int nruns;
  uint64_t spin_ns;
};

/* One comm's share of a pass: start its job's run, poll it, watch its
 * waits; a failed comm only has its streams released (after the grace)
 * and its vendor sub-comm aborted. */
static void comm_serve(struct hc_engine_comm *c, uint64_t now, struct engine_pass *pass) {
  if (c->job && c->run == NULL && !atomic_load(&c->failed)) {
    hc_log_set_rank(c->rank);
    struct hc_exec_job ej = {.links = c->d.links, .plan = &c->job->host};
    hc_result_t r = hc_exec_start(&ej, &c->run);
    c->run_moved_ns = now;
    if (r != HC_OK) comm_fail(c, r, c->rank);
    pass->moved = true;
  }
  if (atomic_load(&c->failed)) {
    const bool aborted = c->d.links->abort_flag && atomic_load(c->d.links->abort_flag);
    if (!aborted && now < c->release_at_ns) {
      pass->outstanding = true; /* tick soon */
      return;
    }
    if (!aborted && !c->trap_armed) trap_arm(c);
    /* Again on each tick: a live peer may still write what was released. */
    hc_engine_release(c);
    vendor_abort(c);
    return;
  }
  hc_log_set_rank(c->rank);
  pass->moved |= run_pass(c, now);
  watch(c, now, &pass->outstanding);
  if (c->run && pass->nruns < (int)HC_ARRAY_LEN(pass->runs)) pass->runs[pass->nruns++] = c->run;
  if (c->run) pass->spin_ns = HC_MIN(pass->spin_ns, c->d.links->spin_ns);
  if (c->d.links->spin_ns == 0) pass->spin_ns = 0;
}

/* Bumps this process's heartbeat in every window, so that peers can tell
 * a stopped rank from one that waits like them. */
static void heartbeats_bump(struct hc_engine_comm *first) {
  for (struct hc_engine_comm *c = first; c; c = c->next)
    for (int p = 0; p < c->nranks; p++)
      if (window_of(c, p)) atomic_fetch_add(c->d.windows[p].w.heartbeat, 1);
}

/* Under eng.lock, after a pass that moved nothing and found no new job:
 * spins (yielding) for pass->spin_ns, then sleeps on the runs' transports
 * or on eng.wake for a tick (outstanding waits) or an idle tick. */
static void engine_idle(const struct engine_pass *pass, uint64_t now, uint64_t *idle_since) {
  if (*idle_since == 0) *idle_since = now;
  if (now - *idle_since < pass->spin_ns) {
    pthread_mutex_unlock(&eng.lock);
    sched_yield();
    pthread_mutex_lock(&eng.lock);
    return;
  }
  bool removable = false; /* unregister's wake-up may have come during the pass */
  for (const struct hc_engine_comm *c = eng.comms; c; c = c->next) removable |= settled(c);
  if (removable || eng.stop) return;
  if (pass->nruns > 0) {
    pthread_mutex_unlock(&eng.lock);
    /* A transport error here shows again in the run's next poll. */
    hc_exec_sleep((struct hc_exec_run *const *)pass->runs, pass->nruns, HC_ENGINE_TICK_MS);
    pthread_mutex_lock(&eng.lock);
    return;
  }
  const int ms = pass->outstanding ? HC_ENGINE_TICK_MS : HC_ENGINE_IDLE_MS;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += (long)ms * 1000000L;
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  pthread_cond_timedwait(&eng.wake, &eng.lock, &ts);
}

static void *engine_main(void *arg) {
  (void)arg;
  uint64_t idle_since = 0, next_beat = 0;
  hc_log_set_rank(-1);
  pthread_mutex_lock(&eng.lock);
  for (;;) {
    atomic_store(&eng.queued, false);
    comms_take_jobs();
    if (eng.ncomms == 0 && eng.stop) break;
    struct hc_engine_comm *first = eng.comms;
    pthread_mutex_unlock(&eng.lock);

    const uint64_t now = hc_now_ns();
    struct engine_pass pass = {.spin_ns = HC_ENGINE_SPIN_NS};
    for (struct hc_engine_comm *c = first; c; c = c->next) comm_serve(c, now, &pass);
    if (now >= next_beat) {
      next_beat = now + HC_ENGINE_BEAT_NS;
      heartbeats_bump(first);
    }
    if (dump_requested) {
      dump_requested = 0;
      for (struct hc_engine_comm *c = first; c; c = c->next) dump(c, now);
    }

    pthread_mutex_lock(&eng.lock);
    if (pass.moved || atomic_load(&eng.queued)) {
      idle_since = 0;
      continue;
    }
    engine_idle(&pass, now, &idle_since);
  }
  pthread_mutex_unlock(&eng.lock);
  return NULL;
}

static void comm_free(struct hc_engine_comm *c) {
  for (int p = 0; p < c->nranks; p++) {
    if (c->peers[p].pidfd >= 0) close(c->peers[p].pidfd);
    free(c->peers[p].runs);
  }
  pthread_mutex_destroy(&c->sigs_lock);
  free(c->peers);
  free(c);
}

hc_result_t hc_engine_register(const struct hc_engine_desc *d, struct hc_engine_comm **out) {
  struct hc_engine_comm *c;
  *out = NULL;
  HC_TRY(hc_calloc(&c, 1, sizeof(*c), "an engine client"));
  c->d = *d;
  c->rank = d->links->rank;
  c->nranks = d->links->nranks;
  c->culprit = -1;
  if (hc_calloc(&c->peers, (size_t)c->nranks, sizeof(*c->peers), "peer watches") != HC_OK) {
    free(c);
    return HC_ERR_SYSTEM;
  }
  const uint64_t now = hc_now_ns();
  for (int p = 0; p < c->nranks; p++) {
    struct peer_watch *pw = &c->peers[p];
    pw->pidfd = d->peer_pid[p] > 0 && window_of(c, p) ? hc_pidfd_open(d->peer_pid[p]) : -1;
    pw->since[TX] = pw->since[RX] = pw->beat_since = now;
    const struct hc_net_window *w = window_of(c, p);
    if (w) {
      /* The streams wait for nothing yet: the counters are where they are. */
      atomic_store(&pw->expect[TX], atomic_load(w->tx_freed));
      atomic_store(&pw->expect[RX], atomic_load(w->rx_filled));
      pw->sig_next = d->windows[p].rx_pieces; /* a fast peer may have filled some already */
    }
  }
  pthread_mutex_init(&c->sigs_lock, NULL);
  /* Before the first call can wait: a dump signal that came before its
   * handler would end the process. */
  dump_signal_install();
  hc_result_t r = HC_OK;
  pthread_mutex_lock(&eng_life);
  pthread_mutex_lock(&eng.lock);
  c->next = eng.comms;
  eng.comms = c;
  eng.ncomms++;
  if (!eng.running) {
    eng.stop = false;
    if (pthread_create(&eng.thread, NULL, engine_main, NULL) == 0) {
      eng.running = true;
    } else {
      eng.comms = c->next;
      eng.ncomms--;
      r = HC_FAIL(HC_ERR_SYSTEM, "engine: cannot start its thread: %s", strerror(errno));
    }
  }
  pthread_mutex_unlock(&eng.lock);
  pthread_mutex_unlock(&eng_life);
  if (r != HC_OK) {
    comm_free(c);
    return r;
  }
  HC_INFO(HC_EXEC, "engine: rank %d registered (%d comms served by this process's engine)", c->rank, eng.ncomms);
  *out = c;
  return HC_OK;
}

void hc_engine_unregister(struct hc_engine_comm *c, bool *vendor_aborted) {
  if (vendor_aborted) *vendor_aborted = false;
  if (c == NULL) return;
  pthread_mutex_lock(&eng_life);
  pthread_mutex_lock(&eng.lock);
  c->leaving = true;
  pthread_cond_signal(&eng.wake);
  while (!c->gone) pthread_cond_wait(&eng.changed, &eng.lock);
  bool join = eng.ncomms == 0;
  if (join) {
    eng.stop = true;
    pthread_cond_signal(&eng.wake);
  }
  pthread_mutex_unlock(&eng.lock);
  if (join) {
    pthread_join(eng.thread, NULL);
    eng.running = false;
  }
  pthread_mutex_unlock(&eng_life);
  /* After a failure the streams still drain: a live peer may write what
   * was released, so release again until they have (bounded). */
  if (atomic_load(&c->failed)) {
    const uint64_t deadline = hc_deadline_ns();
    for (;;) {
      hc_engine_release(c);
      if (hc_gpu_lanes_idle(c->d.lanes) || hc_now_ns() > deadline) break;
      sched_yield();
    }
    vendor_abort(c);
  }
  if (vendor_aborted) *vendor_aborted = atomic_load(&c->vendor_aborted);
  comm_free(c);
}

hc_result_t hc_engine_submit(struct hc_engine_comm *c, struct hc_engine_job *job) {
  job->next = NULL;
  pthread_mutex_lock(&eng.lock);
  if (atomic_load(&c->failed)) {
    pthread_mutex_unlock(&eng.lock);
    job_drop(job);
    return HC_FAIL(HC_ERR_REMOTE, "rank %d: the communicator failed; its transfers were not queued", c->rank);
  }
  if (c->tail) c->tail->next = job;
  else c->head = job;
  c->tail = job;
  atomic_store_explicit(&eng.queued, true, memory_order_release);
  pthread_cond_signal(&eng.wake);
  pthread_mutex_unlock(&eng.lock);
  return HC_OK;
}

void hc_engine_expect(struct hc_engine_comm *c, const uint64_t *window_pieces) {
  for (int p = 0; p < c->nranks; p++)
    if (window_of(c, p)) {
      atomic_store(&c->peers[p].expect[TX], window_pieces[2 * p]);
      atomic_store(&c->peers[p].expect[RX], window_pieces[2 * p + 1]);
    }
}

/* Appends piece k of a receive from peer to the expected signatures. */
static void sig_run_add(struct peer_watch *pw, uint64_t k, const struct hc_net_sig *sig) {
  struct sig_run *last = pw->nruns ? &pw->runs[pw->nruns - 1] : NULL;
  if (last && last->end == k && hc_net_sig_equal(&last->sig, sig)) {
    last->end++;
    return;
  }
  if (pw->nruns == pw->runs_cap) {
    const int cap = pw->runs_cap ? 2 * pw->runs_cap : 8;
    struct sig_run *runs = realloc(pw->runs, (size_t)cap * sizeof(*runs));
    if (runs == NULL) return; /* the piece goes unchecked */
    pw->runs = runs;
    pw->runs_cap = cap;
  }
  pw->runs[pw->nruns++] = (struct sig_run){.first = k, .end = k + 1, .sig = *sig};
}

void hc_engine_expect_sigs(struct hc_engine_comm *c, const struct hc_plan *plan) {
  if (c->d.windows == NULL) return;
  pthread_mutex_lock(&c->sigs_lock);
  for (int i = 0; i < plan->nsteps; i++) {
    const struct hc_step *s = &plan->steps[i];
    if (s->kind != HC_STEP_WAIT || s->src1 == NULL || s->call >= plan->nsigs || window_of(c, s->peer) == NULL) continue;
    sig_run_add(&c->peers[s->peer], s->count - 1, &plan->sigs[s->call]);
  }
  pthread_mutex_unlock(&c->sigs_lock);
}

hc_result_t hc_engine_drain(struct hc_engine_comm *c, uint64_t deadline_ns) {
  pthread_mutex_lock(&eng.lock);
  while ((c->head != NULL || c->busy) && hc_now_ns() < deadline_ns) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 10000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&eng.changed, &eng.lock, &ts);
  }
  const bool idle = c->head == NULL && !c->busy;
  pthread_mutex_unlock(&eng.lock);
  if (!idle) return HC_FAIL(HC_ERR_REMOTE, "rank %d: work still pending after HETCCL_TIMEOUT", c->rank);
  return HC_OK;
}

bool hc_engine_failed(const struct hc_engine_comm *c) { return atomic_load(&c->failed); }
