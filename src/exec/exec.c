/*
 * The progress loop. Per job it keeps, for every step, the number of
 * dependencies not yet done and the list of steps that wait for it; and per
 * (peer, direction) the queue of its transfers in plan order. A transfer is
 * posted when it heads its queue and its dependencies are done; a local
 * step runs when its dependencies are done.
 */
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "../device/device.h"
#include "exec.h"

enum { DIR_SEND = 0, DIR_RECV = 1 };

static const struct hc_net_sig no_sig;

/* The signature of the call a transfer step belongs to. */
static const struct hc_net_sig *step_sig(const struct hc_plan *p, const struct hc_step *s) {
  return s->call < p->nsigs ? &p->sigs[s->call] : &no_sig;
}

/* Posts transfer step s over l. The signature travels with the bytes; the
 * receiving transport checks it before it delivers any (net.h). */
static hc_result_t transfer_post(const struct hc_link *l, const struct hc_plan *p, const struct hc_step *s,
                                 void **req) {
  if (s->kind == HC_STEP_SEND) return hc_link_isend(l, s->src0, s->count, step_sig(p, s), req);
  return hc_link_irecv(l, s->dst, s->count, step_sig(p, s), req);
}

struct job_state {
  struct hc_exec_job *job;
  const struct hc_dev_ops *dev;
  int *waits, nwaits; /* WAIT steps whose counter has not got there yet */
  int nsteps, ndone;
  int *pending_deps;                    /* per step: dependencies not done */
  int *deps_at_start;                   /* per step: its dependencies (what a rewind restores) */
  int *ready_at_start, nready_at_start; /* the local steps that depend on nothing */
  int *succ_start, *succ;               /* CSR: steps that depend on step i */
  int *ready, nready;                   /* local steps whose dependencies are done */
  void **req;                           /* per step: the transport request while in flight */
  /* Queues, one per (peer, direction) that has transfers, in plan order.
   * Items [q_tail, q_head) are posted and in flight, [q_head, q_end) wait.
   * A transport completes a queue's requests in order, so only the oldest
   * in-flight one needs testing. */
  int nqueues;
  int *q_peer, *q_dir, *q_tail, *q_head, *q_end; /* indices into q_items */
  int *q_items;
  int q_self_send, q_self_recv; /* the queues of sends to and receives from itself (-1: none) */
  int peer_at;                  /* the peer of the transport call in progress: whom a failure concerns */
  int window_look;              /* window_peers_check's looks so far (where the next starts) */
  hc_result_t result;
  uint64_t *probe_seen; /* per peer: 1 + the generation of its stall probe seen last (stall_look) */
  bool probed;          /* this run published a stall probe */
};

static bool is_transfer(const struct hc_step *s) { return s->kind == HC_STEP_SEND || s->kind == HC_STEP_RECV; }

static void job_state_destroy(struct job_state *st) {
  free(st->probe_seen);
  free(st->waits);
  free(st->pending_deps);
  free(st->deps_at_start);
  free(st->ready_at_start);
  free(st->succ_start);
  free(st->succ);
  free(st->ready);
  free(st->req);
  free(st->q_peer);
  free(st->q_dir);
  free(st->q_tail);
  free(st->q_head);
  free(st->q_end);
  free(st->q_items);
}

/* The start of a run: every dependency pending, the local steps that have
 * none ready, every queue at its first transfer. A plan that runs again
 * unchanged (a kept memo) starts here without allocating or looking at its
 * steps. */
static void job_state_rewind(struct job_state *st) {
  st->ndone = st->nwaits = st->window_look = 0;
  st->peer_at = -1;
  st->result = HC_OK;
  st->probed = false;
  /* Loops, not memcpy: most kept plans are a few steps long. */
  for (int i = 0; i < st->nsteps; i++) {
    st->pending_deps[i] = st->deps_at_start[i];
    st->req[i] = NULL;
  }
  st->nready = st->nready_at_start;
  for (int k = 0; k < st->nready; k++) st->ready[k] = st->ready_at_start[k];
  for (int q = 0; q < st->nqueues; q++) st->q_tail[q] = st->q_head[q] = q == 0 ? 0 : st->q_end[q - 1];
  if (st->probe_seen) memset(st->probe_seen, 0, (size_t)st->job->links->nranks * sizeof(*st->probe_seen));
}

/* The transfer queues, one per (peer, direction) that has transfers
 * (qsize: per peer * 2 + direction, their counts), each in plan order;
 * false when out of memory. */
static bool job_queues_build(struct job_state *st, const int *qsize, int *qid, int ntransfers) {
  const struct hc_links *links = st->job->links;
  for (int q = 0; q < 2 * links->nranks; q++) st->nqueues += qsize[q] > 0;
  st->q_peer = calloc((size_t)st->nqueues + 1, sizeof(int));
  st->q_dir = calloc((size_t)st->nqueues + 1, sizeof(int));
  st->q_tail = calloc((size_t)st->nqueues + 1, sizeof(int));
  st->q_head = calloc((size_t)st->nqueues + 1, sizeof(int));
  st->q_end = calloc((size_t)st->nqueues + 1, sizeof(int));
  st->q_items = calloc((size_t)ntransfers + 1, sizeof(int));
  if (!st->q_peer || !st->q_dir || !st->q_tail || !st->q_head || !st->q_end || !st->q_items) return false;
  int nq = 0, at = 0;
  st->q_self_send = st->q_self_recv = -1;
  for (int q = 0; q < 2 * links->nranks; q++) {
    if (qsize[q] == 0) continue;
    qid[q] = nq;
    st->q_peer[nq] = q / 2;
    st->q_dir[nq] = q % 2;
    if (q / 2 == links->rank) *(q % 2 == DIR_SEND ? &st->q_self_send : &st->q_self_recv) = nq;
    st->q_end[nq] = at;
    at += qsize[q];
    nq++;
  }
  for (int i = 0; i < st->nsteps; i++) {
    const struct hc_step *s = &st->job->plan->steps[i];
    if (is_transfer(s)) {
      int q = qid[s->peer * 2 + (s->kind == HC_STEP_RECV)];
      st->q_items[st->q_end[q]++] = i;
    }
  }
  return true;
}

static hc_result_t job_state_create(struct hc_exec_job *job, struct job_state *st) {
  const struct hc_plan *p = job->plan;
  const int n = p->nsteps, nr = job->links->nranks;
  *st = (struct job_state){.job = job, .nsteps = n, .peer_at = -1};
  if (p->mem != HC_MEM_HOST)
    return HC_FAIL(HC_ERR_INTERNAL, "exec: a plan of device memory (kind %d) reached the host engine", (int)p->mem);
  st->dev = &hc_dev_host;
  int *qsize = calloc((size_t)nr * 2, sizeof(int));
  int *qid = calloc((size_t)nr * 2, sizeof(int));
  st->pending_deps = calloc((size_t)n + 1, sizeof(int));
  st->deps_at_start = calloc((size_t)n + 1, sizeof(int));
  st->ready_at_start = calloc((size_t)n + 1, sizeof(int));
  st->succ_start = calloc((size_t)n + 2, sizeof(int));
  st->ready = calloc((size_t)n + 1, sizeof(int));
  st->req = calloc((size_t)n + 1, sizeof(void *));
  st->waits = calloc((size_t)n + 1, sizeof(int));
  if (!qsize || !qid || !st->pending_deps || !st->deps_at_start || !st->ready_at_start || !st->succ_start ||
      !st->ready || !st->req || !st->waits)
    goto oom;
  int nedges = 0, ntransfers = 0;
  for (int i = 0; i < n; i++) {
    const struct hc_step *s = &p->steps[i];
    for (int d = 0; d < HC_STEP_MAX_DEPS; d++) {
      if (s->deps[d] == 0) continue;
      st->succ_start[s->deps[d] - 1 + 1]++;
      st->deps_at_start[i]++;
      nedges++;
    }
    if (!is_transfer(s) && st->deps_at_start[i] == 0) st->ready_at_start[st->nready_at_start++] = i;
    if (is_transfer(s)) {
      qsize[s->peer * 2 + (s->kind == HC_STEP_RECV)]++;
      ntransfers++;
    }
  }
  for (int i = 0; i < n; i++) st->succ_start[i + 1] += st->succ_start[i];
  st->succ = calloc((size_t)nedges + 1, sizeof(int));
  int *fill = calloc((size_t)n + 1, sizeof(int));
  if (!st->succ || !fill) {
    free(fill);
    goto oom;
  }
  for (int i = 0; i < n; i++)
    for (int d = 0; d < HC_STEP_MAX_DEPS; d++) {
      int dep = p->steps[i].deps[d] - 1;
      if (dep >= 0) st->succ[st->succ_start[dep] + fill[dep]++] = i;
    }
  free(fill);

  if (!job_queues_build(st, qsize, qid, ntransfers)) goto oom;
  free(qsize);
  free(qid);
  job_state_rewind(st);
  return HC_OK;
oom:
  free(qsize);
  free(qid);
  job_state_destroy(st);
  return HC_FAIL(HC_ERR_SYSTEM, "exec: out of host memory for a plan of %d steps", n);
}

static void step_done(struct job_state *st, int i) {
  st->ndone++;
  for (int k = st->succ_start[i]; k < st->succ_start[i + 1]; k++) {
    int t = st->succ[k];
    if (--st->pending_deps[t] == 0 && !is_transfer(&st->job->plan->steps[t])) st->ready[st->nready++] = t;
  }
}

/* A CPU rank's copy of a window piece into or out of LL form (plan.h,
 * enum hc_ll). A GET runs after the piece's filled, which its writer
 * published after the words, so every word must carry the flag. */
static hc_result_t ll_host_copy(const struct hc_step *s) {
  const size_t words = hc_ll_words(s->count);
  for (size_t i = 0; i < words; i++) {
    const size_t len = HC_MIN(s->count - HC_LL_WORD_DATA * i, (size_t)HC_LL_WORD_DATA);
    if (s->ll == HC_LL_PUT) {
      const uint8_t *src = (const uint8_t *)s->src0 + HC_LL_WORD_DATA * i;
      uint64_t word = (uint64_t)s->ll_flag << 32;
      for (size_t b = 0; b < len; b++) word |= (uint64_t)src[b] << (8 * b);
      atomic_store_explicit((atomic_ullong *)s->dst + i, word, memory_order_relaxed);
      continue;
    }
    const uint64_t word = atomic_load_explicit((const atomic_ullong *)s->src0 + i, memory_order_relaxed);
    if ((uint32_t)(word >> 32) != s->ll_flag)
      return HC_FAIL(HC_ERR_INTERNAL,
                     "exec: word %zu of a window piece in LL form has flag %u, not %u, after its filled", i,
                     (unsigned)(word >> 32), (unsigned)s->ll_flag);
    uint8_t *dst = (uint8_t *)s->dst + HC_LL_WORD_DATA * i;
    for (size_t b = 0; b < len; b++) dst[b] = (uint8_t)(word >> (8 * b));
  }
  return HC_OK;
}

hc_result_t hc_exec_local_step(const struct hc_dev_ops *dev, const struct hc_step *s, hc_stream_t stream,
                               const volatile uint64_t *trap_word, bool *trap_checked) {
  switch (s->kind) {
  case HC_STEP_COPY:
    if (s->ll == HC_LL_NONE) return hc_dev_copy(dev, s->dst, s->src0, s->count, stream);
    /* A GPU runs it in a program (exec/enqueue.c). */
    if (dev->kind != HC_MEM_HOST) return HC_FAIL(HC_ERR_INTERNAL, "exec: an LL copy on a %s stream", dev->name);
    return ll_host_copy(s);
  case HC_STEP_REDUCE: {
    struct hc_reduce_args a = {.dst = s->dst,
                               .src0 = s->src0,
                               .src1 = s->src1,
                               .count = s->count,
                               .dtype = s->dtype,
                               .op = s->redop,
                               .trap_word = trap_word,
                               .trap_checked = trap_checked};
    return hc_dev_reduce(dev, &a, stream);
  }
  case HC_STEP_SCALE: {
    struct hc_scale_args a = {.dst = s->dst, .src = s->src0, .count = s->count, .dtype = s->dtype, .kind = s->redop};
    if (a.kind == HC_SCALE_MUL) memcpy(a.factor, s->src1, hc_dtype_size(a.dtype));
    else memcpy(&a.divisor, s->src1, sizeof(a.divisor));
    return hc_dev_scale(dev, &a, stream);
  }
  default: return HC_FAIL(HC_ERR_INTERNAL, "exec: step kind %d is not local", s->kind);
  }
}

/* A window receive's piece has arrived: its control words must hold the
 * signature of this rank's call (plan.h, HC_STEP_WAIT) before the data is
 * used. */
static hc_result_t window_sig_check(const struct job_state *st, const struct hc_step *s) {
  const struct hc_plan *p = st->job->plan;
  const atomic_ullong *words = s->src1;
  const struct hc_net_sig got = {
      {atomic_load_explicit(&words[0], memory_order_relaxed), atomic_load_explicit(&words[1], memory_order_relaxed)}};
  const struct hc_net_sig *want = step_sig(p, s);
  if (hc_net_sig_equal(&got, want)) return HC_OK;
  /* The sender may be a GPU rank whose calls have returned: its progress
   * engine learns it from the window (exec/engine.c). */
  const struct hc_link *l = &st->job->links->peer[s->peer];
  struct hc_net_window w;
  hc_link_window(l, &w);
  if (w.mismatch != NULL) hc_net_mismatch_publish(w.mismatch, &got, want);
  return hc_net_sig_fail(hc_plan_sig_explain, st->job->links->rank, want, s->peer, &got, false);
}

/* Runs the local steps whose dependencies are done. WAIT steps are done
 * once their counter has got there. */
static hc_result_t run_ready_local(struct job_state *st, bool *moved) {
  const struct hc_plan *p = st->job->plan;
  for (int k = 0; k < st->nwaits;) {
    const struct hc_step *s = &p->steps[st->waits[k]];
    if (atomic_load_explicit((const atomic_ullong *)s->src0, memory_order_acquire) < s->count) {
      k++;
      continue;
    }
    if (s->src1 != NULL) HC_TRY(window_sig_check(st, s));
    HC_TRACE(HC_EXEC, "step %d: counter at %llu", st->waits[k], (unsigned long long)s->count);
    step_done(st, st->waits[k]);
    st->waits[k] = st->waits[--st->nwaits];
    *moved = true;
  }
  while (st->nready > 0) {
    int i = st->ready[--st->nready];
    const struct hc_step *s = &p->steps[i];
    *moved = true;
    switch (s->kind) {
    case HC_STEP_WAIT: st->waits[st->nwaits++] = i; continue;
    case HC_STEP_NOP: break;
    case HC_STEP_SIGNAL: atomic_store_explicit((atomic_ullong *)s->src0, s->count, memory_order_release); break;
    default: HC_TRY(hc_exec_local_step(st->dev, s, st->job->links->host_pool, NULL, NULL)); break;
    }
    step_done(st, i);
  }
  return HC_OK;
}

/* Sends of a rank to itself meet its receives from itself in order, as a
 * copy; they never reach a transport. */
static hc_result_t match_self(struct job_state *st, bool *moved) {
  const struct hc_plan *p = st->job->plan;
  const int me = st->job->links->rank, qs = st->q_self_send, qr = st->q_self_recv;
  while (qs >= 0 && qr >= 0 && st->q_head[qs] < st->q_end[qs] && st->q_head[qr] < st->q_end[qr]) {
    int si = st->q_items[st->q_head[qs]], ri = st->q_items[st->q_head[qr]];
    if (st->pending_deps[si] > 0 || st->pending_deps[ri] > 0) break;
    const struct hc_step *send = &p->steps[si], *recv = &p->steps[ri];
    if (send->count != recv->count)
      return HC_FAIL(HC_ERR_USAGE, "rank %d: mismatched counts: sends %zu bytes to itself, receives %zu", me,
                     send->count, recv->count);
    HC_TRY(hc_dev_copy(st->dev, recv->dst, send->src0, send->count, st->job->links->host_pool));
    st->q_tail[qs] = ++st->q_head[qs];
    st->q_tail[qr] = ++st->q_head[qr];
    step_done(st, si);
    step_done(st, ri);
    *moved = true;
  }
  return HC_OK;
}

/* One pass over a job: local steps, new posts, tests. *moved tells whether
 * anything happened. */
static hc_result_t job_progress(struct job_state *st, bool *moved) {
  const struct hc_plan *p = st->job->plan;
  struct hc_links *links = st->job->links;
  HC_TRY(run_ready_local(st, moved));
  HC_TRY(match_self(st, moved));
  for (int q = 0; q < st->nqueues; q++) {
    if (st->q_peer[q] == links->rank) continue;
    while (st->q_head[q] < st->q_end[q]) {
      int i = st->q_items[st->q_head[q]];
      if (st->pending_deps[i] > 0) break;
      struct hc_link *l = &links->peer[st->q_peer[q]];
      st->peer_at = st->q_peer[q];
      if (l->conn == NULL) {
        HC_TRY(hc_link_connect(l, st->q_peer[q]));
        if (l->conn == NULL) break;
        *moved = true;
      }
      HC_TRY(transfer_post(l, p, &p->steps[i], &st->req[i]));
      st->q_head[q]++;
      *moved = true;
    }
    while (st->q_tail[q] < st->q_head[q]) {
      int i = st->q_items[st->q_tail[q]], done = 1; /* no request: done when posted (net.h) */
      st->peer_at = st->q_peer[q];
      if (st->req[i] != NULL) HC_TRY(hc_link_test(&links->peer[st->q_peer[q]], st->req[i], &done));
      if (!done) break;
      st->req[i] = NULL;
      st->q_tail[q]++;
      step_done(st, i);
      *moved = true;
    }
  }
  return HC_OK;
}

/* A peer this job still waits for, to name in a timeout message. */
static int awaited_peer(const struct job_state *st) {
  for (int q = 0; q < st->nqueues; q++)
    if (st->q_tail[q] < st->q_head[q]) return st->q_peer[q];
  for (int q = 0; q < st->nqueues; q++)
    if (st->q_head[q] < st->q_end[q] && st->q_peer[q] != st->job->links->rank) return st->q_peer[q];
  for (int q = 0; q < st->nqueues; q++) /* a send to itself that no receive matches, or the reverse */
    if (st->q_head[q] < st->q_end[q]) return st->q_peer[q];
  return -1;
}

/* A window counter moves only when the peer's process (its stream or its
 * engine) writes it: no transport sees that peer die. So while a WAIT step
 * is pending, the peer it waits for is looked at by its pid, and its exit
 * fails the job at once, naming it. Called every WINDOW_PEER_LOOK_NS of
 * idle waiting, not on every pass. */
#define WINDOW_PEER_LOOK_NS 10000000ull
/* A look costs a few syscalls per peer, and a plan may have dozens of
 * window waits pending on the same few peers: each look takes at most
 * this many distinct peers, starting one wait further each time. */
#define WINDOW_PEERS_PER_LOOK 4
static hc_result_t window_peers_check(struct job_state *st) {
  const struct hc_links *links = st->job->links;
  int looked[WINDOW_PEERS_PER_LOOK], nlooked = 0;
  const int start = st->window_look++;
  for (int n = 0; n < st->nwaits && nlooked < WINDOW_PEERS_PER_LOOK; n++) {
    const int peer = st->job->plan->steps[st->waits[(start + n) % st->nwaits]].peer;
    if (peer < 0 || peer >= links->nranks || peer == links->rank) continue;
    bool seen = false;
    for (int j = 0; j < nlooked; j++) seen |= looked[j] == peer;
    if (seen) continue;
    looked[nlooked++] = peer;
    const int32_t pid = links->peer[peer].pid;
    if (pid <= 0 || !hc_pid_exited(pid, -1)) continue;
    hc_blame(peer);
    return HC_FAIL(HC_ERR_REMOTE, "rank %d: rank %d (pid %d) exited while this rank waited for it (a window counter)",
                   links->rank, peer, (int)pid);
  }
  return HC_OK;
}

/* Sleeps in the transport that has work in flight; when several have, each
 * is only polled briefly, since none of their sleeps wakes for the others. */
static hc_result_t wait_for_progress(struct job_state *const *states, int njobs, int timeout_ms) {
  /* A counter (a window's, a GPU stream's) moves without waking any
   * transport. */
  for (int j = 0; j < njobs; j++)
    if (states[j]->nwaits > 0) {
      sched_yield();
      return HC_OK;
    }
  const struct hc_link *busy[4];
  int nbusy = 0;
  bool many = false;
  for (int j = 0; j < njobs && !many; j++) {
    struct job_state *st = states[j];
    for (int q = 0; q < st->nqueues && !many; q++) {
      if (st->q_tail[q] == st->q_end[q] || st->q_peer[q] == st->job->links->rank) continue;
      const struct hc_link *l = &st->job->links->peer[st->q_peer[q]];
      if (l->net == NULL) continue;
      int k = 0;
      while (k < nbusy && !(busy[k]->net == l->net && busy[k]->ctx == l->ctx)) k++;
      if (k < nbusy) continue;
      if (nbusy == (int)HC_ARRAY_LEN(busy)) many = true;
      else busy[nbusy++] = l;
    }
  }
  if (nbusy == 0) {
    sched_yield();
    return HC_OK;
  }
  if (nbusy == 1 && !many) return hc_link_wait(busy[0], timeout_ms);
  for (int k = 0; k < nbusy; k++) HC_TRY(hc_link_wait(busy[k], k == 0 ? 1 : 0));
  return HC_OK;
}

/* The wait policy. When a pass moves nothing, the engine
 *   1. polls bare while a peer is likely to answer soon: up to twice the
 *      time peers took to answer lately (links->answer_ns), within
 *      [WAIT_BARE_MIN_NS, WAIT_BARE_MAX_NS];
 *   2. then polls with a sched_yield between passes, until HETCCL_SPIN_US
 *      have passed since the last move;
 *   3. then sleeps in the transport's wait_blocking.
 * Why yield: the peer may be waiting for this very core. When ranks
 * outnumber the free cores (other work on the machine, or the scheduler
 * moving a rank woken from a futex onto its waker's core), a bare spin
 * holds the core the answer must be computed on, so every wait lasted the
 * whole spin and ended in a sleep and a wake-up: on a 2-core machine an
 * 8-byte all-reduce of 2 ranks took about HETCCL_SPIN_US + 10 us (210 us
 * with 200) when the two ranks shared a core, against 1.2-2 us on two;
 * with yields it takes 7-9 us on one core (14-20 us at a load of 17, see
 * docs/perf.md). A yield that took
 * WAIT_YIELD_RAN_NS or more ran another thread here, most likely a peer,
 * so the next WAIT_PEER_HERE_WAITS waits skip the bare phase, as do all
 * waits where local ranks outnumber cores. There the yields also stop
 * after WAIT_SHARED_YIELD_NS: every polling rank takes a share of the
 * cores from the ranks that have work (6 ranks as threads on 2 busy cores,
 * test_coll_groups: 125-184 s sleeping at once, 196-236 s yielding for
 * 50 us). A yield with nothing else to run costs a syscall (1-3 us on the
 * 2-core VM), which is why the bare phase comes first. Sleeping only after a long idle keeps a futex wake-up
 * (tens of us) out of the steps of a collective.
 * A rank bound to one CPU (hetccl-run --bind core, mpirun --bind-to core)
 * that no local peer may run on (hc_exec_links_check_cpus) polls bare for
 * WAIT_BARE_MAX_NS whatever its yields did: a yield that ran another
 * thread ran other work, and yielding hands the core to that work for its
 * whole time slice.
 * On the 2-core VM under a load of 10 (other jobs), 2 ranks bound, 64 B:
 * all-reduce 1.06-3.3 us polling bare against 3.7-14 us yielding,
 * all-gather 1.05-3.9 against 4.0-11.1; Open MPI, which polls bare, 0.57. */
#define WAIT_BARE_MIN_NS 2000ull
#define WAIT_BARE_MAX_NS 20000ull
#define WAIT_ANSWER_FIRST_NS 4000ull /* before anything was measured */
#define WAIT_YIELD_RAN_NS 4000ull
#define WAIT_PEER_HERE_WAITS 32
#define WAIT_SHARED_YIELD_NS 10000ull

struct wait_state {
  struct hc_links *links; /* whose estimate this run reads and updates */
  uint64_t spin_ns, bare_ns;
  uint64_t idle_since;  /* 0: the last pass moved */
  bool yield_ran_other; /* during this wait */
  int phase;            /* HC_WAIT_BARE, _YIELD or _SLEEP: how far this wait got */
};

static void wait_state_plan(struct wait_state *w) {
  const struct hc_links *l = w->links;
  uint64_t answer = l->answer_ns ? l->answer_ns : WAIT_ANSWER_FIRST_NS;
  w->bare_ns = HC_MIN(HC_MAX(2 * answer, WAIT_BARE_MIN_NS), WAIT_BARE_MAX_NS);
  if (l->cores_shared || l->peer_here_waits > 0) w->bare_ns = 0;
  if (l->own_cpu && !l->cores_shared) w->bare_ns = WAIT_BARE_MAX_NS;
}

static void wait_state_init(struct wait_state *w, struct hc_exec_job *jobs, int njobs) {
  *w = (struct wait_state){.links = jobs[0].links, .spin_ns = UINT64_MAX};
  for (int j = 0; j < njobs; j++) w->spin_ns = HC_MIN(w->spin_ns, jobs[j].links->spin_ns);
  if (w->links->cores_shared) w->spin_ns = HC_MIN(w->spin_ns, WAIT_SHARED_YIELD_NS);
  wait_state_plan(w);
}

/* An idle stretch ended (a pass moved, or the run is done): adds it to the
 * comm's wait statistics and returns how long it lasted. */
static uint64_t wait_state_count(struct wait_state *w) {
  const uint64_t waited = hc_now_ns() - w->idle_since;
  struct hc_exec_wait_stats *s = &w->links->waits;
  s->waits++;
  s->ended[w->phase]++;
  s->idle_ns += waited;
  s->max_ns = HC_MAX(s->max_ns, waited);
  w->idle_since = 0;
  w->phase = HC_WAIT_BARE;
  return waited;
}

/* A pass moved after an idle stretch, or the run is done: learn from how
 * long it took. The wait that ends a run teaches as much as one inside it,
 * and a one-step plan has no other (its receive is its last step): when it
 * only counted, the waits after a yield that ran another thread never ran
 * out, and such a rank yielded in every wait for good (2 unbound ranks on
 * 2 cores: 128 B all-gather 1.2-1.5 us against 0.45). */
static void wait_state_moved(struct wait_state *w) {
  if (w->idle_since == 0) return;
  const uint64_t waited = wait_state_count(w);
  struct hc_links *l = w->links;
  if (w->yield_ran_other) {
    l->peer_here_waits = WAIT_PEER_HERE_WAITS;
  } else {
    if (l->peer_here_waits > 0) l->peer_here_waits--;
    /* Only answers that came while polling on a core of its own measure
     * the peer's pace; a wait that ended in a sleep says nothing of it. */
    if (waited < w->spin_ns) l->answer_ns = l->answer_ns ? l->answer_ns - l->answer_ns / 8 + waited / 8 : waited;
  }
  w->yield_ran_other = false;
  wait_state_plan(w);
}

/* Nothing moved: poll again (bare or after a yield) or sleep. */
static hc_result_t wait_state_idle(struct wait_state *w, struct job_state *const *states, int njobs, uint64_t now) {
  if (w->idle_since == 0) w->idle_since = now;
  uint64_t idle = now - w->idle_since;
  if (idle < w->bare_ns && idle < w->spin_ns) return HC_OK;
  if (idle < w->spin_ns) {
    w->phase = HC_MAX(w->phase, HC_WAIT_YIELD);
    sched_yield();
    if (hc_now_ns() - now >= WAIT_YIELD_RAN_NS) w->yield_ran_other = true;
    return HC_OK;
  }
  w->phase = HC_WAIT_SLEEP;
  w->links->waits.sleeps++;
  return wait_for_progress(states, njobs, 100);
}

/* ---- stall probes ----
 * A mismatch in which both ranks only wait to receive (Reduce with roots 0
 * and 1 on two ranks) exchanges nothing a transport could compare. So a
 * run that has moved nothing for STALL_PROBE_NS tells each peer it awaits
 * (a transfer posted and not done) the signature of the call it waits in,
 * through the transport (net.h, stall_publish), and looks at theirs: a
 * peer that awaits this rank as well, in a call this job does not hold,
 * is a mismatch; both ranks are stalled, so it cannot be one that is only
 * slower. Awaiting is a receive posted and not done: a rank reads what
 * the peer sent, probes included, while it has one (sockets read a
 * stream only then). A probe counts once seen unchanged on two looks
 * STALL_LOOK_NS apart, so that one its owner is clearing as its stall
 * ends is not taken. Nothing of it runs before a stall: the fast path pays
 * nothing. The probe is cleared when the run ends. */
#define STALL_PROBE_NS 1000000000ull
#define STALL_LOOK_NS 100000000ull

static bool job_has_sig(const struct hc_plan *p, const struct hc_net_sig *sig) {
  for (uint32_t k = 0; k < p->nsigs; k++)
    if (hc_net_sig_equal(&p->sigs[k], sig)) return true;
  return false;
}

static hc_result_t stall_look(struct job_state *st) {
  const struct hc_plan *p = st->job->plan;
  const struct hc_links *links = st->job->links;
  const int me = links->rank;
  if (st->probe_seen == NULL && (st->probe_seen = calloc((size_t)links->nranks, sizeof(uint64_t))) == NULL)
    return HC_OK; /* no probes: the deadline still ends the wait */
  for (int q = 0; q < st->nqueues; q++) {
    const int peer = st->q_peer[q];
    const struct hc_link *l = &links->peer[peer];
    if (peer == me || st->q_dir[q] != DIR_RECV || st->q_tail[q] == st->q_head[q] || !hc_link_probes(l)) continue;
    const struct hc_step *s = &p->steps[st->q_items[st->q_tail[q]]];
    const struct hc_net_sig *mine = step_sig(p, s);
    hc_link_stall_publish(l, mine);
    st->probed = true;
    struct hc_net_sig theirs;
    uint64_t gen;
    hc_link_stall_peek(l, &theirs, &gen);
    const bool confirmed = st->probe_seen[peer] == gen + 1;
    st->probe_seen[peer] = gen + 1;
    if (hc_net_sig_equal(&theirs, &no_sig) || job_has_sig(p, &theirs) || !confirmed) continue;
    hc_link_mismatch_found(l, &theirs, mine);
    st->peer_at = peer;
    return hc_net_sig_fail(hc_plan_sig_explain, me, mine, peer, &theirs, false);
  }
  return HC_OK;
}

/* The run ends: its probes no longer say where it waits. */
static void stall_clear(struct job_state *st) {
  const struct hc_links *links = st->job->links;
  if (!st->probed) return;
  for (int peer = 0; peer < links->nranks; peer++) hc_link_stall_publish(&links->peer[peer], &no_sig);
  st->probed = false;
}

/* ---- tables kept between runs of one plan ---- */

struct hc_exec_memo {
  const struct hc_plan *plan; /* whose tables (st.job is the last run's, gone) */
  struct job_state st;
};

void hc_exec_memo_free(struct hc_exec_memo *memo) {
  if (memo == NULL) return;
  job_state_destroy(&memo->st);
  free(memo);
}

/* job's tables: the memo's, rewound, where it has one; else made, and kept
 * in a new memo where job asks for one. */
static hc_result_t job_state_get(struct hc_exec_job *job, struct job_state *fresh, struct job_state **out) {
  if (job->memo != NULL && *job->memo != NULL) {
    struct job_state *st = &(*job->memo)->st;
    if ((*job->memo)->plan != job->plan || st->nsteps != job->plan->nsteps)
      return HC_FAIL(HC_ERR_INTERNAL, "exec: a kept memo of another plan (%d steps) for a plan of %d steps", st->nsteps,
                     job->plan->nsteps);
    st->job = job;
    job_state_rewind(st);
    *out = st;
    return HC_OK;
  }
  HC_TRY(job_state_create(job, fresh));
  *out = fresh;
  if (job->memo == NULL) return HC_OK;
  struct hc_exec_memo *memo = malloc(sizeof(*memo));
  if (memo == NULL) return HC_OK; /* runs, unkept */
  *memo = (struct hc_exec_memo){.plan = job->plan, .st = *fresh};
  *job->memo = memo;
  *out = &memo->st;
  return HC_OK;
}

/* The deadline passed: the failure names whom the first unfinished job
 * waits for. */
static hc_result_t run_timed_out(struct job_state *const *each, int njobs) {
  struct job_state *st = each[0];
  for (int j = 0; j < njobs && st->ndone == st->nsteps; j++) st = each[j];
  const int me = st->job->links->rank, peer = awaited_peer(st);
  const long long timeout_s = (long long)hc_param_int(HC_P_TIMEOUT);
  hc_blame(peer != me ? peer : -1);
  if (peer == me)
    return HC_FAIL(HC_ERR_REMOTE,
                   "rank %d: timed out after HETCCL_TIMEOUT=%llds waiting for self: a send to "
                   "itself that no receive of the same call matches (or the reverse)",
                   me, timeout_s);
  if (peer < 0)
    return HC_FAIL(HC_ERR_REMOTE, "rank %d: timed out after HETCCL_TIMEOUT=%llds waiting for its own device", me,
                   timeout_s);
  return HC_FAIL(HC_ERR_REMOTE, "rank %d: timed out after HETCCL_TIMEOUT=%llds waiting for rank %d", me, timeout_s,
                 peer);
}

/* Most runs hold one job (a call or group on one comm): their states live
 * on the stack. */
#define RUN_STACK_JOBS 4

/* The one transfer of a plan that moves nothing else: one send or receive
 * with another rank, and copies, reductions or scalings, no step waiting
 * for another. That is a 2-rank broadcast's root (its send and, out of
 * place, the copy of its input to its output) and other rank, a lone send
 * or receive. -1 for any other plan. */
static int lone_transfer(const struct hc_exec_job *job) {
  const struct hc_plan *p = job->plan;
  int t = -1;
  if (p->mem != HC_MEM_HOST) return -1;
  for (int i = 0; i < p->nsteps; i++) {
    const struct hc_step *s = &p->steps[i];
    for (int d = 0; d < HC_STEP_MAX_DEPS; d++)
      if (s->deps[d] != 0) return -1;
    if (is_transfer(s)) {
      if (t >= 0) return -1;
      t = i;
    } else if (s->kind != HC_STEP_COPY && s->kind != HC_STEP_REDUCE && s->kind != HC_STEP_SCALE) {
      return -1;
    }
  }
  if (t < 0 || p->steps[t].peer == job->links->rank || job->links->peer[p->steps[t].peer].conn == NULL) return -1;
  return t;
}

/* Posts a lone transfer and tests it once. Most small ones are then done
 * (shm sends a small message within isend, net.h, and its receive finds
 * a message already there), and so is the run, with the local steps run
 * here: it needs none of its tables. For the root of a back-to-back 2-rank
 * broadcast, the tables' rewind, passes and bookkeeping made a third of
 * the stores of its call, and each store after the post waits for the
 * line the receiver polls (docs/perf.md). *posted: the request still in
 * flight (NULL: the run is done). */
static hc_result_t lone_transfer_try(struct hc_exec_job *job, int t, void **posted) {
  const struct hc_plan *p = job->plan;
  const struct hc_step *s = &p->steps[t];
  const struct hc_link *l = &job->links->peer[s->peer];
  int done = 1; /* no request: done when posted (net.h) */
  hc_blame(-1);
  HC_TRY(transfer_post(l, p, s, posted));
  if (*posted != NULL) HC_TRY(hc_link_test(l, *posted, &done));
  if (!done) return HC_OK;
  *posted = NULL;
  for (int i = 0; i < p->nsteps; i++)
    if (i != t) HC_TRY(hc_exec_local_step(&hc_dev_host, &p->steps[i], job->links->host_pool, NULL, NULL));
  return HC_OK;
}

static hc_result_t run_blocking(struct hc_exec_job *jobs, int njobs, int posted_step, void *posted);

hc_result_t hc_exec_run_blocking(struct hc_exec_job *jobs, int njobs) {
  if (njobs == 0) return HC_OK; /* a group of GPU calls only: the engine runs their transfers */
  jobs[0].links->waits.runs++;
  const int lone = njobs == 1 ? lone_transfer(jobs) : -1;
  void *posted = NULL;
  if (lone >= 0) {
    HC_TRY(lone_transfer_try(jobs, lone, &posted));
    if (posted == NULL) return HC_OK;
  }
  return run_blocking(jobs, njobs, lone, posted);
}

/* posted: the request of step posted_step, a lone transfer posted above,
 * or NULL. */
static hc_result_t run_blocking(struct hc_exec_job *jobs, int njobs, int posted_step, void *posted) {
  struct job_state stack_states[RUN_STACK_JOBS], *stack_each[RUN_STACK_JOBS];
  struct job_state *states = stack_states, **each = stack_each;
  if (njobs > RUN_STACK_JOBS) {
    states = calloc((size_t)njobs, sizeof(*states));
    each = calloc((size_t)njobs, sizeof(*each));
    if (states == NULL || each == NULL) {
      free(states);
      free(each);
      return HC_FAIL(HC_ERR_SYSTEM, "exec: out of host memory for %d jobs", njobs);
    }
  }
  hc_result_t r = HC_OK;
  int built = 0;
  hc_blame(-1);
  for (; built < njobs; built++) HC_TRY_GOTO(job_state_get(&jobs[built], &states[built], &each[built]), r, out);
  if (posted != NULL) { /* the plan's one queue, at its one transfer */
    each[0]->req[posted_step] = posted;
    each[0]->q_head[0]++;
  }

  /* Set up at the first pass that moves nothing: most small calls never
   * wait. */
  struct wait_state wait = {.links = jobs[0].links};
  uint64_t next_look_ns = 0;                      /* stall probes */
  uint64_t deadline_ns = 0, next_window_look = 0; /* from the first pass that moved nothing */
  for (;;) {
    bool moved = false, all_done = true;
    for (int j = 0; j < njobs; j++) {
      struct job_state *st = each[j];
      if (st->ndone == st->nsteps) continue;
      HC_TRY_GOTO(job_progress(st, &moved), r, out);
      all_done &= st->ndone == st->nsteps;
    }
    if (all_done) {
      wait_state_moved(&wait);
      break;
    }
    if (moved) {
      wait_state_moved(&wait);
      continue;
    }
    uint64_t now = hc_now_ns();
    if (deadline_ns == 0) {
      wait_state_init(&wait, jobs, njobs);
      deadline_ns = now + hc_timeout_ns();
      next_window_look = now + WINDOW_PEER_LOOK_NS;
    }
    for (int j = 0; j < njobs; j++) {
      const struct hc_links *l = each[j]->job->links;
      if (l->abort_flag && atomic_load(l->abort_flag)) {
        r = HC_FAIL(HC_ERR_REMOTE, "rank %d: communicator aborted while a collective was in flight", l->rank);
        goto out;
      }
    }
    if (now > deadline_ns) {
      r = run_timed_out(each, njobs);
      goto out;
    }
    if (wait.idle_since != 0 && now - wait.idle_since >= STALL_PROBE_NS && now >= next_look_ns) {
      next_look_ns = now + STALL_LOOK_NS;
      for (int j = 0; j < njobs; j++)
        if (each[j]->ndone < each[j]->nsteps) HC_TRY_GOTO(stall_look(each[j]), r, out);
    }
    if (now >= next_window_look) {
      next_window_look = now + WINDOW_PEER_LOOK_NS;
      for (int j = 0; j < njobs; j++) HC_TRY_GOTO(window_peers_check(each[j]), r, out);
    }
    HC_TRY_GOTO(wait_state_idle(&wait, each, njobs, now), r, out);
  }
out:
  for (int j = 0; j < built; j++) stall_clear(each[j]);
  for (int j = 0; j < built; j++)
    if (each[j] == &states[j]) job_state_destroy(&states[j]);
  if (states != stack_states) {
    free(states);
    free(each);
  }
  return r;
}

/* ---- one plan at a time, for the progress engine (engine.c) ---- */

struct hc_exec_run {
  struct hc_exec_job job;
  struct job_state st;
};

hc_result_t hc_exec_start(const struct hc_exec_job *job, struct hc_exec_run **out) {
  struct hc_exec_run *run;
  *out = NULL;
  HC_TRY(hc_calloc(&run, 1, sizeof(*run), "a running plan"));
  run->job = *job;
  hc_result_t r = job_state_create(&run->job, &run->st);
  if (r != HC_OK) {
    free(run);
    return r;
  }
  *out = run;
  return HC_OK;
}

hc_result_t hc_exec_poll(struct hc_exec_run *run, bool *done, bool *moved) {
  struct job_state *st = &run->st;
  if (st->ndone < st->nsteps) HC_TRY(job_progress(st, moved));
  *done = st->ndone == st->nsteps;
  return HC_OK;
}

void hc_exec_describe(const struct hc_exec_run *run, struct hc_exec_state *out) {
  const struct job_state *st = &run->st;
  *out = (struct hc_exec_state){
      .steps_done = st->ndone, .steps = st->nsteps, .failed_peer = st->peer_at, .awaited_peer = awaited_peer(st)};
  for (int k = 0; k < st->nwaits && out->counter == NULL; k++) {
    const struct hc_step *s = &st->job->plan->steps[st->waits[k]];
    out->counter = (const atomic_ullong *)s->src0;
    out->counter_target = s->count;
  }
}

hc_result_t hc_exec_sleep(struct hc_exec_run *const *runs, int nruns, int timeout_ms) {
  struct job_state *states[8];
  int n = 0;
  for (int j = 0; j < nruns && n < (int)HC_ARRAY_LEN(states); j++) states[n++] = &runs[j]->st;
  return wait_for_progress(states, n, timeout_ms);
}

void hc_exec_end(struct hc_exec_run *run) {
  if (run == NULL) return;
  job_state_destroy(&run->st);
  free(run);
}

void hc_exec_links_log_waits(const struct hc_links *links) {
  const struct hc_exec_wait_stats *s = &links->waits;
  if (s->runs == 0) return;
  const char *placement = links->cores_shared ? "ranks outnumber cores"
                          : links->own_cpu    ? "bound to a CPU of its own"
                                              : "unbound";
  HC_INFO(HC_EXEC,
          "rank %d, %s: plans run %llu; waits for peers %llu, %.2f us on average, longest %.1f us; waits ended "
          "polling bare %llu, yielding %llu, after a sleep %llu; sleeps %llu",
          links->rank, placement, (unsigned long long)s->runs, (unsigned long long)s->waits,
          s->waits ? (double)s->idle_ns / 1e3 / (double)s->waits : 0.0, (double)s->max_ns / 1e3,
          (unsigned long long)s->ended[HC_WAIT_BARE], (unsigned long long)s->ended[HC_WAIT_YIELD],
          (unsigned long long)s->ended[HC_WAIT_SLEEP], (unsigned long long)s->sleeps);
}

void hc_exec_links_check_cpus(struct hc_links *links) {
  cpu_set_t mine, theirs;
  links->own_cpu = false;
  if (sched_getaffinity(0, sizeof(mine), &mine) != 0 || CPU_COUNT(&mine) != 1) return;
  for (int i = 0; i < links->nranks; i++) {
    const int32_t pid = links->peer[i].pid;
    if (i == links->rank || pid <= 0) continue;
    /* Ranks as threads of this process: their bindings are not the pid's. */
    if (pid == (int32_t)getpid() || sched_getaffinity(pid, sizeof(theirs), &theirs) != 0) return;
    CPU_AND(&theirs, &theirs, &mine);
    if (CPU_COUNT(&theirs) > 0) return;
  }
  links->own_cpu = true;
}

hc_result_t hc_exec_links_init(struct hc_links *links, int rank, int nranks, const atomic_bool *abort_flag,
                               int local_ranks) {
  HC_TRY(hc_calloc(&links->peer, (size_t)nranks, sizeof(*links->peer), "links"));
  links->rank = rank;
  links->nranks = nranks;
  links->abort_flag = abort_flag;
  /* Bare spinning only pays when every local rank has a core of its own;
   * otherwise it steals the core a peer needs to answer, so the engine
   * yields between polls from the start (the wait policy above). */
  links->spin_ns = (uint64_t)hc_param_int(HC_P_SPIN_US) * 1000;
  links->cores_shared = local_ranks > sysconf(_SC_NPROCESSORS_ONLN);
  return HC_OK;
}
