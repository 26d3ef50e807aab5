/*
 * Collectives, point-to-point and groups: argument checks as NCCL makes
 * them, then one path for everything: a call is recorded in the calling
 * thread's group (a call outside any group is a group of one), and
 * hetcclGroupEnd builds one plan per comm and runs them together. A call
 * alone on a host comm skips the recording and runs at once
 * (host_call_run), as a group of one would.
 */
#include <stdio.h>
#include <stdlib.h>

#include "../plan/plan.h"
#include "api_priv.h"
#include "../vendor/vendor.h"
#include "proxy.h"

/* ---- the calling thread's group ---- */

struct group_call {
  struct hetcclComm *comm;
  struct hc_coll_args args;
  struct hc_alltoallv_kept *v_kept; /* alltoallv: our copy of the four arrays */
  hc_stream_t stream;
};

static _Thread_local int group_depth;
static _Thread_local struct group_call *group_calls;
static _Thread_local int group_ncalls, group_cap;
/* A group's first call: most groups are one call made outside any group,
 * which then allocates nothing. */
static _Thread_local struct group_call group_first;

static void group_clear(void) {
  for (int i = 0; i < group_ncalls; i++) free(group_calls[i].v_kept);
  if (group_calls != &group_first) free(group_calls);
  group_calls = NULL;
  group_ncalls = group_cap = 0;
}

static hc_result_t group_grow(void) {
  if (group_cap == 0) {
    group_calls = &group_first;
    group_cap = 1;
    return HC_OK;
  }
  int cap = group_cap == 1 ? 8 : group_cap * 2;
  struct group_call *calls = malloc((size_t)cap * sizeof(*calls));
  if (calls == NULL) return HC_FAIL(HC_ERR_SYSTEM, "group: out of host memory for %d calls", cap);
  memcpy(calls, group_calls, (size_t)group_ncalls * sizeof(*calls));
  if (group_calls != &group_first) free(group_calls);
  group_calls = calls;
  group_cap = cap;
  return HC_OK;
}

/* The number a call made now carries (plan.h, hc_coll_args.seq). */
static uint32_t call_seq_take(struct hetcclComm *comm, enum hc_coll coll) {
  const uint32_t seq = comm->coll_seq;
  if (coll != HC_COLL_SEND && coll != HC_COLL_RECV) comm->coll_seq++;
  return seq;
}

static hc_result_t group_record(struct hetcclComm *comm, const struct hc_coll_args *a, hc_stream_t stream) {
  if (group_ncalls == group_cap) HC_TRY(group_grow());
  struct group_call *c = &group_calls[group_ncalls];
  *c = (struct group_call){.comm = comm, .args = *a, .stream = stream};
  /* Numbered when made, so a group's calls keep the order of the calls. */
  c->args.seq = call_seq_take(comm, a->coll);
  /* The caller may reuse its arrays before GroupEnd. */
  if (a->coll == HC_COLL_ALLTOALLV) HC_TRY(hc_coll_args_keep_counts(&c->args, comm->nranks, &c->v_kept));
  group_ncalls++;
  return HC_OK;
}

static bool bytes_overlap(const void *a, size_t an, const void *b, size_t bn) {
  const char *pa = a, *pb = b;
  return an && bn && pa < pb + bn && pb < pa + an;
}

/* A send whose buffer a receive of the same group may overwrite (in-place
 * send/recv, as nccl-tests runs it) sends a copy taken before anything
 * arrives. */
static void mark_staged_sends(void) {
  for (int i = 0; i < group_ncalls; i++) {
    struct hc_coll_args *s = &group_calls[i].args;
    if (s->coll != HC_COLL_SEND) continue;
    size_t sbytes = s->count * hc_dtype_size(s->dtype);
    for (int j = 0; j < group_ncalls && !s->stage_send; j++) {
      const struct hc_coll_args *r = &group_calls[j].args;
      if (r->coll == HC_COLL_RECV && group_calls[j].comm == group_calls[i].comm &&
          bytes_overlap(s->sendbuf, sbytes, r->recvbuf, r->count * hc_dtype_size(r->dtype)))
        s->stage_send = true;
    }
  }
}

/* One call on a pass-through comm, as the vendor's own call. */
static hc_result_t vendor_call(struct hetcclComm *comm, const struct hc_coll_args *a, hc_stream_t st) {
  static const struct hc_alltoallv_args not_alltoallv; /* every array NULL */
  const struct hc_alltoallv_args *v = a->v != NULL ? a->v : &not_alltoallv;
  const struct hc_vendor_call c = {.coll = a->coll,
                                   .sendbuf = a->sendbuf,
                                   .recvbuf = a->recvbuf,
                                   .count = a->count,
                                   .dtype = (int)a->dtype,
                                   .op = (int)a->op,
                                   .root = a->root,
                                   .sendcounts = v->sendcounts,
                                   .sdispls = v->sdispls,
                                   .recvcounts = v->recvcounts,
                                   .rdispls = v->rdispls,
                                   .premul_factor = a->op == HC_PREMULSUM ? a->premul_factor : NULL};
  return hc_vendor_run(comm->vendor, comm->vendor_comm, comm->rank, comm->nranks, &c, st);
}

/* comm->active_calls, which CommAbort and the engine only read. Only the
 * thread that calls collectives on a comm writes it (NCCL's rule: one
 * thread at a time per comm), so plain stores do: a locked add is a full
 * fence, at which the root of a 2-rank 8-byte broadcast waited for the
 * descriptor it had just posted to reach the receiver (docs/perf.md). The
 * release orders every access to the comm before the count that lets an
 * abort free it. */
static void calls_enter(struct hetcclComm *comm) {
  int n = atomic_load_explicit(&comm->active_calls, memory_order_relaxed);
  atomic_store_explicit(&comm->active_calls, n + 1, memory_order_relaxed);
}

static void calls_leave(struct hetcclComm *comm) {
  int n = atomic_load_explicit(&comm->active_calls, memory_order_relaxed);
  atomic_store_explicit(&comm->active_calls, n - 1, memory_order_release);
}

/* A comm whose calls the calling thread runs itself on the host engine
 * (not a vendor's pass-through, not a GPU comm's proxy). */
static bool runs_on_host(const struct hetcclComm *comm) { return !comm->proxy && !comm->vendor_comm; }

/* A pass-through comm's calls of this group, in one vendor group. */
static hc_result_t group_submit_vendor(struct hetcclComm *comm) {
  HC_TRY(hc_vendor_group_start(comm->vendor, comm->vendor_comm));
  hc_result_t r = HC_OK;
  for (int i = 0; i < group_ncalls && r == HC_OK; i++)
    if (group_calls[i].comm == comm) r = vendor_call(comm, &group_calls[i].args, group_calls[i].stream);
  return hc_vendor_group_end(comm->vendor, comm->vendor_comm, r);
}

/* A GPU comm's calls of this group become one job of its proxy thread;
 * the caller's streams wait for it. */
static hc_result_t group_submit_gpu(struct hetcclComm *comm) {
  hc_result_t r = HC_OK;
  struct hc_coll_args *calls = NULL;
  hc_stream_t *streams = NULL;
  int ncalls = 0, nstreams = 0;
  HC_TRY_GOTO(hc_calloc(&calls, (size_t)group_ncalls, sizeof(*calls), "group calls"), r, out);
  HC_TRY_GOTO(hc_calloc(&streams, (size_t)group_ncalls, sizeof(*streams), "streams"), r, out);
  for (int i = 0; i < group_ncalls; i++) {
    if (group_calls[i].comm != comm) continue;
    int k = 0;
    while (k < nstreams && streams[k] != group_calls[i].stream) k++;
    if (k == nstreams) streams[nstreams++] = group_calls[i].stream;
    calls[ncalls++] = group_calls[i].args;
  }
  /* Counted, so that abort waits for it and the engine never aborts the
   * vendor sub-comm under it. */
  calls_enter(comm);
  r = hc_proxy_submit(comm->proxy, calls, ncalls, streams, nstreams);
  calls_leave(comm);
out:
  free(calls);
  free(streams);
  return r;
}

/* ---- the plan cache ----
 * A host comm keeps the plan of a call made alone (a group of one call),
 * and the next call with the same arguments runs it again: no planning,
 * staging or scratch allocation, which are most of the cost of a small
 * collective. With other buffers (applications and benchmarks rarely
 * reduce the same buffer twice in a row) the kept plan of an all-reduce,
 * all-gather, reduce-scatter, broadcast or reduce moves onto them, where
 * the two buffers lie as they did (apart, or overlapping by the same
 * offset): its steps' pointers into the old buffers are rebased, scratch
 * stays. A plan is kept only when
 * running it again does the same thing: no window steps (their piece
 * numbers run on across plans) and no all-to-all-v (its counts live outside
 * the arguments). */

/* Everything but the buffers. */
static bool same_shape(const struct hc_coll_args *a, const struct hc_coll_args *b) {
  return a->coll == b->coll && a->count == b->count && a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
         a->stage_send == b->stage_send &&
         (a->op != HC_PREMULSUM || !memcmp(a->premul_factor, b->premul_factor, sizeof(a->premul_factor)));
}

/* The bytes of sendbuf and recvbuf that rank's part of a call uses (0: a
 * buffer the rank ignores, as a broadcast's sendbuf off the root), for the
 * collectives whose extents the arguments say; false for the others (their
 * kept plan is reused only with the same buffers). */
static bool call_extents(const struct hc_coll_args *a, int nranks, int rank, uintptr_t *send_bytes,
                         uintptr_t *recv_bytes) {
  const uintptr_t bytes = a->count * hc_dtype_size(a->dtype);
  switch (a->coll) {
  case HC_COLL_ALLREDUCE: *send_bytes = *recv_bytes = bytes; break;
  case HC_COLL_ALLGATHER: *send_bytes = bytes, *recv_bytes = bytes * (uintptr_t)nranks; break;
  case HC_COLL_REDUCESCATTER: *send_bytes = bytes * (uintptr_t)nranks, *recv_bytes = bytes; break;
  case HC_COLL_BROADCAST: *send_bytes = rank == a->root ? bytes : 0, *recv_bytes = bytes; break;
  case HC_COLL_REDUCE: *send_bytes = bytes, *recv_bytes = rank == a->root ? bytes : 0; break;
  default: return false;
  }
  return bytes > 0 && (*send_bytes == 0 || a->sendbuf != NULL) && (*recv_bytes == 0 || a->recvbuf != NULL);
}

/* Where the kept call's buffers are, and where the new call's. */
struct rebase {
  uintptr_t old_send, old_recv, new_send, new_recv, send_bytes, recv_bytes;
};

/* Whether the kept plan of old can run b: the same shape, and b's buffers
 * lie as old's did (its steps then address them the same way). */
static bool rebase_fits(const struct hc_coll_args *old, const struct hc_coll_args *b, int nranks, int rank,
                        struct rebase *rb) {
  if (!same_shape(old, b) || !call_extents(b, nranks, rank, &rb->send_bytes, &rb->recv_bytes)) return false;
  *rb = (struct rebase){.old_send = (uintptr_t)old->sendbuf,
                        .old_recv = (uintptr_t)old->recvbuf,
                        .new_send = (uintptr_t)b->sendbuf,
                        .new_recv = (uintptr_t)b->recvbuf,
                        .send_bytes = rb->send_bytes,
                        .recv_bytes = rb->recv_bytes};
  const bool old_apart = !bytes_overlap(old->sendbuf, rb->send_bytes, old->recvbuf, rb->recv_bytes);
  const bool new_apart = !bytes_overlap(b->sendbuf, rb->send_bytes, b->recvbuf, rb->recv_bytes);
  if (old_apart || new_apart) return old_apart && new_apart;
  return rb->old_recv - rb->old_send == rb->new_recv - rb->new_send;
}

/* p's place in the new buffers, where it pointed into the old ones;
 * anything else stays: scratch, factors, and the ends of empty pieces
 * (nothing is read or written there, and an end may be another object's
 * start). */
static uintptr_t rebased(const struct rebase *rb, uintptr_t p) {
  if (p - rb->old_send < rb->send_bytes) return rb->new_send + (p - rb->old_send);
  if (p - rb->old_recv < rb->recv_bytes) return rb->new_recv + (p - rb->old_recv);
  return p;
}

static void plan_rebase(struct hc_plan *p, const struct rebase *rb) {
  for (int i = 0; i < p->nsteps; i++) {
    struct hc_step *s = &p->steps[i];
    s->dst = (void *)rebased(rb, (uintptr_t)s->dst);
    s->src0 = (const void *)rebased(rb, (uintptr_t)s->src0);
    s->src1 = (const void *)rebased(rb, (uintptr_t)s->src1);
  }
}

/* Whether comm's kept plan is, or becomes, the plan of a, a call made
 * alone. On a hit, its transfers take this call's signature (the seq moved
 * on; a peer whose own cache missed builds it afresh and compares). */
static bool plan_cache_hit(struct hetcclComm *comm, const struct hc_coll_args *a) {
  if (!comm->plan_kept || comm->plan.nsigs > 1) return false;
  const struct hc_coll_args *old = &comm->plan_call;
  struct rebase rb;
  if (old->sendbuf != a->sendbuf || old->recvbuf != a->recvbuf || !same_shape(old, a)) {
    if (!rebase_fits(old, a, comm->nranks, comm->rank, &rb)) return false;
    plan_rebase(&comm->plan, &rb);
    /* The rest is the same shape (rebase_fits); seq is never compared. */
    comm->plan_call.sendbuf = a->sendbuf;
    comm->plan_call.recvbuf = a->recvbuf;
  }
  if (comm->plan.nsigs == 1) hc_plan_sig_renumber(&comm->plan.sigs[0], a->seq);
  return true;
}

/* The plan and exec's tables of it go: the next call plans afresh. */
static void plan_drop(struct hetcclComm *comm) {
  hc_exec_memo_free(comm->plan_memo);
  comm->plan_memo = NULL;
  hc_plan_clear(&comm->plan);
  comm->plan_kept = false;
}

/* After the first run of a's fresh plan: keeps it for the next call where
 * running it again does the same thing, or frees it. */
static void plan_cache_keep_or_drop(struct hetcclComm *comm, const struct hc_coll_args *a) {
  bool keep = a->coll != HC_COLL_ALLTOALLV;
  for (int i = 0; keep && i < comm->plan.nsteps; i++)
    keep = comm->plan.steps[i].kind != HC_STEP_WAIT && comm->plan.steps[i].kind != HC_STEP_SIGNAL;
  comm->plan_kept = keep;
  if (keep) {
    comm->plan_call = *a;
    return;
  }
  plan_drop(comm);
}

/* A call alone on a host comm (made outside any group, or a group's only
 * call): its kept plan where it fits, else a fresh one, run now. Most
 * small collectives come this way, so it records nothing in the group. */
static hc_result_t host_call_run(struct hetcclComm *comm, const struct hc_coll_args *a) {
  struct hc_exec_job job = {.links = &comm->links, .plan = &comm->plan, .memo = &comm->plan_memo};
  hc_result_t r = HC_OK;
  calls_enter(comm);
  const bool hit = plan_cache_hit(comm, a);
  if (!hit) {
    plan_drop(comm);
    comm->plan.mem = comm->config.device_kind;
    r = hc_plan_add(&comm->plan, &comm->plan_ctx, a);
    if (r == HC_OK) r = hc_plan_stage(&comm->plan, &comm->plan_ctx, comm->stage_device);
  }
  if (r == HC_OK) r = hc_pull_choice_run(comm, a, &job);
  if (r != HC_OK) {
    hc_comm_fail(comm, r);
    plan_drop(comm);
  } else if (!hit) {
    plan_cache_keep_or_drop(comm, a);
  }
  calls_leave(comm);
  return r;
}

/* Builds one plan per comm (calls in the order made) and runs them all.
 * Only a call alone has its plan kept (host_call_run). */
static hc_result_t group_run(void) {
  hc_result_t r = HC_OK;
  struct hc_exec_job one_job, *jobs = &one_job; /* a group of one comm's calls allocates nothing */
  int njobs = 0;
  if (group_ncalls == 0) return HC_OK;
  struct hetcclComm *const first_comm = group_calls[0].comm;
  if (group_ncalls == 1 && runs_on_host(first_comm)) return host_call_run(first_comm, &group_calls[0].args);
  mark_staged_sends();
  if (group_ncalls > 1) HC_TRY_GOTO(hc_calloc(&jobs, (size_t)group_ncalls, sizeof(*jobs), "group jobs"), r, out);
  for (int i = 0; i < group_ncalls; i++) {
    struct hetcclComm *comm = group_calls[i].comm;
    if (!runs_on_host(comm)) {
      bool first = true;
      for (int k = 0; k < i && first; k++) first = group_calls[k].comm != comm;
      if (first) HC_TRY_GOTO(comm->vendor_comm ? group_submit_vendor(comm) : group_submit_gpu(comm), r, out);
      continue;
    }
    int j = 0;
    while (j < njobs && jobs[j].plan != &comm->plan) j++;
    if (j == njobs) {
      jobs[njobs++] = (struct hc_exec_job){.links = &comm->links, .plan = &comm->plan, .memo = &comm->plan_memo};
      calls_enter(comm);
      plan_drop(comm);
      comm->plan.mem = comm->config.device_kind;
    }
    HC_TRY_GOTO(hc_plan_add(&comm->plan, &comm->plan_ctx, &group_calls[i].args), r, out);
  }
  for (int j = 0; j < njobs; j++) {
    struct hetcclComm *comm = NULL;
    for (int i = 0; i < group_ncalls && comm == NULL; i++)
      if (&group_calls[i].comm->plan == jobs[j].plan) comm = group_calls[i].comm;
    HC_TRY_GOTO(hc_plan_stage(jobs[j].plan, &comm->plan_ctx, comm->stage_device), r, out);
  }
  r = hc_exec_run_blocking(jobs, njobs);
out:
  for (int j = 0; j < njobs; j++) {
    struct hetcclComm *comm = NULL;
    for (int i = 0; i < group_ncalls && comm == NULL; i++)
      if (&group_calls[i].comm->plan == jobs[j].plan) comm = group_calls[i].comm;
    if (r != HC_OK) hc_comm_fail(comm, r);
    plan_drop(comm);
    calls_leave(comm);
  }
  if (jobs != &one_job) free(jobs);
  return r;
}

static hc_result_t api_GroupStart(void) {
  group_depth++;
  return HC_OK;
}

static hc_result_t api_GroupEnd(void) {
  if (group_depth == 0) return HC_FAIL(HC_ERR_USAGE, "GroupEnd without a matching GroupStart");
  if (--group_depth > 0) return HC_OK;
  hc_result_t r = group_run();
  group_clear();
  return r;
}

hc_result_t hc_coll_enqueue(struct hetcclComm *comm, struct hc_coll_args *a, hc_stream_t stream, const char *fn) {
  hc_result_t async = (hc_result_t)atomic_load(&comm->async_error);
  if (async != HC_OK)
    return HC_FAIL(async, "%s: the communicator failed earlier and must be destroyed: %s", fn, comm->async_error_text);
  if (atomic_load(&comm->abort_flag)) return HC_FAIL(HC_ERR_USAGE, "%s: the communicator was aborted", fn);
  if (group_depth == 0 && runs_on_host(comm)) {
    a->seq = call_seq_take(comm, a->coll);
    return host_call_run(comm, a);
  }
  HC_TRY(api_GroupStart());
  hc_result_t r = group_record(comm, a, stream);
  if (r != HC_OK) {
    group_depth--;
    return r;
  }
  return api_GroupEnd();
}

/* ---- argument checks ---- */

static hc_result_t check_dtype(hetcclDataType_t t, const char *fn) {
  if ((unsigned)t >= (unsigned)hetcclNumTypes)
    return HC_FAIL(HC_ERR_ARG, "%s: datatype %d is not a hetcclDataType_t", fn, (int)t);
  return HC_OK;
}

/* Resolves op into args (builtin, or a PreMulSum made for this comm and
 * datatype). */
static hc_result_t resolve_op(struct hetcclComm *comm, hetcclRedOp_t op, hetcclDataType_t t, struct hc_coll_args *a,
                              const char *fn) {
  if ((unsigned)op < (unsigned)hetcclNumOps) {
    a->op = (enum hc_redop)op;
    return HC_OK;
  }
  unsigned idx = (unsigned)op - (unsigned)hetcclNumOps;
  if ((int)op < 0 || idx >= HC_MAX_PREMUL_OPS || !comm->premul[idx].in_use)
    return HC_FAIL(HC_ERR_ARG, "%s: op %d is neither a built-in op nor a live PreMulSum op of this comm", fn, (int)op);
  const struct hc_premul_op *pm = &comm->premul[idx];
  if (pm->dtype != (enum hc_dtype)t)
    return HC_FAIL(HC_ERR_ARG, "%s: op %d was made for datatype %s, not %s", fn, (int)op, hc_dtype_name(pm->dtype),
                   hc_dtype_name((enum hc_dtype)t));
  a->op = HC_PREMULSUM;
  size_t es = hc_dtype_size(pm->dtype);
  if (pm->residence == hetcclScalarHostImmediate) {
    memcpy(a->premul_factor, pm->factor, es);
    return HC_OK;
  }
  struct hc_ptr_info where;
  HC_TRY(hc_dev_ptr_query(pm->factor_ptr, &where));
  if (where.kind == HC_MEM_HOST) {
    memcpy(a->premul_factor, pm->factor_ptr, es);
    return HC_OK;
  }
  /* A device-resident factor is read when the call is made, not when it
   * runs on the stream: enough for factors that stay put, as DDP's do. */
  const struct hc_dev_ops *dev = hc_dev_get(where.kind);
  HC_TRY(hc_dev_copy(dev, a->premul_factor, pm->factor_ptr, es, NULL));
  return hc_dev_stream_sync(dev, NULL);
}

static hc_result_t check_rank(const struct hetcclComm *comm, int r, const char *what, const char *fn) {
  if (r < 0 || r >= comm->nranks) return HC_FAIL(HC_ERR_ARG, "%s: %s %d is not in [0, %d)", fn, what, r, comm->nranks);
  return HC_OK;
}

static hc_result_t check_buf(const void *p, size_t count, const char *what, const char *fn) {
  if (p == NULL && count > 0) return HC_FAIL(HC_ERR_ARG, "%s: %s is NULL with count %zu", fn, what, count);
  return HC_OK;
}

/* count * esize * factor must fit a size_t (checked without a division:
 * every call makes this check). */
static hc_result_t check_size(size_t count, hetcclDataType_t t, int factor, const char *fn) {
  size_t bytes;
  if (__builtin_mul_overflow(count, hc_dtype_size((enum hc_dtype)t), &bytes) ||
      __builtin_mul_overflow(bytes, (size_t)factor, &bytes))
    return HC_FAIL(HC_ERR_ARG, "%s: count %zu of %s overflows the address space", fn, count,
                   hc_dtype_name((enum hc_dtype)t));
  return HC_OK;
}

/*
 * fp8 is the one datatype whose bytes mean different numbers on different
 * devices (OCP on NVIDIA GPUs, CPUs and in hetccl's kernels; fnuz on AMD
 * gfx94x). Refused, never mixed: every rank decides from the same peer
 * table, so all ranks refuse the same call and none waits for the others.
 *  - ranks that hold different encodings: any fp8 call (even a copy would
 *    hand one rank numbers it reads differently);
 *  - a pass-through comm whose vendor library predates fp8;
 *  - a reduction by hetccl's own kernels (not the vendor's) of fnuz data:
 *    they implement the OCP encodings only.
 */
static hc_result_t check_fp8(const struct hetcclComm *comm, const struct hc_coll_args *a, const char *fn) {
  if (a->dtype != HC_FP8_E4M3 && a->dtype != HC_FP8_E5M2) return HC_OK;
  const char *t = hc_dtype_name(a->dtype);
  if (comm->fp8_odd_rank >= 0) {
    int odd = comm->fp8_odd_rank;
    return HC_FAIL(HC_ERR_ARG,
                   "%s: %s on a comm whose ranks hold different fp8 encodings: rank 0 %s, rank %d %s "
                   "(HETCCL_FP8_LAYOUT, or the device: AMD gfx94x is fnuz); convert to one encoding first, or move "
                   "the bytes as uint8 without reducing",
                   fn, t, hc_fp8_layout_name(comm->peers[0].fp8_layout), odd,
                   hc_fp8_layout_name(comm->peers[odd].fp8_layout));
  }
  if (comm->vendor_comm != NULL) {
    if (!comm->vendor->has_fp8)
      return HC_FAIL(HC_ERR_ARG, "%s: %s: %s %d (%s) has no fp8 datatypes", fn, t, comm->vendor->name,
                     comm->vendor->version, comm->vendor->path);
    return HC_OK;
  }
  if (hc_coll_reduces(a->coll) && comm->peers[0].fp8_layout == HC_FP8_FNUZ)
    return HC_FAIL(HC_ERR_ARG,
                   "%s: %s reduction of fnuz data (every rank holds e4m3fnuz / e5m2fnuz): hetccl's "
                   "own kernels reduce the OCP encodings only; convert first",
                   fn, t);
  return HC_OK;
}

/* Who must pass a buffer (non-NULL when it holds elements). */
enum buf_rule { BUF_UNUSED, BUF_EVERY_RANK, BUF_ROOT_ONLY };

/* The argument rules of each collective, checked once per call by
 * check_call. The op is checked where hc_coll_reduces says the collective
 * combines; root names what the root argument is (NULL: none). */
static const struct coll_rule {
  enum buf_rule send, recv;
  const char *root;
} coll_rules[HC_COLL_COUNT] = {
    [HC_COLL_ALLREDUCE] = {BUF_EVERY_RANK, BUF_EVERY_RANK, NULL},
    [HC_COLL_BROADCAST] = {BUF_ROOT_ONLY, BUF_EVERY_RANK, "root"},
    [HC_COLL_REDUCE] = {BUF_EVERY_RANK, BUF_ROOT_ONLY, "root"},
    [HC_COLL_ALLGATHER] = {BUF_EVERY_RANK, BUF_EVERY_RANK, NULL},
    [HC_COLL_REDUCESCATTER] = {BUF_EVERY_RANK, BUF_EVERY_RANK, NULL},
    [HC_COLL_ALLTOALL] = {BUF_EVERY_RANK, BUF_EVERY_RANK, NULL},
    [HC_COLL_ALLTOALLV] = {BUF_EVERY_RANK, BUF_EVERY_RANK, NULL},
    [HC_COLL_GATHER] = {BUF_EVERY_RANK, BUF_ROOT_ONLY, "root"},
    [HC_COLL_SCATTER] = {BUF_ROOT_ONLY, BUF_EVERY_RANK, "root"},
    [HC_COLL_SEND] = {BUF_EVERY_RANK, BUF_UNUSED, "peer"},
    [HC_COLL_RECV] = {BUF_UNUSED, BUF_EVERY_RANK, "peer"},
};

static hc_result_t check_buf_rule(const struct hetcclComm *comm, const struct hc_coll_args *a, enum buf_rule rule,
                                  const void *p, size_t count, const char *what, const char *fn) {
  if (rule == BUF_UNUSED || (rule == BUF_ROOT_ONLY && comm->rank != a->root)) return HC_OK;
  return check_buf(p, count, what, fn);
}

/* All-to-all-v's arrays; *send_any / *recv_any: whether any count is not 0. */
static hc_result_t check_v_arrays(const struct hetcclComm *comm, const struct hc_coll_args *a, bool *send_any,
                                  bool *recv_any) {
  const char *fn = hc_coll_name(a->coll);
  const struct hc_alltoallv_args *v = a->v;
  if (!v->sendcounts || !v->sdispls || !v->recvcounts || !v->rdispls)
    return HC_FAIL(HC_ERR_ARG, "%s: a count or displacement array is NULL", fn);
  for (int i = 0; i < comm->nranks; i++) {
    HC_TRY(check_size(v->sendcounts[i], (hetcclDataType_t)a->dtype, 1, fn));
    HC_TRY(check_size(v->recvcounts[i], (hetcclDataType_t)a->dtype, 1, fn));
    *send_any |= v->sendcounts[i] != 0;
    *recv_any |= v->recvcounts[i] != 0;
  }
  if (v->sendcounts[comm->rank] != v->recvcounts[comm->rank])
    return HC_FAIL(HC_ERR_ARG, "%s: rank %d sends %zu elements to itself but expects %zu", fn, comm->rank,
                   v->sendcounts[comm->rank], v->recvcounts[comm->rank]);
  return HC_OK;
}

/* Every argument check of a collective call, once, from coll_rules; fills
 * a's op from the caller's op where the collective combines. */
static hc_result_t check_call(struct hetcclComm *comm, struct hc_coll_args *a, hetcclRedOp_t op, const char *fn) {
  const struct coll_rule *rule = &coll_rules[a->coll];
  HC_TRY(hc_comm_check(comm, fn));
  HC_TRY(check_dtype((hetcclDataType_t)a->dtype, fn));
  if (hc_coll_reduces(a->coll)) HC_TRY(resolve_op(comm, op, (hetcclDataType_t)a->dtype, a, fn));
  if (rule->root) HC_TRY(check_rank(comm, a->root, rule->root, fn));
  size_t send_count = a->count, recv_count = a->count;
  if (a->coll == HC_COLL_ALLTOALLV) {
    bool send_any = false, recv_any = false;
    HC_TRY(check_v_arrays(comm, a, &send_any, &recv_any));
    send_count = send_any, recv_count = recv_any;
  }
  HC_TRY(check_buf_rule(comm, a, rule->send, a->sendbuf, send_count, "sendbuff", fn));
  HC_TRY(check_buf_rule(comm, a, rule->recv, a->recvbuf, recv_count, "recvbuff", fn));
  HC_TRY(check_size(a->count, (hetcclDataType_t)a->dtype, comm->nranks, fn));
  return check_fp8(comm, a, fn);
}

/* A collective call: checked, then recorded in the group or run. */
static hetcclResult_t coll_call(hetcclComm_t comm, struct hc_coll_args *a, hetcclRedOp_t op, hetcclStream_t stream) {
  const char *fn = hc_coll_name(a->coll);
  hc_result_t r = check_call(comm, a, op, fn);
  if (r == HC_OK) r = hc_coll_enqueue(comm, a, stream, fn);
  return (hetcclResult_t)r;
}

/* Every collective but all-to-all-v; op is read where it combines, root
 * where it has a root or peer. */
static hetcclResult_t buffers_call(enum hc_coll coll, const void *sendbuff, void *recvbuff, size_t count,
                                   hetcclDataType_t datatype, hetcclRedOp_t op, int root, hetcclComm_t comm,
                                   hetcclStream_t stream) {
  struct hc_coll_args a = {.coll = coll,
                           .sendbuf = sendbuff,
                           .recvbuf = recvbuff,
                           .count = count,
                           .dtype = (enum hc_dtype)datatype,
                           .root = root};
  return coll_call(comm, &a, op, stream);
}

/* ---- collectives ---- */

/* The op or root of a collective that has none: never read. */
#define NO_OP hetcclSum
#define NO_ROOT 0

HC_EXPORT hetcclResult_t hetcclAllReduce(const void *sendbuff, void *recvbuff, size_t count, hetcclDataType_t datatype,
                                         hetcclRedOp_t op, hetcclComm_t comm, hetcclStream_t stream) {
  return buffers_call(HC_COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, NO_ROOT, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclBroadcast(const void *sendbuff, void *recvbuff, size_t count, hetcclDataType_t datatype,
                                         int root, hetcclComm_t comm, hetcclStream_t stream) {
  return buffers_call(HC_COLL_BROADCAST, sendbuff, recvbuff, count, datatype, NO_OP, root, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                         hetcclDataType_t datatype, hetcclComm_t comm, hetcclStream_t stream) {
  return buffers_call(HC_COLL_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, NO_OP, NO_ROOT, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclReduce(const void *sendbuff, void *recvbuff, size_t count, hetcclDataType_t datatype,
                                      hetcclRedOp_t op, int root, hetcclComm_t comm, hetcclStream_t stream) {
  return buffers_call(HC_COLL_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclAlltoAllv(const void *sendbuff, const size_t sendcounts[], const size_t sdispls[],
                                         void *recvbuff, const size_t recvcounts[], const size_t rdispls[],
                                         hetcclDataType_t datatype, hetcclComm_t comm, hetcclStream_t stream) {
  const struct hc_alltoallv_args v = {
      .sendcounts = sendcounts, .sdispls = sdispls, .recvcounts = recvcounts, .rdispls = rdispls};
  struct hc_coll_args a = {
      .coll = HC_COLL_ALLTOALLV, .sendbuf = sendbuff, .recvbuf = recvbuff, .dtype = (enum hc_dtype)datatype, .v = &v};
  return coll_call(comm, &a, NO_OP, stream);
}
HC_EXPORT hetcclResult_t hetcclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                             hetcclDataType_t datatype, hetcclRedOp_t op, hetcclComm_t comm,
                                             hetcclStream_t stream) {
  return buffers_call(HC_COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, NO_ROOT, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclGather(const void *sendbuff, void *recvbuff, size_t count, hetcclDataType_t datatype,
                                      int root, hetcclComm_t comm, hetcclStream_t stream) {
  return buffers_call(HC_COLL_GATHER, sendbuff, recvbuff, count, datatype, NO_OP, root, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, hetcclDataType_t datatype,
                                        hetcclComm_t comm, hetcclStream_t stream) {
  return buffers_call(HC_COLL_ALLTOALL, sendbuff, recvbuff, count, datatype, NO_OP, NO_ROOT, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclSend(const void *sendbuff, size_t count, hetcclDataType_t datatype, int peer,
                                    hetcclComm_t comm, hetcclStream_t stream) {
  return buffers_call(HC_COLL_SEND, sendbuff, NULL, count, datatype, NO_OP, peer, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclScatter(const void *sendbuff, void *recvbuff, size_t count, hetcclDataType_t datatype,
                                       int root, hetcclComm_t comm, hetcclStream_t stream) {
  return buffers_call(HC_COLL_SCATTER, sendbuff, recvbuff, count, datatype, NO_OP, root, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclRecv(void *recvbuff, size_t count, hetcclDataType_t datatype, int peer,
                                    hetcclComm_t comm, hetcclStream_t stream) {
  return buffers_call(HC_COLL_RECV, NULL, recvbuff, count, datatype, NO_OP, peer, comm, stream);
}

/* Blocks the calling thread until every rank has entered; it orders
 * nothing on the stream. A host comm runs it as an all-reduce of one byte
 * (as PyTorch's barrier is one of one element), which for a flat CPU comm
 * is the one-step exchange: every rank posts a byte to every peer at once
 * and leaves when it has one from each (on shm, one inline descriptor each
 * way per pair, no round over the bootstrap's TCP ring). Any all-reduce is
 * a barrier: every rank's result depends on every rank's input. Comms
 * with a GPU rank, whose collectives run on streams, keep the bootstrap
 * ring (all ranks decide alike, from the peers' records). */
static hc_result_t api_Barrier(hetcclComm_t comm, hetcclStream_t stream) {
  (void)stream;
  HC_TRY(hc_comm_check(comm, "Barrier"));
  if (group_depth > 0) return HC_FAIL(HC_ERR_USAGE, "Barrier: not allowed inside a group");
  bool all_host = true; /* the same answer on every rank: the all-gathered records */
  for (int i = 0; i < comm->nranks; i++) all_host &= comm->peers[i].device_kind == HC_MEM_HOST;
  if (all_host) {
    struct hc_coll_args a = {.coll = HC_COLL_ALLREDUCE,
                             .sendbuf = &comm->barrier_byte,
                             .recvbuf = &comm->barrier_byte,
                             .count = 1,
                             .dtype = HC_UINT8,
                             .op = HC_MAX};
    return hc_coll_enqueue(comm, &a, NULL, "Barrier");
  }
  if (comm->boot == NULL)
    return HC_FAIL(HC_ERR_USAGE, "Barrier: the communicator failed earlier and must be destroyed: %s",
                   comm->async_error_text);
  hc_result_t r = hc_bootstrap_barrier(comm->boot);
  if (r != HC_OK) hc_comm_fail(comm, r);
  return r;
}

/* ---- PreMulSum ---- */

static hc_result_t api_RedOpCreatePreMulSum(hetcclRedOp_t *op, void *scalar, hetcclDataType_t datatype,
                                            hetcclScalarResidence_t residence, hetcclComm_t comm) {
  const char *fn = "RedOpCreatePreMulSum";
  HC_TRY(hc_comm_check(comm, fn));
  HC_TRY(check_dtype(datatype, fn));
  if (op == NULL || scalar == NULL) return HC_FAIL(HC_ERR_ARG, "%s: op or scalar is NULL", fn);
  if (residence != hetcclScalarDevice && residence != hetcclScalarHostImmediate)
    return HC_FAIL(HC_ERR_ARG, "%s: residence %d is not a hetcclScalarResidence_t", fn, (int)residence);
  for (int i = 0; i < HC_MAX_PREMUL_OPS; i++) {
    struct hc_premul_op *pm = &comm->premul[i];
    if (pm->in_use) continue;
    *pm = (struct hc_premul_op){
        .in_use = true, .dtype = (enum hc_dtype)datatype, .residence = residence, .factor_ptr = scalar};
    if (residence == hetcclScalarHostImmediate) memcpy(pm->factor, scalar, hc_dtype_size(pm->dtype));
    *op = (hetcclRedOp_t)(hetcclNumOps + i);
    return HC_OK;
  }
  return HC_FAIL(HC_ERR_USAGE, "%s: all %d PreMulSum ops of this comm are in use; destroy some", fn, HC_MAX_PREMUL_OPS);
}

static hc_result_t api_RedOpDestroy(hetcclRedOp_t op, hetcclComm_t comm) {
  const char *fn = "RedOpDestroy";
  HC_TRY(hc_comm_check(comm, fn));
  unsigned idx = (unsigned)op - (unsigned)hetcclNumOps;
  if ((int)op < (int)hetcclNumOps || idx >= HC_MAX_PREMUL_OPS || !comm->premul[idx].in_use)
    return HC_FAIL(HC_ERR_ARG, "%s: op %d is not a live PreMulSum op of this comm", fn, (int)op);
  comm->premul[idx].in_use = false;
  return HC_OK;
}

/* ---- exports ---- */

HC_EXPORT hetcclResult_t hetcclGroupStart(void) { return (hetcclResult_t)api_GroupStart(); }
HC_EXPORT hetcclResult_t hetcclGroupEnd(void) { return (hetcclResult_t)api_GroupEnd(); }

HC_EXPORT hetcclResult_t hetcclBarrier(hetcclComm_t comm, hetcclStream_t stream) {
  return (hetcclResult_t)api_Barrier(comm, stream);
}
HC_EXPORT hetcclResult_t hetcclRedOpCreatePreMulSum(hetcclRedOp_t *op, void *scalar, hetcclDataType_t datatype,
                                                    hetcclScalarResidence_t residence, hetcclComm_t comm) {
  return (hetcclResult_t)api_RedOpCreatePreMulSum(op, scalar, datatype, residence, comm);
}
HC_EXPORT hetcclResult_t hetcclRedOpDestroy(hetcclRedOp_t op, hetcclComm_t comm) {
  return (hetcclResult_t)api_RedOpDestroy(op, comm);
}
