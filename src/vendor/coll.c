/*
 * What a call of the API is to the vendor library: the one switch from a
 * collective to the vendor's function, for pass-through comms (api/) and
 * for the VENDOR steps of a plan (exec/). The library's results become
 * hetccl's through hc_vendor_check, which writes the message.
 */
#include <string.h>

#include "vendor.h"

/* ncclScalarHostImmediate: the scalar is read before the create returns. */
#define VENDOR_SCALAR_HOST_IMMEDIATE 1

hc_result_t hc_vendor_group_start(const struct hc_vendor *v, void *comm) {
  return hc_vendor_check(v, comm, v->group_start(), "GroupStart");
}

hc_result_t hc_vendor_group_end(const struct hc_vendor *v, void *comm, hc_result_t calls_result) {
  hc_result_t ended = hc_vendor_check(v, comm, v->group_end(), "GroupEnd");
  return calls_result != HC_OK ? calls_result : ended;
}

hc_result_t hc_vendor_run_p2p(const struct hc_vendor *v, void *comm, const struct hc_vendor_p2p *ops, size_t n,
                              hc_stream_t s) {
  HC_TRY(hc_vendor_group_start(v, comm));
  int vr = 0;
  const char *what = "Send";
  for (size_t k = 0; k < n && vr == 0; k++) {
    what = ops[k].send ? "Send" : "Recv";
    vr = ops[k].send ? v->send(ops[k].buf, ops[k].bytes, HC_UINT8, ops[k].peer, comm, s)
                     : v->recv(ops[k].buf, ops[k].bytes, HC_UINT8, ops[k].peer, comm, s);
  }
  return hc_vendor_group_end(v, comm, hc_vendor_check(v, comm, vr, what));
}

/* All-to-all (-v), gather and scatter as sends and receives, in a group
 * (the sends and receives of one rank must be posted together). */
static int run_as_p2p(const struct hc_vendor *v, void *comm, int me, int n, const struct hc_vendor_call *c,
                      hc_stream_t s) {
  const size_t es = hc_dtype_size((enum hc_dtype)c->dtype);
  const int t = c->dtype;
  int vr = 0;
  for (int p = 0; p < n && vr == 0; p++) {
    size_t sc = c->count, sd = c->count * (size_t)p, rc = c->count, rd = c->count * (size_t)p;
    bool send = true, recv = true;
    switch (c->coll) {
    case HC_COLL_ALLTOALLV: sc = c->sendcounts[p], sd = c->sdispls[p], rc = c->recvcounts[p], rd = c->rdispls[p]; break;
    case HC_COLL_GATHER: /* everyone sends to the root (once), the root receives from all */
      send = p == c->root, sd = 0, recv = me == c->root;
      break;
    case HC_COLL_SCATTER: /* the root sends to all, everyone receives from the root (once) */
      send = me == c->root, recv = p == c->root, rd = 0;
      break;
    default: break;
    }
    if (send) vr = v->send((const char *)c->sendbuf + sd * es, sc, t, p, comm, s);
    if (recv && vr == 0) vr = v->recv((char *)c->recvbuf + rd * es, rc, t, p, comm, s);
  }
  return vr;
}

/* The library's own call for c, or run_as_p2p. */
static int run_call(const struct hc_vendor *v, void *comm, int me, int n, const struct hc_vendor_call *c, int op,
                    hc_stream_t s) {
  const void *sb = c->sendbuf;
  void *rb = c->recvbuf;
  const int t = c->dtype;
  switch (c->coll) {
  case HC_COLL_ALLREDUCE: return v->all_reduce(sb, rb, c->count, t, op, comm, s);
  case HC_COLL_BROADCAST: return v->broadcast(sb, rb, c->count, t, c->root, comm, s);
  case HC_COLL_REDUCE: return v->reduce(sb, rb, c->count, t, op, c->root, comm, s);
  case HC_COLL_ALLGATHER: return v->all_gather(sb, rb, c->count, t, comm, s);
  case HC_COLL_REDUCESCATTER: return v->reduce_scatter(sb, rb, c->count, t, op, comm, s);
  case HC_COLL_SEND: return v->send(sb, c->count, t, c->root, comm, s);
  case HC_COLL_RECV: return v->recv(rb, c->count, t, c->root, comm, s);
  case HC_COLL_ALLTOALL:
    if (v->all_to_all != NULL && sb != rb) return v->all_to_all(sb, rb, c->count, t, comm, s);
    break;
  case HC_COLL_ALLTOALLV:
    if (v->all_to_allv != NULL && sb != rb)
      return v->all_to_allv(sb, c->sendcounts, c->sdispls, rb, c->recvcounts, c->rdispls, t, comm, s);
    break;
  default: break;
  }
  int vr = v->group_start();
  if (vr != 0) return vr;
  vr = run_as_p2p(v, comm, me, n, c, s);
  int ended = v->group_end();
  return vr != 0 ? vr : ended;
}

hc_result_t hc_vendor_run(const struct hc_vendor *v, void *comm, int me, int nranks, const struct hc_vendor_call *c,
                          hc_stream_t s) {
  if ((unsigned)c->coll >= HC_COLL_COUNT)
    return HC_FAIL(HC_ERR_INTERNAL, "%s: no vendor call for collective %d", v->name, (int)c->coll);
  int op = c->op;
  if (c->premul_factor != NULL) {
    uint8_t factor[8];
    memcpy(factor, c->premul_factor, sizeof(factor));
    HC_TRY(hc_vendor_check(v, comm,
                           v->red_op_create_pre_mul_sum(&op, factor, c->dtype, VENDOR_SCALAR_HOST_IMMEDIATE, comm),
                           "RedOpCreatePreMulSum"));
  }
  int vr = run_call(v, comm, me, nranks, c, op, s);
  if (c->premul_factor != NULL) v->red_op_destroy(op, comm);
  return hc_vendor_check(v, comm, vr, hc_coll_name(c->coll));
}
