/*
 * Direct point-to-point plans: all-to-all(v), gather, scatter, send and
 * receive. Every pair exchanges directly; rank r talks to r+k and r-k at round k, so that no
 * rank is the target of everyone at once. Between two ranks of a group
 * that runs the vendor's library (hc_vendor_peer), the blocks go in one
 * group of the vendor's sends and receives instead, on the caller's
 * stream, while the transfers with other groups move on hetccl's
 * transports at the same time.
 */
#include <stdlib.h>
#include <string.h>

#include "plan_priv.h"

/* The vendor's sends and receives of one call, gathered while the plan is
 * built and pushed as one VENDOR step. */
struct vendor_ops {
  struct hc_vendor_p2p *ops;
  int n;
};

static hc_result_t vendor_ops_init(struct vendor_ops *v, const struct hc_plan_ctx *x) {
  v->n = 0;
  v->ops =
      x->group_of && hc_runs_vendor(x, x->group_of[x->rank]) ? malloc((size_t)x->nranks * 2 * sizeof(*v->ops)) : NULL;
  if (v->ops == NULL && x->group_of && hc_runs_vendor(x, x->group_of[x->rank]))
    return HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory for %d vendor sends and receives", 2 * x->nranks);
  return HC_OK;
}

/* A send (to) or receive (from) of peer: the vendor's where it may (the
 * first pass gathers those), else a transfer of hetccl's (the second pass
 * pushes those). The vendor's step comes first in the plan, so that it
 * runs on the stream while the transfers with other groups move, not
 * after the copies out of their staging slots. */
static void move(struct hc_plan *p, const struct hc_plan_ctx *x, struct vendor_ops *v, int pass, int peer, bool send,
                 void *buf, size_t bytes, hc_ref_t ready) {
  if (hc_vendor_peer(x, peer)) {
    if (pass == 0)
      v->ops[v->n++] =
          (struct hc_vendor_p2p){.buf = buf, .bytes = bytes, .peer = hc_group_index(x, peer), .send = send};
  } else if (pass == 1) {
    if (send) hc_push_send(p, peer, buf, bytes, ready, 0);
    else hc_push_recv(p, peer, buf, bytes, 0, 0);
  }
}

/* After the first pass: the vendor's step. */
static void vendor_ops_push(struct hc_plan *p, struct vendor_ops *v, int pass, hc_ref_t ready) {
  if (pass != 0) return;
  hc_push_vendor_p2p(p, v->ops, v->n, ready, 0);
  free(v->ops);
}

static bool overlaps(const void *a, size_t an, const void *b, size_t bn) {
  const char *pa = a, *pb = b;
  return an && bn && pa < pb + bn && pb < pa + an;
}

hc_result_t hc_p2p_alltoallv(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                             struct hc_alg_io io) {
  const int n = x->nranks, r = x->rank;
  const size_t es = hc_dtype_size(a->dtype);
  const bool equal = a->coll == HC_COLL_ALLTOALL;
#define SCOUNT(i) (equal ? a->count : a->v->sendcounts[i])
#define SDISPL(i) (equal ? a->count * (size_t)(i) : a->v->sdispls[i])
#define RCOUNT(i) (equal ? a->count : a->v->recvcounts[i])
#define RDISPL(i) (equal ? a->count * (size_t)(i) : a->v->rdispls[i])
  size_t send_span = 0, recv_span = 0;
  for (int i = 0; i < n; i++) {
    send_span = HC_MAX(send_span, (SDISPL(i) + SCOUNT(i)) * es);
    recv_span = HC_MAX(recv_span, (RDISPL(i) + RCOUNT(i)) * es);
  }
  /* In place: the input is copied aside first, or receives would overwrite
   * blocks not yet sent. */
  const void *in = io.in;
  hc_ref_t in_ready = io.in_dep;
  if (overlaps(io.in, send_span, io.out, recv_span)) {
    void *copy = hc_plan_scratch(p, send_span);
    if (copy == NULL) return HC_OK; /* the plan reports it */
    in_ready = hc_push_copy(p, copy, io.in, send_span, io.in_dep, 0);
    in = copy;
  }
  struct vendor_ops v;
  HC_TRY(vendor_ops_init(&v, x));
  hc_push_copy(p, HC_PTR(io.out, RDISPL(r), es), HC_PTR(in, SDISPL(r), es), RCOUNT(r) * es, in_ready, 0);
  for (int pass = 0; pass < 2; pass++) {
    for (int k = 1; k < n; k++) {
      int to = (r + k) % n, from = (r - k + n) % n;
      move(p, x, &v, pass, to, true, HC_PTR(in, SDISPL(to), es), SCOUNT(to) * es, in_ready);
      move(p, x, &v, pass, from, false, HC_PTR(io.out, RDISPL(from), es), RCOUNT(from) * es, 0);
    }
    vendor_ops_push(p, &v, pass, in_ready);
  }
#undef SCOUNT
#undef SDISPL
#undef RCOUNT
#undef RDISPL
  return HC_OK;
}

/* Gather and scatter (a->coll), one the other reversed: the root's blocks
 * lie in rank order (gather: its output, scatter: its input), its own
 * copied locally; every other rank sends its input to the root (gather) or
 * receives its output from it (scatter). move() reads the dependency of
 * sends only. */
hc_result_t hc_p2p_gather_scatter(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                  struct hc_alg_io io) {
  const int n = x->nranks, r = x->rank, root = a->root;
  const size_t bytes = a->count * hc_dtype_size(a->dtype);
  const bool gather = a->coll == HC_COLL_GATHER;
  char *blocks = gather ? io.out : (char *)io.in;
  struct vendor_ops v;
  HC_TRY(vendor_ops_init(&v, x));
  if (gather && r == root) hc_push_copy(p, blocks + (size_t)root * bytes, io.in, bytes, io.in_dep, 0);
  for (int pass = 0; pass < 2; pass++) {
    if (r != root) move(p, x, &v, pass, root, gather, gather ? (void *)io.in : io.out, bytes, io.in_dep);
    for (int k = 1; k < n && r == root; k++) {
      int peer = (root + k) % n;
      move(p, x, &v, pass, peer, !gather, blocks + (size_t)peer * bytes, bytes, io.in_dep);
    }
    vendor_ops_push(p, &v, pass, io.in_dep);
  }
  if (!gather && r == root) hc_push_copy(p, io.out, blocks + (size_t)root * bytes, bytes, io.in_dep, 0);
  return HC_OK;
}

/* A send or receive between two ranks of a vendor group. It joins the
 * plan's open group of vendor sends and receives unless a vendor step came
 * after it (the vendor must see every rank's collectives in one order): a
 * new step holds the ops of both and waits for the old one, which becomes
 * a NOP. */
static void vendor_sendrecv(struct hc_plan *p, const struct hc_plan_ctx *x, int peer, void *buf, size_t bytes,
                            bool send, hc_ref_t ready) {
  hc_ref_t open = p->open_vendor_p2p;
  for (int i = open; open && i < p->nsteps; i++)
    if (p->steps[i].kind == HC_STEP_VENDOR) open = 0;
  const int nold = open ? (int)p->steps[open - 1].count : 0;
  struct hc_vendor_p2p *ops = malloc((size_t)(nold + 1) * sizeof(*ops));
  if (ops == NULL) {
    p->cap = -1; /* hc_plan_add reports it */
    return;
  }
  if (nold) memcpy(ops, p->steps[open - 1].src0, (size_t)nold * sizeof(*ops));
  ops[nold] = (struct hc_vendor_p2p){.buf = buf, .bytes = bytes, .peer = hc_group_index(x, peer), .send = send};
  if (open) p->steps[open - 1].kind = HC_STEP_NOP; /* its deps stay: the new step waits for them */
  p->open_vendor_p2p = hc_push_vendor_p2p(p, ops, nold + 1, open, ready);
  free(ops);
}

hc_result_t hc_p2p_send(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                        struct hc_alg_io io) {
  const size_t bytes = a->count * hc_dtype_size(a->dtype);
  const void *src = io.in;
  hc_ref_t ready = 0;
  if (a->stage_send && a->count > 0) {
    void *copy = hc_plan_scratch(p, bytes);
    if (copy == NULL) return HC_OK; /* the plan reports it */
    ready = hc_push_copy(p, copy, src, bytes, 0, 0);
    src = copy;
  }
  if (hc_vendor_peer(x, a->root)) vendor_sendrecv(p, x, a->root, (void *)src, bytes, true, ready);
  else hc_push_send(p, a->root, src, bytes, ready, 0);
  return HC_OK;
}

hc_result_t hc_p2p_recv(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                        struct hc_alg_io io) {
  const size_t bytes = a->count * hc_dtype_size(a->dtype);
  if (hc_vendor_peer(x, a->root)) vendor_sendrecv(p, x, a->root, io.out, bytes, false, 0);
  else hc_push_recv(p, a->root, io.out, bytes, 0, 0);
  return HC_OK;
}
