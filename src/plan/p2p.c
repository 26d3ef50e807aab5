/*
 * Direct point-to-point plans: all-to-all(v), gather, scatter. Every pair
 * exchanges directly; rank r talks to r+k and r-k at round k, so that no
 * rank is the target of everyone at once.
 */
#include "plan_priv.h"

static bool overlaps(const void *a, size_t an, const void *b, size_t bn) {
  const char *pa = a, *pb = b;
  return an && bn && pa < pb + bn && pb < pa + an;
}

hc_result_t hc_p2p_alltoallv(struct hc_plan *p, const struct hc_plan_ctx *x,
                             const struct hc_coll_args *a, struct hc_alg_io io) {
  const int n = x->nranks, r = x->rank;
  const size_t es = hc_dtype_size(a->dtype);
  const bool equal = a->coll == HC_COLL_ALLTOALL;
#define SCOUNT(i) (equal ? a->count : a->sendcounts[i])
#define SDISPL(i) (equal ? a->count * (size_t)(i) : a->sdispls[i])
#define RCOUNT(i) (equal ? a->count : a->recvcounts[i])
#define RDISPL(i) (equal ? a->count * (size_t)(i) : a->rdispls[i])
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
  hc_push_copy(p, HC_PTR(io.out, RDISPL(r), es), HC_PTR(in, SDISPL(r), es), RCOUNT(r) * es, in_ready, 0);
  for (int k = 1; k < n; k++) {
    int to = (r + k) % n, from = (r - k + n) % n;
    hc_push_send(p, to, HC_PTR(in, SDISPL(to), es), SCOUNT(to) * es, in_ready, 0);
    hc_push_recv(p, from, HC_PTR(io.out, RDISPL(from), es), RCOUNT(from) * es, 0, 0);
  }
#undef SCOUNT
#undef SDISPL
#undef RCOUNT
#undef RDISPL
  return HC_OK;
}

hc_result_t hc_p2p_gather(struct hc_plan *p, const struct hc_plan_ctx *x,
                          const struct hc_coll_args *a, struct hc_alg_io io) {
  const int n = x->nranks, r = x->rank, root = a->root;
  const size_t bytes = a->count * hc_dtype_size(a->dtype);
  if (r != root) {
    hc_push_send(p, root, io.in, bytes, io.in_dep, 0);
    return HC_OK;
  }
  hc_push_copy(p, (char *)io.out + (size_t)root * bytes, io.in, bytes, io.in_dep, 0);
  for (int k = 1; k < n; k++) {
    int from = (root + k) % n;
    hc_push_recv(p, from, (char *)io.out + (size_t)from * bytes, bytes, 0, 0);
  }
  return HC_OK;
}

hc_result_t hc_p2p_scatter(struct hc_plan *p, const struct hc_plan_ctx *x,
                           const struct hc_coll_args *a, struct hc_alg_io io) {
  const int n = x->nranks, r = x->rank, root = a->root;
  const size_t bytes = a->count * hc_dtype_size(a->dtype);
  if (r != root) {
    hc_push_recv(p, root, io.out, bytes, 0, 0);
    return HC_OK;
  }
  for (int k = 1; k < n; k++) {
    int to = (root + k) % n;
    hc_push_send(p, to, (const char *)io.in + (size_t)to * bytes, bytes, io.in_dep, 0);
  }
  hc_push_copy(p, io.out, (const char *)io.in + (size_t)root * bytes, bytes, io.in_dep, 0);
  return HC_OK;
}
