/*
 * Collectives, point-to-point and groups: argument checks as NCCL makes
 * them, then one path for everything: a call is recorded in the calling
 * thread's group (a call outside any group is a group of one), and
 * hetcclGroupEnd builds one plan per comm and runs them together.
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
  size_t *v_arrays; /* alltoallv: our copy of the four arrays */
  hc_stream_t stream;
};

static _Thread_local int group_depth;
static _Thread_local struct group_call *group_calls;
static _Thread_local int group_ncalls, group_cap;

static void group_clear(void) {
  for (int i = 0; i < group_ncalls; i++) free(group_calls[i].v_arrays);
  free(group_calls);
  group_calls = NULL;
  group_ncalls = group_cap = 0;
}

static hc_result_t group_record(struct hetcclComm *comm, const struct hc_coll_args *a, hc_stream_t stream) {
  if (group_ncalls == group_cap) {
    int cap = group_cap ? group_cap * 2 : 8;
    struct group_call *calls = realloc(group_calls, (size_t)cap * sizeof(*calls));
    if (calls == NULL) return HC_FAIL(HC_ERR_SYSTEM, "group: out of host memory for %d calls", cap);
    group_calls = calls;
    group_cap = cap;
  }
  struct group_call *c = &group_calls[group_ncalls];
  *c = (struct group_call){.comm = comm, .args = *a, .stream = stream};
  /* Numbered when made, so a group's calls keep the order of the calls. */
  c->args.seq = comm->coll_seq;
  if (a->coll != HC_COLL_SEND && a->coll != HC_COLL_RECV) comm->coll_seq++;
  if (a->coll == HC_COLL_ALLTOALLV) {
    /* The caller may reuse its arrays before GroupEnd. */
    HC_TRY(hc_calloc(&c->v_arrays, 4 * (size_t)comm->nranks, sizeof(size_t), "alltoallv counts"));
    hc_coll_args_keep_counts(&c->args, comm->nranks, c->v_arrays);
  }
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

static hc_result_t vendor_check(const struct hetcclComm *comm, int vr, const char *what) {
  return hc_vendor_check(comm->vendor, comm->vendor_comm, vr, what);
}

/* One call on a pass-through comm, as the vendor's own calls: all-to-all
 * and all-to-all-v with the library's own functions where it has them
 * (RCCL, NCCL >= 2.28 for all-to-all) and the buffers are distinct; those
 * and gather, scatter otherwise as grouped send/recv. */
static hc_result_t vendor_call(struct hetcclComm *comm, const struct hc_coll_args *a, hc_stream_t st) {
  const struct hc_vendor *v = comm->vendor;
  void *vc = comm->vendor_comm;
  const int n = comm->nranks, me = comm->rank, t = (int)a->dtype;
  const size_t es = hc_dtype_size(a->dtype);
  int op = (int)a->op, vr = 0;
  if (a->op == HC_PREMULSUM) {
    uint8_t factor[8];
    memcpy(factor, a->premul_factor, sizeof(factor));
    HC_TRY(vendor_check(comm, v->red_op_create_pre_mul_sum(&op, factor, t, hetcclScalarHostImmediate, vc),
                        "RedOpCreatePreMulSum"));
  }
  switch (a->coll) {
  case HC_COLL_ALLREDUCE: vr = v->all_reduce(a->sendbuf, a->recvbuf, a->count, t, op, vc, st); break;
  case HC_COLL_BROADCAST: vr = v->broadcast(a->sendbuf, a->recvbuf, a->count, t, a->root, vc, st); break;
  case HC_COLL_REDUCE: vr = v->reduce(a->sendbuf, a->recvbuf, a->count, t, op, a->root, vc, st); break;
  case HC_COLL_ALLGATHER: vr = v->all_gather(a->sendbuf, a->recvbuf, a->count, t, vc, st); break;
  case HC_COLL_REDUCESCATTER: vr = v->reduce_scatter(a->sendbuf, a->recvbuf, a->count, t, op, vc, st); break;
  case HC_COLL_SEND: vr = v->send(a->sendbuf, a->count, t, a->root, vc, st); break;
  case HC_COLL_RECV: vr = v->recv(a->recvbuf, a->count, t, a->root, vc, st); break;
  case HC_COLL_ALLTOALL:
  case HC_COLL_ALLTOALLV:
    if (a->coll == HC_COLL_ALLTOALL && v->all_to_all != NULL && a->sendbuf != a->recvbuf) {
      vr = v->all_to_all(a->sendbuf, a->recvbuf, a->count, t, vc, st);
      break;
    }
    if (a->coll == HC_COLL_ALLTOALLV && v->all_to_allv != NULL && a->sendbuf != a->recvbuf) {
      vr = v->all_to_allv(a->sendbuf, a->sendcounts, a->sdispls, a->recvbuf, a->recvcounts, a->rdispls, t, vc, st);
      break;
    }
    for (int p = 0; p < n && vr == 0; p++) {
      bool eq = a->coll == HC_COLL_ALLTOALL;
      size_t sc = eq ? a->count : a->sendcounts[p], sd = eq ? a->count * (size_t)p : a->sdispls[p];
      size_t rc = eq ? a->count : a->recvcounts[p], rd = eq ? a->count * (size_t)p : a->rdispls[p];
      vr = v->send((const char *)a->sendbuf + sd * es, sc, t, p, vc, st);
      if (vr == 0) vr = v->recv((char *)a->recvbuf + rd * es, rc, t, p, vc, st);
    }
    break;
  case HC_COLL_GATHER:
    vr = v->send(a->sendbuf, a->count, t, a->root, vc, st);
    for (int p = 0; p < n && vr == 0 && me == a->root; p++)
      vr = v->recv((char *)a->recvbuf + (size_t)p * a->count * es, a->count, t, p, vc, st);
    break;
  case HC_COLL_SCATTER:
    for (int p = 0; p < n && vr == 0 && me == a->root; p++)
      vr = v->send((const char *)a->sendbuf + (size_t)p * a->count * es, a->count, t, p, vc, st);
    if (vr == 0) vr = v->recv(a->recvbuf, a->count, t, a->root, vc, st);
    break;
  default: break;
  }
  if (a->op == HC_PREMULSUM) v->red_op_destroy(op, vc);
  return vendor_check(comm, vr, hc_coll_name(a->coll));
}

/* A pass-through comm's calls of this group, in one vendor group. */
static hc_result_t group_submit_vendor(struct hetcclComm *comm) {
  hc_result_t r = vendor_check(comm, comm->vendor->group_start(), "GroupStart");
  for (int i = 0; i < group_ncalls && r == HC_OK; i++)
    if (group_calls[i].comm == comm) r = vendor_call(comm, &group_calls[i].args, group_calls[i].stream);
  hc_result_t end = vendor_check(comm, comm->vendor->group_end(), "GroupEnd");
  return r != HC_OK ? r : end;
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
  atomic_fetch_add(&comm->active_calls, 1);
  r = hc_proxy_submit(comm->proxy, calls, ncalls, streams, nstreams);
  atomic_fetch_sub(&comm->active_calls, 1);
out:
  free(calls);
  free(streams);
  return r;
}

/* ---- the plan cache ----
 * A host comm keeps the plan of a call made alone (a group of one call),
 * and the next call with the same arguments and buffers runs it again: no
 * planning, staging or scratch allocation, which are most of the cost of a
 * small collective. A plan is kept only when running it again does the
 * same thing: no window steps (their piece numbers run on across plans)
 * and no all-to-all-v (its counts live outside the arguments). */

static bool same_call(const struct hc_coll_args *a, const struct hc_coll_args *b) {
  return a->coll == b->coll && a->sendbuf == b->sendbuf && a->recvbuf == b->recvbuf && a->count == b->count &&
         a->dtype == b->dtype && a->op == b->op && a->root == b->root && a->stage_send == b->stage_send &&
         (a->op != HC_PREMULSUM || !memcmp(a->premul_factor, b->premul_factor, sizeof(a->premul_factor)));
}

/* Whether comm's plan already is the plan of the group's one call. On a
 * hit, its transfers take this call's signature (the seq moved on; a peer
 * whose own cache missed builds it afresh and compares). */
static bool plan_cache_hit(struct hetcclComm *comm) {
  const struct hc_coll_args *a = &group_calls[0].args;
  if (group_ncalls != 1 || !comm->plan_kept || !same_call(&comm->plan_call, a) || comm->plan.nsigs > 1) return false;
  if (comm->plan.nsigs == 1) comm->plan.sigs[0] = hc_plan_sig(a, comm->plan_ctx.rank);
  return true;
}

/* After a run: keeps the plan for the next call, or frees it. */
static void plan_cache_keep_or_reset(struct hetcclComm *comm, hc_result_t r) {
  bool keep = r == HC_OK && group_ncalls == 1 && group_calls[0].args.coll != HC_COLL_ALLTOALLV;
  for (int i = 0; keep && i < comm->plan.nsteps; i++)
    keep = comm->plan.steps[i].kind != HC_STEP_WAIT && comm->plan.steps[i].kind != HC_STEP_SIGNAL;
  comm->plan_kept = keep;
  if (keep) comm->plan_call = group_calls[0].args;
  else hc_plan_reset(&comm->plan);
}

/* Builds one plan per comm (calls in the order made) and runs them all. */
static hc_result_t group_run(void) {
  hc_result_t r = HC_OK;
  struct hc_exec_job *jobs = NULL;
  int njobs = 0;
  if (group_ncalls == 0) return HC_OK;
  mark_staged_sends();
  HC_TRY_GOTO(hc_calloc(&jobs, (size_t)group_ncalls, sizeof(*jobs), "group jobs"), r, out);
  for (int i = 0; i < group_ncalls; i++) {
    struct hetcclComm *comm = group_calls[i].comm;
    if (comm->proxy || comm->vendor_comm) {
      bool first = true;
      for (int k = 0; k < i && first; k++) first = group_calls[k].comm != comm;
      if (first) HC_TRY_GOTO(comm->vendor_comm ? group_submit_vendor(comm) : group_submit_gpu(comm), r, out);
      continue;
    }
    int j = 0;
    while (j < njobs && jobs[j].plan != &comm->plan) j++;
    if (j == njobs) {
      jobs[njobs++] = (struct hc_exec_job){.links = &comm->links, .plan = &comm->plan};
      atomic_fetch_add(&comm->active_calls, 1);
      if (plan_cache_hit(comm)) continue;
      if (comm->plan_kept) hc_plan_reset(&comm->plan);
      comm->plan_kept = false;
      comm->plan.mem = comm->config.device_kind;
    }
    HC_TRY_GOTO(hc_plan_add(&comm->plan, &comm->plan_ctx, &group_calls[i].args), r, out);
  }
  for (int j = 0; j < njobs; j++) {
    struct hetcclComm *comm = NULL;
    for (int i = 0; i < group_ncalls && comm == NULL; i++)
      if (&group_calls[i].comm->plan == jobs[j].plan) comm = group_calls[i].comm;
    if (!comm->plan_kept) HC_TRY_GOTO(hc_plan_stage(jobs[j].plan, &comm->plan_ctx, false), r, out);
  }
  r = hc_exec_run_blocking(jobs, njobs, hc_deadline_ns());
out:
  for (int j = 0; j < njobs; j++) {
    struct hetcclComm *comm = NULL;
    for (int i = 0; i < group_ncalls && comm == NULL; i++)
      if (&group_calls[i].comm->plan == jobs[j].plan) comm = group_calls[i].comm;
    if (r != HC_OK) hc_comm_fail(comm, r);
    plan_cache_keep_or_reset(comm, r);
    atomic_fetch_sub(&comm->active_calls, 1);
  }
  free(jobs);
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

hc_result_t hc_coll_enqueue(struct hetcclComm *comm, const struct hc_coll_args *a, hc_stream_t stream,
                            const char *fn) {
  hc_result_t async = (hc_result_t)atomic_load(&comm->async_error);
  if (async != HC_OK)
    return HC_FAIL(async, "%s: the communicator failed earlier and must be destroyed: %s", fn,
                   comm->async_error_text);
  if (atomic_load(&comm->abort_flag)) return HC_FAIL(HC_ERR_USAGE, "%s: the communicator was aborted", fn);
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
static hc_result_t resolve_op(struct hetcclComm *comm, hetcclRedOp_t op, hetcclDataType_t t,
                              struct hc_coll_args *a, const char *fn) {
  if ((unsigned)op < (unsigned)hetcclNumOps) {
    a->op = (enum hc_redop)op;
    return HC_OK;
  }
  unsigned idx = (unsigned)op - (unsigned)hetcclNumOps;
  if ((int)op < 0 || idx >= HC_MAX_PREMUL_OPS || !comm->premul[idx].in_use)
    return HC_FAIL(HC_ERR_ARG, "%s: op %d is neither a built-in op nor a live PreMulSum op of this comm", fn, (int)op);
  const struct hc_premul_op *pm = &comm->premul[idx];
  if (pm->dtype != (enum hc_dtype)t)
    return HC_FAIL(HC_ERR_ARG, "%s: op %d was made for datatype %s, not %s", fn, (int)op,
                   hc_dtype_name(pm->dtype), hc_dtype_name((enum hc_dtype)t));
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
  HC_TRY(dev->copy(a->premul_factor, pm->factor_ptr, es, NULL));
  return dev->stream_sync(NULL);
}

static hc_result_t check_rank(const struct hetcclComm *comm, int r, const char *what, const char *fn) {
  if (r < 0 || r >= comm->nranks)
    return HC_FAIL(HC_ERR_ARG, "%s: %s %d is not in [0, %d)", fn, what, r, comm->nranks);
  return HC_OK;
}

static hc_result_t check_buf(const void *p, size_t count, const char *what, const char *fn) {
  if (p == NULL && count > 0) return HC_FAIL(HC_ERR_ARG, "%s: %s is NULL with count %zu", fn, what, count);
  return HC_OK;
}

/* count * esize * factor must fit a size_t. */
static hc_result_t check_size(size_t count, hetcclDataType_t t, int factor, const char *fn) {
  size_t es = hc_dtype_size((enum hc_dtype)t);
  if (count > SIZE_MAX / es / (size_t)factor)
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
    return HC_FAIL(HC_ERR_ARG, "%s: %s on a comm whose ranks hold different fp8 encodings: rank 0 %s, rank %d %s "
                   "(HETCCL_FP8_LAYOUT, or the device: AMD gfx94x is fnuz); convert to one encoding first, or move "
                   "the bytes as uint8 without reducing", fn, t, hc_fp8_layout_name(comm->peers[0].fp8_layout), odd,
                   hc_fp8_layout_name(comm->peers[odd].fp8_layout));
  }
  if (comm->vendor_comm != NULL) {
    if (!comm->vendor->has_fp8)
      return HC_FAIL(HC_ERR_ARG, "%s: %s: %s %d (%s) has no fp8 datatypes", fn, t, comm->vendor->name,
                     comm->vendor->version, comm->vendor->path);
    return HC_OK;
  }
  if (hc_coll_reduces(a->coll) && comm->peers[0].fp8_layout == HC_FP8_FNUZ)
    return HC_FAIL(HC_ERR_ARG, "%s: %s reduction of fnuz data (every rank holds e4m3fnuz / e5m2fnuz): hetccl's "
                   "own kernels reduce the OCP encodings only; convert first", fn, t);
  return HC_OK;
}

/* Checks shared by every call; then records or runs it. */
static hc_result_t submit(struct hetcclComm *comm, struct hc_coll_args *a, hetcclStream_t stream,
                          const char *fn) {
  HC_TRY(hc_comm_check(comm, fn));
  HC_TRY(check_dtype((hetcclDataType_t)a->dtype, fn));
  HC_TRY(check_fp8(comm, a, fn));
  HC_TRY(check_size(a->count, (hetcclDataType_t)a->dtype, comm->nranks, fn));
  return hc_coll_enqueue(comm, a, stream, fn);
}

/* ---- collectives ---- */

static hc_result_t api_AllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                 hetcclDataType_t datatype, hetcclRedOp_t op, hetcclComm_t comm,
                               hetcclStream_t stream) {
  const char *fn = "AllReduce";
  struct hc_coll_args a = {.coll = HC_COLL_ALLREDUCE, .sendbuf = sendbuff, .recvbuf = recvbuff,
                           .count = count, .dtype = (enum hc_dtype)datatype};
  HC_TRY(hc_comm_check(comm, fn));
  HC_TRY(check_dtype(datatype, fn));
  HC_TRY(resolve_op(comm, op, datatype, &a, fn));
  HC_TRY(check_buf(sendbuff, count, "sendbuff", fn));
  HC_TRY(check_buf(recvbuff, count, "recvbuff", fn));
  return submit(comm, &a, stream, fn);
}

static hc_result_t api_Broadcast(const void *sendbuff, void *recvbuff, size_t count,
                                 hetcclDataType_t datatype, int root, hetcclComm_t comm,
                               hetcclStream_t stream) {
  const char *fn = "Broadcast";
  struct hc_coll_args a = {.coll = HC_COLL_BROADCAST, .sendbuf = sendbuff, .recvbuf = recvbuff,
                           .count = count, .dtype = (enum hc_dtype)datatype, .root = root};
  HC_TRY(hc_comm_check(comm, fn));
  HC_TRY(check_rank(comm, root, "root", fn));
  if (comm->rank == root) HC_TRY(check_buf(sendbuff, count, "sendbuff", fn));
  HC_TRY(check_buf(recvbuff, count, "recvbuff", fn));
  return submit(comm, &a, stream, fn);
}

static hc_result_t api_Reduce(const void *sendbuff, void *recvbuff, size_t count,
                              hetcclDataType_t datatype, hetcclRedOp_t op, int root, hetcclComm_t comm,
                               hetcclStream_t stream) {
  const char *fn = "Reduce";
  struct hc_coll_args a = {.coll = HC_COLL_REDUCE, .sendbuf = sendbuff, .recvbuf = recvbuff,
                           .count = count, .dtype = (enum hc_dtype)datatype, .root = root};
  HC_TRY(hc_comm_check(comm, fn));
  HC_TRY(check_dtype(datatype, fn));
  HC_TRY(resolve_op(comm, op, datatype, &a, fn));
  HC_TRY(check_rank(comm, root, "root", fn));
  HC_TRY(check_buf(sendbuff, count, "sendbuff", fn));
  if (comm->rank == root) HC_TRY(check_buf(recvbuff, count, "recvbuff", fn));
  return submit(comm, &a, stream, fn);
}

static hc_result_t api_AllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                 hetcclDataType_t datatype, hetcclComm_t comm,
                               hetcclStream_t stream) {
  const char *fn = "AllGather";
  struct hc_coll_args a = {.coll = HC_COLL_ALLGATHER, .sendbuf = sendbuff, .recvbuf = recvbuff,
                           .count = sendcount, .dtype = (enum hc_dtype)datatype};
  HC_TRY(check_buf(sendbuff, sendcount, "sendbuff", fn));
  HC_TRY(check_buf(recvbuff, sendcount, "recvbuff", fn));
  return submit(comm, &a, stream, fn);
}

static hc_result_t api_ReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                     hetcclDataType_t datatype, hetcclRedOp_t op, hetcclComm_t comm,
                               hetcclStream_t stream) {
  const char *fn = "ReduceScatter";
  struct hc_coll_args a = {.coll = HC_COLL_REDUCESCATTER, .sendbuf = sendbuff, .recvbuf = recvbuff,
                           .count = recvcount, .dtype = (enum hc_dtype)datatype};
  HC_TRY(hc_comm_check(comm, fn));
  HC_TRY(check_dtype(datatype, fn));
  HC_TRY(resolve_op(comm, op, datatype, &a, fn));
  HC_TRY(check_buf(sendbuff, recvcount, "sendbuff", fn));
  HC_TRY(check_buf(recvbuff, recvcount, "recvbuff", fn));
  return submit(comm, &a, stream, fn);
}

static hc_result_t api_AlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                hetcclDataType_t datatype, hetcclComm_t comm,
                               hetcclStream_t stream) {
  const char *fn = "AlltoAll";
  struct hc_coll_args a = {.coll = HC_COLL_ALLTOALL, .sendbuf = sendbuff, .recvbuf = recvbuff,
                           .count = count, .dtype = (enum hc_dtype)datatype};
  HC_TRY(check_buf(sendbuff, count, "sendbuff", fn));
  HC_TRY(check_buf(recvbuff, count, "recvbuff", fn));
  return submit(comm, &a, stream, fn);
}

static hc_result_t api_AlltoAllv(const void *sendbuff, const size_t sendcounts[], const size_t sdispls[],
                                 void *recvbuff, const size_t recvcounts[], const size_t rdispls[],
                                 hetcclDataType_t datatype, hetcclComm_t comm,
                               hetcclStream_t stream) {
  const char *fn = "AlltoAllv";
  HC_TRY(hc_comm_check(comm, fn));
  HC_TRY(check_dtype(datatype, fn));
  if (!sendcounts || !sdispls || !recvcounts || !rdispls)
    return HC_FAIL(HC_ERR_ARG, "%s: a count or displacement array is NULL", fn);
  size_t send_total = 0, recv_total = 0;
  for (int i = 0; i < comm->nranks; i++) {
    HC_TRY(check_size(sendcounts[i], datatype, 1, fn));
    HC_TRY(check_size(recvcounts[i], datatype, 1, fn));
    send_total |= sendcounts[i];
    recv_total |= recvcounts[i];
  }
  if (sendcounts[comm->rank] != recvcounts[comm->rank])
    return HC_FAIL(HC_ERR_ARG, "%s: rank %d sends %zu elements to itself but expects %zu", fn,
                   comm->rank, sendcounts[comm->rank], recvcounts[comm->rank]);
  HC_TRY(check_buf(sendbuff, send_total, "sendbuff", fn));
  HC_TRY(check_buf(recvbuff, recv_total, "recvbuff", fn));
  struct hc_coll_args a = {.coll = HC_COLL_ALLTOALLV, .sendbuf = sendbuff, .recvbuf = recvbuff,
                           .dtype = (enum hc_dtype)datatype, .sendcounts = sendcounts,
                           .sdispls = sdispls, .recvcounts = recvcounts, .rdispls = rdispls};
  return submit(comm, &a, stream, fn);
}

static hc_result_t api_Gather(const void *sendbuff, void *recvbuff, size_t count,
                              hetcclDataType_t datatype, int root, hetcclComm_t comm,
                               hetcclStream_t stream) {
  const char *fn = "Gather";
  struct hc_coll_args a = {.coll = HC_COLL_GATHER, .sendbuf = sendbuff, .recvbuf = recvbuff,
                           .count = count, .dtype = (enum hc_dtype)datatype, .root = root};
  HC_TRY(hc_comm_check(comm, fn));
  HC_TRY(check_rank(comm, root, "root", fn));
  HC_TRY(check_buf(sendbuff, count, "sendbuff", fn));
  if (comm->rank == root) HC_TRY(check_buf(recvbuff, count, "recvbuff", fn));
  return submit(comm, &a, stream, fn);
}

static hc_result_t api_Scatter(const void *sendbuff, void *recvbuff, size_t count,
                               hetcclDataType_t datatype, int root, hetcclComm_t comm,
                               hetcclStream_t stream) {
  const char *fn = "Scatter";
  struct hc_coll_args a = {.coll = HC_COLL_SCATTER, .sendbuf = sendbuff, .recvbuf = recvbuff,
                           .count = count, .dtype = (enum hc_dtype)datatype, .root = root};
  HC_TRY(hc_comm_check(comm, fn));
  HC_TRY(check_rank(comm, root, "root", fn));
  if (comm->rank == root) HC_TRY(check_buf(sendbuff, count, "sendbuff", fn));
  HC_TRY(check_buf(recvbuff, count, "recvbuff", fn));
  return submit(comm, &a, stream, fn);
}

static hc_result_t api_Send(const void *sendbuff, size_t count, hetcclDataType_t datatype, int peer,
                            hetcclComm_t comm,
                               hetcclStream_t stream) {
  const char *fn = "Send";
  struct hc_coll_args a = {.coll = HC_COLL_SEND, .sendbuf = sendbuff, .count = count,
                           .dtype = (enum hc_dtype)datatype, .root = peer};
  HC_TRY(hc_comm_check(comm, fn));
  HC_TRY(check_rank(comm, peer, "peer", fn));
  HC_TRY(check_buf(sendbuff, count, "sendbuff", fn));
  return submit(comm, &a, stream, fn);
}

static hc_result_t api_Recv(void *recvbuff, size_t count, hetcclDataType_t datatype, int peer,
                            hetcclComm_t comm,
                               hetcclStream_t stream) {
  const char *fn = "Recv";
  struct hc_coll_args a = {.coll = HC_COLL_RECV, .recvbuf = recvbuff, .count = count,
                           .dtype = (enum hc_dtype)datatype, .root = peer};
  HC_TRY(hc_comm_check(comm, fn));
  HC_TRY(check_rank(comm, peer, "peer", fn));
  HC_TRY(check_buf(recvbuff, count, "recvbuff", fn));
  return submit(comm, &a, stream, fn);
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
    struct hc_coll_args a = {.coll = HC_COLL_ALLREDUCE, .sendbuf = &comm->barrier_byte,
                             .recvbuf = &comm->barrier_byte, .count = 1, .dtype = HC_UINT8, .op = HC_MAX};
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
    *pm = (struct hc_premul_op){.in_use = true, .dtype = (enum hc_dtype)datatype,
                                .residence = residence, .factor_ptr = scalar};
    if (residence == hetcclScalarHostImmediate) memcpy(pm->factor, scalar, hc_dtype_size(pm->dtype));
    *op = (hetcclRedOp_t)(hetcclNumOps + i);
    return HC_OK;
  }
  return HC_FAIL(HC_ERR_USAGE, "%s: all %d PreMulSum ops of this comm are in use; destroy some", fn,
                 HC_MAX_PREMUL_OPS);
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

HC_EXPORT hetcclResult_t hetcclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                         hetcclDataType_t datatype, hetcclRedOp_t op,
                                         hetcclComm_t comm, hetcclStream_t stream) {
  return (hetcclResult_t)api_AllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                         hetcclDataType_t datatype, int root, hetcclComm_t comm,
                                         hetcclStream_t stream) {
  return (hetcclResult_t)api_Broadcast(sendbuff, recvbuff, count, datatype, root, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                      hetcclDataType_t datatype, hetcclRedOp_t op, int root,
                                      hetcclComm_t comm, hetcclStream_t stream) {
  return (hetcclResult_t)api_Reduce(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                         hetcclDataType_t datatype, hetcclComm_t comm,
                                         hetcclStream_t stream) {
  return (hetcclResult_t)api_AllGather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                             hetcclDataType_t datatype, hetcclRedOp_t op,
                                             hetcclComm_t comm, hetcclStream_t stream) {
  return (hetcclResult_t)api_ReduceScatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                        hetcclDataType_t datatype, hetcclComm_t comm,
                                        hetcclStream_t stream) {
  return (hetcclResult_t)api_AlltoAll(sendbuff, recvbuff, count, datatype, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclAlltoAllv(const void *sendbuff, const size_t sendcounts[],
                                         const size_t sdispls[], void *recvbuff,
                                         const size_t recvcounts[], const size_t rdispls[],
                                         hetcclDataType_t datatype, hetcclComm_t comm,
                                         hetcclStream_t stream) {
  return (hetcclResult_t)api_AlltoAllv(sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls,
                                       datatype, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclGather(const void *sendbuff, void *recvbuff, size_t count,
                                      hetcclDataType_t datatype, int root, hetcclComm_t comm,
                                      hetcclStream_t stream) {
  return (hetcclResult_t)api_Gather(sendbuff, recvbuff, count, datatype, root, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                       hetcclDataType_t datatype, int root, hetcclComm_t comm,
                                       hetcclStream_t stream) {
  return (hetcclResult_t)api_Scatter(sendbuff, recvbuff, count, datatype, root, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclSend(const void *sendbuff, size_t count, hetcclDataType_t datatype,
                                    int peer, hetcclComm_t comm, hetcclStream_t stream) {
  return (hetcclResult_t)api_Send(sendbuff, count, datatype, peer, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclRecv(void *recvbuff, size_t count, hetcclDataType_t datatype, int peer,
                                    hetcclComm_t comm, hetcclStream_t stream) {
  return (hetcclResult_t)api_Recv(recvbuff, count, datatype, peer, comm, stream);
}
HC_EXPORT hetcclResult_t hetcclBarrier(hetcclComm_t comm, hetcclStream_t stream) {
  return (hetcclResult_t)api_Barrier(comm, stream);
}
HC_EXPORT hetcclResult_t hetcclRedOpCreatePreMulSum(hetcclRedOp_t *op, void *scalar,
                                                    hetcclDataType_t datatype,
                                                    hetcclScalarResidence_t residence,
                                                    hetcclComm_t comm) {
  return (hetcclResult_t)api_RedOpCreatePreMulSum(op, scalar, datatype, residence, comm);
}
HC_EXPORT hetcclResult_t hetcclRedOpDestroy(hetcclRedOp_t op, hetcclComm_t comm) {
  return (hetcclResult_t)api_RedOpDestroy(op, comm);
}
