/* GPU plans enqueued by the calling thread; see enqueue.h for the model. */
#include <sched.h>
#include <stdlib.h>

#include "enqueue.h"
#include "../vendor/vendor.h"

/* What a step is to the enqueuer: a join of dependencies (NOP), work on a
 * lane, or a transfer of the engine's. A rank's send to itself and its
 * matching receive are one copy on the GPU (the receive stands for both). */
enum step_class { CLS_JOIN, CLS_GPU, CLS_XFER };

/* What waiting for a step means: on each lane its latest step (an index,
 * -1 for none), and on each transfer queue its latest transfer (qrefs). */
struct frontier {
  int32_t lane[HC_LANE_COUNT];
  int32_t q_first, q_count;
};
struct qref {
  int32_t queue, step;
};

struct hc_gpu_lanes {
  const struct hc_dev_ops *dev;
  const struct hc_vendor *vendor; /* and its communicator of this rank's group */
  void *vendor_comm;
  int rank, nranks, nqueues; /* queue q: peer q / 2, receives when q is odd */
  /* stream[HC_LANE_MAIN] is the caller's (the first of a group's): steps
   * go straight on it, as NCCL's kernels do. stream[HC_LANE_TO_HOST] is
   * the comm's own. main_known: a plan has run; stream[MAIN] is then the
   * last plan's, which has waited (transitively) for all earlier work. */
  hc_stream_t stream[HC_LANE_COUNT];
  bool main_known;
  hc_event_t entry, exit[HC_LANE_COUNT];
  /* A plan that copies at most this much into host memory runs on the
   * main lane alone: for small messages the overlap is worth less than the
   * events that join two streams. */
  size_t one_lane_bytes;
  hc_event_t *events; /* between lanes; grown as plans need */
  int nevents;
  /* Pinned and mapped: HC_LANE_COUNT lane counters, one per queue, then
   * on the next cache line the trap word (hc_gpu_lanes_arm_trap). */
  atomic_ullong *counters;
  bool trap_checks; /* HETCCL_RELEASE_TRAP, until the device turns out to have no kernels */

  /* Over the comm's life (the calling thread's): positions handed out, and
   * what each lane has waited for already, of each other lane and queue. */
  uint64_t lane_pos[HC_LANE_COUNT], *queue_pos;
  /* The latest lane position whose counter a stream will write: the
   * engine's next transfers wait for it (they reuse slots that steps up to
   * there read or write). */
  uint64_t lane_written[HC_LANE_COUNT];
  uint64_t synced_lane[HC_LANE_COUNT][HC_LANE_COUNT], *synced_queue; /* [lane * nqueues + q] */

  /* The plan being enqueued, per step. */
  int cap;
  int8_t *cls, *lane;
  uint64_t *pos; /* GPU: position on its lane; transfer: on its queue */
  int32_t *queue, *partner, *event, *order, *pending;
  hc_ref_t *host_ref; /* transfer: its step in the host plan */
  bool *flag_after, *emitted;
  struct frontier *fr, *need; /* need: what the step itself waits for */
  int norder, nev;
  bool one_lane, has_xfer;
  int32_t last_on_lane[HC_LANE_COUNT];
  uint64_t base_lane[HC_LANE_COUNT], *base_queue; /* counters before the plan */
  struct qref *qrefs;
  int nqrefs, cap_qrefs;
  /* Flag operations not yet handed to the driver, all for one lane:
   * consecutive ones go as one batch. */
  struct hc_flag_op batch[16];
  int nbatch, batch_lane;
  /* Where programs are allowed (hc_gpu_lanes_allow_programs): the work of
   * one lane not yet handed to the driver once it copies or reduces at most
   * program_bytes, with the flag operations around it, which goes as one
   * kernel (device.h, hc_dev_program). Empty while batch is not. */
  size_t program_bytes;
  struct hc_dev_program program;
  int program_lane;
  /* Counter waits the plan being enqueued has put on a stream: what a
   * release after a failure can end early, and so what the plan's trap
   * check is for. An LL get checks the trap word itself. */
  int counter_waits;
  int32_t *merge_q, *touched; /* per queue, while merging frontiers */
  hc_ref_t *refs, *last_signal;
};

static atomic_ullong *lane_counter(struct hc_gpu_lanes *g, int l) { return &g->counters[l]; }
static atomic_ullong *queue_counter(struct hc_gpu_lanes *g, int q) { return &g->counters[HC_LANE_COUNT + q]; }
/* On a cache line of its own, so that a kernel's read of it over the bus
 * does not contend with the engine's thread writing and polling the
 * counters (a precaution: the H100 runs could not tell the two apart). */
static size_t trap_word_index(int nqueues) { return HC_DIV_UP(HC_LANE_COUNT + (size_t)nqueues, 8) * 8; }
static atomic_ullong *trap_word(struct hc_gpu_lanes *g) { return &g->counters[trap_word_index(g->nqueues)]; }

static void free_plan_arrays(struct hc_gpu_lanes *g) {
  free(g->cls);
  free(g->lane);
  free(g->pos);
  free(g->queue);
  free(g->partner);
  free(g->event);
  free(g->order);
  free(g->pending);
  free(g->host_ref);
  free(g->flag_after);
  free(g->emitted);
  free(g->fr);
  free(g->need);
  g->cap = 0;
}

static hc_result_t ensure_cap(struct hc_gpu_lanes *g, int n) {
  if (n <= g->cap) return HC_OK;
  free_plan_arrays(g);
  size_t c = (size_t)HC_MAX(n, 256);
  g->cls = malloc(c);
  g->lane = malloc(c);
  g->pos = malloc(c * sizeof(*g->pos));
  g->queue = malloc(c * sizeof(int32_t));
  g->partner = malloc(c * sizeof(int32_t));
  g->event = malloc(c * sizeof(int32_t));
  g->order = malloc(c * sizeof(int32_t));
  g->pending = malloc(c * sizeof(int32_t));
  g->host_ref = malloc(c * sizeof(hc_ref_t));
  g->flag_after = malloc(c);
  g->emitted = malloc(c);
  g->fr = malloc(c * sizeof(*g->fr));
  g->need = malloc(c * sizeof(*g->need));
  if (!g->cls || !g->lane || !g->pos || !g->queue || !g->partner || !g->event || !g->order || !g->pending ||
      !g->host_ref || !g->flag_after || !g->emitted || !g->fr || !g->need) {
    free_plan_arrays(g);
    return HC_FAIL(HC_ERR_SYSTEM, "enqueue: out of host memory for a plan of %d steps", n);
  }
  g->cap = (int)c;
  return HC_OK;
}

void hc_gpu_lanes_destroy(struct hc_gpu_lanes *g) {
  if (g == NULL) return;
  if (g->counters && g->exit[HC_LANE_TO_HOST]) hc_gpu_lanes_wait_idle(g, hc_deadline_ns()); /* fully made */
  if (g->stream[HC_LANE_TO_HOST]) hc_dev_stream_destroy(g->dev, g->stream[HC_LANE_TO_HOST]);
  hc_dev_event_destroy(g->dev, g->entry);
  for (int l = 0; l < HC_LANE_COUNT; l++) hc_dev_event_destroy(g->dev, g->exit[l]);
  for (int e = 0; e < g->nevents; e++) hc_dev_event_destroy(g->dev, g->events[e]);
  free(g->events);
  if (g->counters) hc_dev_host_free(g->dev, (void *)g->counters);
  free_plan_arrays(g);
  free(g->queue_pos);
  free(g->synced_queue);
  free(g->base_queue);
  free(g->qrefs);
  free(g->merge_q);
  free(g->touched);
  free(g->refs);
  free(g->last_signal);
  free(g);
}

hc_result_t hc_gpu_lanes_create(const struct hc_dev_ops *dev, int device, int rank, int nranks, size_t one_lane_bytes,
                                struct hc_gpu_lanes **out) {
  struct hc_gpu_lanes *g;
  hc_result_t r;
  *out = NULL;
  HC_TRY(hc_calloc(&g, 1, sizeof(*g), "GPU lanes"));
  g->dev = dev;
  g->one_lane_bytes = one_lane_bytes;
  g->rank = rank;
  g->nranks = nranks;
  g->nqueues = 2 * nranks;
  size_t nq = (size_t)g->nqueues;
  g->queue_pos = calloc(nq, sizeof(uint64_t));
  g->synced_queue = calloc(nq * HC_LANE_COUNT, sizeof(uint64_t));
  g->base_queue = calloc(nq, sizeof(uint64_t));
  g->merge_q = malloc(nq * sizeof(int32_t));
  g->touched = malloc(nq * sizeof(int32_t));
  g->refs = malloc((nq + HC_LANE_COUNT + 1) * sizeof(hc_ref_t));
  g->last_signal = malloc(nq * sizeof(hc_ref_t));
  if (!g->queue_pos || !g->synced_queue || !g->base_queue || !g->merge_q || !g->touched || !g->refs ||
      !g->last_signal) {
    r = HC_FAIL(HC_ERR_SYSTEM, "enqueue: out of host memory for %d ranks", nranks);
    goto fail;
  }
  for (size_t q = 0; q < nq; q++) g->merge_q[q] = -1;
  HC_TRY_GOTO(hc_dev_stream_create(dev, device, &g->stream[HC_LANE_TO_HOST]), r, fail);
  HC_TRY_GOTO(hc_dev_event_create(dev, &g->entry), r, fail);
  for (int l = 0; l < HC_LANE_COUNT; l++) HC_TRY_GOTO(hc_dev_event_create(dev, &g->exit[l]), r, fail);
  g->trap_checks = hc_param_int(HC_P_RELEASE_TRAP) != 0;
  size_t bytes = (trap_word_index(g->nqueues) + 8) * sizeof(atomic_ullong);
  HC_TRY_GOTO(hc_dev_host_alloc(dev, bytes, (void **)&g->counters), r, fail);
  memset((void *)g->counters, 0, bytes);
  *out = g;
  return HC_OK;
fail:
  hc_gpu_lanes_destroy(g);
  return r;
}

void hc_gpu_lanes_use_vendor(struct hc_gpu_lanes *g, const struct hc_vendor *v, void *vendor_comm) {
  g->vendor = v;
  g->vendor_comm = vendor_comm;
}

void hc_gpu_lanes_allow_programs(struct hc_gpu_lanes *g, size_t max_bytes) { g->program_bytes = max_bytes; }

hc_result_t hc_gpu_lanes_wait_idle(struct hc_gpu_lanes *g, uint64_t deadline_ns) {
  /* The main lane writes its counter at the end of every plan; the other
   * lane's end is its exit event (recorded by every plan that used it). */
  for (;;) {
    int done = 0;
    HC_TRY(hc_dev_event_query(g->dev, g->exit[HC_LANE_TO_HOST], &done));
    if (done && atomic_load(lane_counter(g, HC_LANE_MAIN)) >= g->lane_pos[HC_LANE_MAIN]) return HC_OK;
    if (hc_now_ns() > deadline_ns)
      return HC_FAIL(HC_ERR_REMOTE, "rank %d: GPU work of the comm still pending after HETCCL_TIMEOUT", g->rank);
    sched_yield();
  }
}

bool hc_gpu_lanes_idle(struct hc_gpu_lanes *g) {
  int done = 0;
  /* A query that fails (a sticky error: the trap fired) leaves nothing
   * that will still run. */
  return hc_dev_event_query(g->dev, g->exit[HC_LANE_TO_HOST], &done) != HC_OK ||
         (done && atomic_load(lane_counter(g, HC_LANE_MAIN)) >= g->lane_pos[HC_LANE_MAIN]);
}

void hc_gpu_lanes_arm_trap(struct hc_gpu_lanes *g) { atomic_fetch_or(trap_word(g), HC_DEV_TRAP_ARMED); }

void hc_gpu_lanes_release(struct hc_gpu_lanes *g, const uint64_t *xfer_end) {
  atomic_fetch_or(trap_word(g), HC_DEV_TRAP_RELEASED);
  for (int q = 0; q < g->nqueues; q++) {
    const uint64_t end = xfer_end ? xfer_end[q] : HC_GPU_RELEASED;
    if (atomic_load(queue_counter(g, q)) < end) atomic_store(queue_counter(g, q), end);
  }
}

/* ---- first half: order, lanes, frontiers, the host plan ---- */

static hc_result_t reserve_qrefs(struct hc_gpu_lanes *g, int more) {
  if (g->nqrefs + more <= g->cap_qrefs) return HC_OK;
  int cap = HC_MAX(g->cap_qrefs * 2, g->nqrefs + more + 256);
  struct qref *q = realloc(g->qrefs, (size_t)cap * sizeof(*q));
  if (q == NULL) return HC_FAIL(HC_ERR_SYSTEM, "enqueue: out of host memory for dependencies");
  g->qrefs = q;
  g->cap_qrefs = cap;
  return HC_OK;
}

/* Into *out, the frontier of every dependency of a and (when >= 0) b. */
static hc_result_t merge_deps(struct hc_gpu_lanes *g, const struct hc_plan *p, int a, int b, struct frontier *out) {
  int ntouched = 0;
  for (int l = 0; l < HC_LANE_COUNT; l++) out->lane[l] = -1;
  for (int k = 0; k < 2; k++) {
    int i = k ? b : a;
    if (i < 0) continue;
    for (int d = 0; d < HC_STEP_MAX_DEPS; d++) {
      int j = p->steps[i].deps[d] - 1;
      if (j < 0) continue;
      const struct frontier *f = &g->fr[j];
      for (int l = 0; l < HC_LANE_COUNT; l++) {
        int s = f->lane[l];
        if (s >= 0 && (out->lane[l] < 0 || g->pos[s] > g->pos[out->lane[l]])) out->lane[l] = s;
      }
      for (int x = 0; x < f->q_count; x++) {
        struct qref qr = g->qrefs[f->q_first + x];
        int32_t *cur = &g->merge_q[qr.queue];
        if (*cur < 0) g->touched[ntouched++] = qr.queue;
        if (*cur < 0 || g->pos[qr.step] > g->pos[*cur]) *cur = qr.step;
      }
    }
  }
  hc_result_t r = reserve_qrefs(g, ntouched);
  if (r != HC_OK) {
    for (int t = 0; t < ntouched; t++) g->merge_q[g->touched[t]] = -1;
    return r;
  }
  out->q_first = g->nqrefs;
  out->q_count = ntouched;
  for (int t = 0; t < ntouched; t++) {
    int q = g->touched[t];
    g->qrefs[g->nqrefs++] = (struct qref){.queue = q, .step = g->merge_q[q]};
    g->merge_q[q] = -1;
  }
  return HC_OK;
}

static bool deps_emitted(const struct hc_gpu_lanes *g, const struct hc_plan *p, int i) {
  for (int d = 0; d < HC_STEP_MAX_DEPS; d++) {
    int j = p->steps[i].deps[d] - 1;
    if (j >= 0 && !g->emitted[j]) return false;
  }
  return true;
}

/* Gives step i (with its partner) its place when everything it waits for
 * has one; *placed tells whether it did. */
static hc_result_t try_place(struct hc_gpu_lanes *g, const struct hc_plan *p, int i, bool *placed) {
  const int other = g->partner[i];
  *placed = false;
  if (!deps_emitted(g, p, i) || (other >= 0 && !deps_emitted(g, p, other))) return HC_OK;
  struct frontier *fr = &g->fr[i];
  switch (g->cls[i]) {
  case CLS_JOIN: HC_TRY(merge_deps(g, p, i, -1, fr)); break;
  case CLS_XFER: {
    HC_TRY(merge_deps(g, p, i, -1, &g->need[i]));
    for (int l = 0; l < HC_LANE_COUNT; l++)
      if (g->need[i].lane[l] >= 0) g->flag_after[g->need[i].lane[l]] = true;
    HC_TRY(reserve_qrefs(g, 1));
    *fr = (struct frontier){.q_first = g->nqrefs, .q_count = 1};
    for (int l = 0; l < HC_LANE_COUNT; l++) fr->lane[l] = -1;
    g->qrefs[g->nqrefs++] = (struct qref){.queue = g->queue[i], .step = i};
    break;
  }
  case CLS_GPU: {
    /* A pair to itself runs where the receive stands. */
    const int rep = other >= 0 && p->steps[i].kind == HC_STEP_SEND ? other : i;
    const int mate = rep == i ? other : i;
    const int lane =
        g->one_lane || other >= 0 || p->steps[rep].lane >= HC_LANE_COUNT ? HC_LANE_MAIN : p->steps[rep].lane;
    g->lane[rep] = (int8_t)lane;
    g->pos[rep] = ++g->lane_pos[lane];
    HC_TRY(merge_deps(g, p, rep, mate, &g->need[rep]));
    for (int l = 0; l < HC_LANE_COUNT; l++) {
      int s = g->need[rep].lane[l];
      if (l != lane && s >= 0 && g->event[s] < 0) g->event[s] = g->nev++;
    }
    struct frontier *rf = &g->fr[rep];
    *rf = (struct frontier){.q_count = 0};
    for (int l = 0; l < HC_LANE_COUNT; l++) rf->lane[l] = l == lane ? rep : -1;
    if (mate >= 0) {
      g->fr[mate] = *rf;
      g->emitted[mate] = true;
    }
    g->last_on_lane[lane] = rep;
    g->order[g->norder++] = rep;
    g->emitted[rep] = true;
    *placed = true;
    return HC_OK;
  }
  }
  g->emitted[i] = true;
  *placed = true;
  return HC_OK;
}

/* Classifies the steps, pairs the rank's transfers to itself and numbers
 * the other transfers on their queues, in plan order (the order the peer
 * matches them in). */
static hc_result_t classify(struct hc_gpu_lanes *g, const struct hc_plan *p) {
  int *self_send = g->pending, *self_recv = g->order; /* free until placing starts */
  int nsend = 0, nrecv = 0, hsend = 0, hrecv = 0;
  size_t to_host_bytes = 0;
  g->has_xfer = false;
  for (int i = 0; i < p->nsteps; i++) {
    const struct hc_step *s = &p->steps[i];
    if (s->kind == HC_STEP_COPY && s->lane == HC_LANE_TO_HOST) to_host_bytes += s->count;
    g->partner[i] = g->event[i] = g->queue[i] = -1;
    g->flag_after[i] = g->emitted[i] = false;
    switch (s->kind) {
    case HC_STEP_NOP: g->cls[i] = CLS_JOIN; break;
    case HC_STEP_SEND:
    case HC_STEP_RECV: {
      const bool recv = s->kind == HC_STEP_RECV;
      if (s->peer != g->rank) {
        g->has_xfer = true;
        g->cls[i] = CLS_XFER;
        g->queue[i] = s->peer * 2 + recv;
        g->pos[i] = ++g->queue_pos[g->queue[i]];
        break;
      }
      g->cls[i] = CLS_GPU;
      int *mine = recv ? self_recv : self_send, *theirs = recv ? self_send : self_recv;
      int *nmine = recv ? &nrecv : &nsend, *htheirs = recv ? &hsend : &hrecv, ntheirs = recv ? nsend : nrecv;
      if (*htheirs == ntheirs) {
        mine[(*nmine)++] = i;
        break;
      }
      int j = theirs[(*htheirs)++];
      if (p->steps[j].count != s->count)
        return HC_FAIL(HC_ERR_USAGE, "rank %d: mismatched counts: sends %zu bytes to itself, receives %zu", g->rank,
                       (recv ? p->steps[j] : *s).count, (recv ? *s : p->steps[j]).count);
      g->partner[i] = j;
      g->partner[j] = i;
      break;
    }
    default: g->cls[i] = CLS_GPU; break;
    }
  }
  if (hsend != nsend || hrecv != nrecv)
    return HC_FAIL(HC_ERR_USAGE, "rank %d: %d sends to itself and %d receives from itself in one call or group",
                   g->rank, nsend, nrecv);
  g->one_lane = to_host_bytes <= g->one_lane_bytes;
  return HC_OK;
}

/* The engine's part: first a wait for the lane steps of earlier plans with
 * transfers (they share slots), then every transfer after what it waits
 * for, each followed by the signal of its queue's counter. */
static hc_result_t build_host_plan(struct hc_gpu_lanes *g, const struct hc_plan *p, struct hc_plan *host) {
  hc_ref_t wait_ref[HC_LANE_COUNT] = {0}, start[HC_LANE_COUNT];
  uint64_t wait_val[HC_LANE_COUNT] = {0};
  int nstart = 0;
  for (int q = 0; q < g->nqueues; q++) g->last_signal[q] = 0;
  for (int l = 0; l < HC_LANE_COUNT; l++)
    if (g->lane_written[l] > 0)
      start[nstart++] = hc_plan_push(
          host, (struct hc_step){.kind = HC_STEP_WAIT, .src0 = lane_counter(g, l), .count = g->lane_written[l]});
  const hc_ref_t after_earlier_plans = hc_plan_join(host, start, nstart);
  for (int i = 0; i < p->nsteps; i++) {
    if (g->cls[i] != CLS_XFER) continue;
    const struct frontier *need = &g->need[i];
    int nrefs = 0;
    if (after_earlier_plans) g->refs[nrefs++] = after_earlier_plans;
    for (int l = 0; l < HC_LANE_COUNT; l++) {
      int s = need->lane[l];
      if (s < 0) continue;
      if (wait_ref[l] == 0 || wait_val[l] != g->pos[s]) {
        wait_val[l] = g->pos[s];
        wait_ref[l] =
            hc_plan_push(host, (struct hc_step){.kind = HC_STEP_WAIT, .src0 = lane_counter(g, l), .count = g->pos[s]});
      }
      g->refs[nrefs++] = wait_ref[l];
    }
    for (int x = 0; x < need->q_count; x++) g->refs[nrefs++] = g->host_ref[g->qrefs[need->q_first + x].step];
    struct hc_step t = p->steps[i];
    /* The host plan outlives p: it keeps its own copy of the signature. */
    if (t.call < p->nsigs) t.call = hc_plan_sig_add(host, &p->sigs[t.call]);
    memset(t.deps, 0, sizeof(t.deps));
    t.deps[0] = hc_plan_join(host, g->refs, nrefs);
    t.lane = 0;
    g->host_ref[i] = hc_plan_push(host, t);
    int q = g->queue[i];
    g->last_signal[q] = hc_plan_push(host, (struct hc_step){.kind = HC_STEP_SIGNAL,
                                                            .src0 = queue_counter(g, q),
                                                            .count = g->pos[i],
                                                            .deps = {g->host_ref[i], g->last_signal[q]}});
  }
  if (host->cap < 0) return HC_FAIL(HC_ERR_SYSTEM, "enqueue: out of host memory for the engine's plan");
  return HC_OK;
}

hc_result_t hc_gpu_prepare(struct hc_gpu_lanes *g, const struct hc_plan *p, struct hc_plan *host, uint64_t *xfer_end) {
  const int n = p->nsteps;
  HC_TRY(ensure_cap(g, n));
  memcpy(g->base_lane, g->lane_pos, sizeof(g->base_lane));
  memcpy(g->base_queue, g->queue_pos, (size_t)g->nqueues * sizeof(uint64_t));
  g->norder = g->nev = g->nqrefs = 0;
  for (int l = 0; l < HC_LANE_COUNT; l++) g->last_on_lane[l] = -1;
  HC_TRY(classify(g, p));
  /* Plan order, except that a step waits (in pending) until what it needs
   * is placed: only a pair to itself whose send comes late holds anything. */
  int npending = 0;
  for (int i = 0; i < n; i++) {
    bool placed;
    if (g->emitted[i]) continue;
    HC_TRY(try_place(g, p, i, &placed));
    if (!placed) {
      g->pending[npending++] = i;
      continue;
    }
    for (int k = 0; k < npending;) {
      HC_TRY(try_place(g, p, g->pending[k], &placed));
      if (!placed && !g->emitted[g->pending[k]]) {
        k++;
        continue;
      }
      g->pending[k] = g->pending[--npending];
      k = 0;
    }
  }
  if (npending > 0)
    return HC_FAIL(HC_ERR_INTERNAL, "enqueue: %d steps wait for each other (step %d first)", npending, g->pending[0]);
  if (g->has_xfer) HC_TRY(build_host_plan(g, p, host));
  /* The main lane's end is what a drain waits for; the other's the next
   * transfers (a plan without transfers leaves it alone: its steps touch
   * only windows and device memory, which the engine never touches). */
  for (int l = 0; l < HC_LANE_COUNT; l++) {
    int last = g->last_on_lane[l];
    if (last < 0 || (l != HC_LANE_MAIN && !g->has_xfer)) continue;
    g->flag_after[last] = true;
    g->lane_written[l] = g->pos[last];
  }
  memcpy(xfer_end, g->queue_pos, (size_t)g->nqueues * sizeof(uint64_t));
  return HC_OK;
}

/* ---- second half: the streams ---- */

/* Hands the work gathered so far (a flag batch or a program) to the
 * driver. */
static hc_result_t flush_gathered(struct hc_gpu_lanes *g) {
  int n = g->nbatch;
  g->nbatch = 0;
  if (g->program.args.nops > 0) {
    hc_result_t r = hc_dev_program(g->dev, &g->program, g->stream[g->program_lane]);
    g->program.args.nops = 0;
    HC_TRY(r);
  }
  return n ? hc_dev_flag_batch(g->dev, g->stream[g->batch_lane], g->batch, n) : HC_OK;
}

static struct hc_dev_program_op flag_program_op(struct hc_flag_op f) {
  void *flag = (void *)(uintptr_t)f.flag;
  if (f.wait) return (struct hc_dev_program_op){.kind = HC_DEV_PROGRAM_WAIT, .n = f.value, .src0 = flag};
  return (struct hc_dev_program_op){
      .kind = f.relaxed ? HC_DEV_PROGRAM_WRITE_RELAXED : HC_DEV_PROGRAM_WRITE, .n = f.value, .dst = flag};
}

/* Appends op to the lane's program, after the work of another lane or a
 * full program has gone to the driver. A program starts with the lane's
 * flag batch, which then goes in the same launch. */
static hc_result_t program_op(struct hc_gpu_lanes *g, int lane, struct hc_dev_program_op op) {
  struct hc_dev_program_args *a = &g->program.args;
  if (a->nops > 0 && (g->program_lane != lane || a->nops == HC_DEV_PROGRAM_OPS)) HC_TRY(flush_gathered(g));
  if (a->nops == 0) {
    if (g->nbatch > 0 && (g->batch_lane != lane || g->nbatch >= HC_DEV_PROGRAM_OPS)) HC_TRY(flush_gathered(g));
    for (int k = 0; k < g->nbatch; k++) a->op[a->nops++] = flag_program_op(g->batch[k]);
    g->nbatch = 0;
    g->program_lane = lane;
    a->trap = (const volatile uint64_t *)trap_word(g);
  }
  a->op[a->nops++] = op;
  return HC_OK;
}

static struct hc_flag_op wait_for(const void *counter, uint64_t value) {
  return (struct hc_flag_op){.flag = (volatile uint64_t *)(uintptr_t)counter, .value = value, .wait = true};
}

/* A flag operation on lane: gathered with the ones just before it, into
 * the lane's program where one is open (it copies or reduces), else into
 * a batch: flag operations alone cost less as a batch than as a launch,
 * and a stream's wait holds no GPU time while it waits. */
static hc_result_t flag_op(struct hc_gpu_lanes *g, int lane, struct hc_flag_op f) {
  const uint64_t nops = g->program.args.nops;
  g->counter_waits += f.wait;
  if (nops > 0 && g->program_lane == lane && nops < HC_DEV_PROGRAM_OPS) return program_op(g, lane, flag_program_op(f));
  if (nops > 0 || (g->nbatch > 0 && (g->batch_lane != lane || g->nbatch == (int)HC_ARRAY_LEN(g->batch))))
    HC_TRY(flush_gathered(g));
  g->batch_lane = lane;
  g->batch[g->nbatch++] = f;
  return HC_OK;
}

/* What step i copies from, or NULL where it is no copy: a copy step's
 * source, or for a rank's receive from itself, its partner send's. */
static const void *copy_source(const struct hc_gpu_lanes *g, const struct hc_plan *p, int i) {
  if (g->partner[i] >= 0) return p->steps[g->partner[i]].src0;
  return p->steps[i].kind == HC_STEP_COPY ? p->steps[i].src0 : NULL;
}

/* Appends step i to the lane's program where a program takes it (*taken):
 * a copy, or a reduction (after the trap check, where it carries the
 * plan's), of at most program_bytes; more would move slower in one block
 * than on the copy engine or a full grid. */
static hc_result_t program_step(struct hc_gpu_lanes *g, const struct hc_plan *p, int i, int lane, bool *trap_checked,
                                bool *taken) {
  const struct hc_step *st = &p->steps[i];
  struct hc_dev_program *pr = &g->program;
  *taken = false;
  if (st->kind == HC_STEP_COPY && st->ll != HC_LL_NONE) {
    /* No stream operation reads or writes the LL form; the comm offers it
     * only where programs run (api/comm.c). */
    if (g->program_bytes == 0)
      return HC_FAIL(HC_ERR_INTERNAL, "rank %d: a window piece in LL form, but programs are off", g->rank);
    *taken = true;
    return program_op(
        g, lane,
        (struct hc_dev_program_op){.kind = st->ll == HC_LL_PUT ? HC_DEV_PROGRAM_LL_PUT : HC_DEV_PROGRAM_LL_GET,
                                   .n = st->count,
                                   .dst = st->dst,
                                   .src0 = st->src0,
                                   .flag = st->ll_flag});
  }
  if (g->program_bytes == 0) return HC_OK;
  const void *src = copy_source(g, p, i);
  if (src != NULL) {
    if (st->count > g->program_bytes) return HC_OK;
    *taken = true;
    return program_op(
        g, lane, (struct hc_dev_program_op){.kind = HC_DEV_PROGRAM_COPY, .n = st->count, .dst = st->dst, .src0 = src});
  }
  if (st->kind != HC_STEP_REDUCE || st->count * hc_dtype_size(st->dtype) > g->program_bytes) return HC_OK;
  bool reduces = false;
  if (g->program_lane == lane)
    for (uint64_t k = 0; k < pr->args.nops; k++) reduces |= pr->args.op[k].kind == HC_DEV_PROGRAM_REDUCE;
  /* One dtype and op per program: another goes in the next one. */
  if (reduces && (pr->dtype != st->dtype || pr->redop != st->redop)) HC_TRY(flush_gathered(g));
  if (trap_checked) {
    HC_TRY(program_op(g, lane, (struct hc_dev_program_op){.kind = HC_DEV_PROGRAM_TRAP_CHECK}));
    *trap_checked = true;
  }
  HC_TRY(program_op(
      g, lane,
      (struct hc_dev_program_op){
          .kind = HC_DEV_PROGRAM_REDUCE, .n = st->count, .dst = st->dst, .src0 = st->src0, .src1 = st->src1}));
  pr->dtype = st->dtype;
  pr->redop = st->redop;
  *taken = true;
  return HC_OK;
}

/* Counters only grow: one that is there already needs no stream wait. */
static bool reached(const void *counter, uint64_t value) {
  return atomic_load_explicit((const atomic_ullong *)counter, memory_order_acquire) >= value;
}

static hc_result_t wait_queue(struct hc_gpu_lanes *g, int lane, int q, uint64_t pos) {
  uint64_t *synced = &g->synced_queue[lane * g->nqueues + q];
  if (pos <= *synced) return HC_OK;
  *synced = pos;
  if (reached(queue_counter(g, q), pos)) return HC_OK;
  return flag_op(g, lane, wait_for(queue_counter(g, q), pos));
}

/* A lane's first step of the plan: after the caller's streams and after
 * everything of the plans before. The caller's stream is after both lanes
 * of the plans before (it waited for them at their end, or for the stream
 * that did); the other lane waits for the caller's stream. Transfers of
 * earlier plans that no step waited for are waited for here. */
static hc_result_t start_lane(struct hc_gpu_lanes *g, int lane) {
  if (lane != HC_LANE_MAIN) {
    HC_TRY(flush_gathered(g));
    HC_TRY(hc_dev_stream_wait_event(g->dev, g->stream[lane], g->entry));
  }
  for (int m = 0; m < HC_LANE_COUNT; m++)
    if (m != lane) g->synced_lane[lane][m] = HC_MAX(g->synced_lane[lane][m], g->base_lane[m]);
  for (int q = 0; q < g->nqueues; q++) HC_TRY(wait_queue(g, lane, q, g->base_queue[q]));
  return HC_OK;
}

/* A VENDOR step: the vendor's collective on its communicator of the group,
 * on the lane's stream (dtype and op values are the vendor's own); coll
 * SEND is a group of the vendor's sends and receives, in bytes. */
static hc_result_t run_vendor_step(struct hc_gpu_lanes *g, const struct hc_step *st, hc_stream_t s) {
  if (g->vendor == NULL) return HC_FAIL(HC_ERR_INTERNAL, "rank %d: a vendor step, but no vendor communicator", g->rank);
  if (st->coll == HC_COLL_SEND) return hc_vendor_run_p2p(g->vendor, g->vendor_comm, st->src0, st->count, s);
  /* Plans make only these; the others would need this rank's place in the
   * group's vendor comm, which the lanes do not know. */
  if (!hc_coll_reduces((enum hc_coll)st->coll) && st->coll != HC_COLL_BROADCAST && st->coll != HC_COLL_ALLGATHER)
    return HC_FAIL(HC_ERR_INTERNAL, "rank %d: vendor step of collective %d", g->rank, st->coll);
  const struct hc_vendor_call c = {.coll = (enum hc_coll)st->coll,
                                   .sendbuf = st->src0,
                                   .recvbuf = st->dst,
                                   .count = st->count,
                                   .dtype = st->dtype,
                                   .op = st->redop,
                                   .root = st->peer};
  return hc_vendor_run(g->vendor, g->vendor_comm, -1, 0, &c, s);
}

/* trap_checked: NULL, or where a reduction that makes the plan's trap
 * check says whether it did (trap_carrier). */
static hc_result_t run_step(struct hc_gpu_lanes *g, const struct hc_plan *p, int i, int lane, bool *trap_checked) {
  const struct hc_step *st = &p->steps[i];
  if (st->kind == HC_STEP_WAIT && st->ll == HC_LL_POLLED) return HC_OK; /* the LL get after it waits */
  if (st->kind == HC_STEP_WAIT && g->partner[i] < 0)
    return reached(st->src0, st->count) ? HC_OK : flag_op(g, lane, wait_for(st->src0, st->count));
  if (st->kind == HC_STEP_SIGNAL)
    return flag_op(g, lane,
                   (struct hc_flag_op){
                       .flag = (volatile uint64_t *)(uintptr_t)st->src0, .value = st->count, .relaxed = st->relaxed});
  bool taken;
  HC_TRY(program_step(g, p, i, lane, trap_checked, &taken));
  if (taken) return HC_OK;
  HC_TRY(flush_gathered(g));
  const void *src = copy_source(g, p, i);
  if (src != NULL) return hc_dev_copy(g->dev, st->dst, src, st->count, g->stream[lane]);
  if (st->kind == HC_STEP_VENDOR) return run_vendor_step(g, st, g->stream[lane]);
  return hc_exec_local_step(g->dev, st, g->stream[lane], trap_checked ? (const volatile uint64_t *)trap_word(g) : NULL,
                            trap_checked);
}

/* The plan's last step on the main lane: a stream that waited on this
 * comm's counters and was released after a failure must not complete as
 * if its data had come (see hc_gpu_lanes_arm_trap). */
static hc_result_t trap_check(struct hc_gpu_lanes *g, hc_stream_t s) {
  if (!g->trap_checks || g->nranks == 1) return HC_OK;
  bool launched = false;
  HC_TRY(hc_dev_trap_if_set(g->dev, s, (const volatile uint64_t *)trap_word(g), &launched));
  if (!launched) {
    g->trap_checks = false;
    HC_INFO(HC_EXEC,
            "rank %d: no trap check at the end of GPU plans (the device has no kernels): streams released after a "
            "failure complete with undefined data",
            g->rank);
  }
  return HC_OK;
}

/* The step whose kernel can make the plan's trap check (-1: none): the
 * last but for signals (a window slot freed after a reduction read it),
 * a reduction, in a plan that runs on the main lane alone (no other lane
 * to join after it). Its kernel checks the word before it reduces, after
 * every wait of the plan: a launch less per call, 3-6 us of the call
 * (bench/gpu/README.md). A signal after it only tells the peer that the
 * data was taken. */
static int trap_carrier(const struct hc_gpu_lanes *g, const struct hc_plan *p) {
  if (!g->trap_checks || g->nranks == 1 || g->norder == 0) return -1;
  for (int l = 0; l < HC_LANE_COUNT; l++)
    if (l != HC_LANE_MAIN && g->last_on_lane[l] >= 0) return -1;
  int k = g->norder - 1;
  while (k > 0 && p->steps[g->order[k]].kind == HC_STEP_SIGNAL) k--;
  const int i = g->order[k];
  return p->steps[i].kind == HC_STEP_REDUCE ? i : -1;
}

hc_result_t hc_gpu_enqueue(struct hc_gpu_lanes *g, const struct hc_plan *p, hc_stream_t *user, int nuser) {
  const struct hc_dev_ops *dev = g->dev;
  g->nbatch = 0;
  g->program.args.nops = 0;
  g->counter_waits = 0;
  if (g->norder == 0) return HC_OK;
  while (g->nevents < g->nev) {
    hc_event_t *ev = realloc(g->events, (size_t)(g->nevents + 1) * sizeof(*ev));
    if (ev == NULL) return HC_FAIL(HC_ERR_SYSTEM, "enqueue: out of host memory for events");
    g->events = ev;
    HC_TRY(hc_dev_event_create(dev, &g->events[g->nevents]));
    g->nevents++;
  }
  /* One entry point: the first stream waits for the others' work, and for
   * the last plan's stream when it is another. */
  for (int u = 1; u < nuser; u++) {
    HC_TRY(hc_dev_event_record(dev, g->entry, user[u]));
    HC_TRY(hc_dev_stream_wait_event(dev, user[0], g->entry));
  }
  if (g->main_known && g->stream[HC_LANE_MAIN] != user[0]) {
    HC_TRY(hc_dev_event_record(dev, g->exit[HC_LANE_MAIN], g->stream[HC_LANE_MAIN]));
    HC_TRY(hc_dev_stream_wait_event(dev, user[0], g->exit[HC_LANE_MAIN]));
  }
  g->stream[HC_LANE_MAIN] = user[0];
  g->main_known = true;
  for (int l = 0; l < HC_LANE_COUNT; l++)
    if (l != HC_LANE_MAIN && g->last_on_lane[l] >= 0) {
      HC_TRY(hc_dev_event_record(dev, g->entry, user[0]));
      break;
    }
  bool started[HC_LANE_COUNT] = {false}, trap_checked = false;
  const int carrier = trap_carrier(g, p);
  for (int k = 0; k < g->norder; k++) {
    const int i = g->order[k], lane = g->lane[i];
    hc_stream_t s = g->stream[lane];
    if (!started[lane]) HC_TRY(start_lane(g, lane));
    started[lane] = true;
    const struct frontier *need = &g->need[i];
    for (int m = 0; m < HC_LANE_COUNT; m++) {
      int d = need->lane[m];
      if (m == lane || d < 0 || g->pos[d] <= g->synced_lane[lane][m]) continue;
      g->synced_lane[lane][m] = g->pos[d];
      HC_TRY(flush_gathered(g));
      HC_TRY(hc_dev_stream_wait_event(dev, s, g->events[g->event[d]]));
    }
    for (int x = 0; x < need->q_count; x++) {
      struct qref qr = g->qrefs[need->q_first + x];
      HC_TRY(wait_queue(g, lane, qr.queue, g->pos[qr.step]));
    }
    /* A plan that put no counter wait on a stream by its carrier needs no
     * trap check there; a signal after it that waits gets the one at the end. */
    const bool carries = i == carrier && g->counter_waits > 0;
    HC_TRACE(HC_EXEC, "step %d (kind %d, %zu) on lane %d at %llu%s", i, p->steps[i].kind, p->steps[i].count, lane,
             (unsigned long long)g->pos[i], carries ? ", with the trap check" : "");
    HC_TRY(run_step(g, p, i, lane, carries ? &trap_checked : NULL));
    if (g->event[i] >= 0) {
      HC_TRY(flush_gathered(g));
      HC_TRY(hc_dev_event_record(dev, g->events[g->event[i]], s));
    }
    if (g->flag_after[i])
      HC_TRY(flag_op(g, lane,
                     (struct hc_flag_op){.flag = (volatile uint64_t *)lane_counter(g, lane), .value = g->pos[i]}));
  }
  HC_TRY(flush_gathered(g));
  /* The main lane joins the other, then checks the trap word; the caller's
   * other streams wait for that. */
  for (int l = 0; l < HC_LANE_COUNT; l++) {
    if (l == HC_LANE_MAIN || !started[l]) continue;
    HC_TRY(hc_dev_event_record(dev, g->exit[l], g->stream[l]));
    HC_TRY(hc_dev_stream_wait_event(dev, user[0], g->exit[l]));
  }
  if (!trap_checked && g->counter_waits > 0) HC_TRY(trap_check(g, user[0]));
  if (nuser > 1) HC_TRY(hc_dev_event_record(dev, g->exit[HC_LANE_MAIN], user[0]));
  for (int u = 1; u < nuser; u++) HC_TRY(hc_dev_stream_wait_event(dev, user[u], g->exit[HC_LANE_MAIN]));
  return HC_OK;
}
