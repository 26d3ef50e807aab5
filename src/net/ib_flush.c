/*
 * net/ib: the flush of receives into GPU memory ("flush" in ib_priv.h).
 * Owns the ctx's flush queue pair: a reliable-connected queue pair
 * connected to itself (loopback through the local adapter), its own
 * completion queue on the ctx's completion channel, and a registered
 * host scratch of a few bytes where the reads land. Made at the first
 * flush, so a comm that never receives into GPU memory (every CPU comm)
 * has none. Which receive needs a flush and what its completion means is
 * ib_progress.c's.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ib_priv.h"

#define HC_IB_FLUSH_SCRATCH 64u

static hc_result_t flush_open(struct hc_ib_ctx *ctx) {
  struct hc_ib_flush *f = &ctx->flush;
  const struct hc_ib_verbs *v = ctx->v;
  f->cq = v->ibv_create_cq(ctx->context, (int)HC_IB_FLUSH_DEPTH, NULL, ctx->channel, 0);
  if (f->cq == NULL)
    return HC_FAIL(HC_ERR_SYSTEM, "ib: %s: cannot create the completion queue of GPU flushes: %s", ctx->dev.name,
                   strerror(errno));
  HC_TRY(hc_calloc(&f->scratch, 1, HC_IB_FLUSH_SCRATCH, "the ib flush scratch"));
  f->scratch_mr = v->ibv_reg_mr(ctx->pd, f->scratch, HC_IB_FLUSH_SCRATCH, HC_IBV_ACCESS_LOCAL_WRITE);
  if (f->scratch_mr == NULL)
    return HC_FAIL(HC_ERR_SYSTEM, "ib: %s: cannot register the flush scratch: %s", ctx->dev.name, strerror(errno));
  /* A receive queue of one entry: nothing is ever sent to it, but some
   * devices refuse a queue pair without one. */
  struct ibv_qp_cap cap = {.max_send_wr = HC_IB_FLUSH_DEPTH, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1};
  const char *what = "the GPU flush queue pair";
  HC_TRY(hc_ib_qp_open(ctx, f->cq, &cap, HC_IBV_ACCESS_LOCAL_WRITE | HC_IBV_ACCESS_REMOTE_READ, what, &f->qp));
  HC_TRY(hc_ib_qp_connect(ctx, f->qp, f->qp->qp_num, ctx->dev.lid, ctx->dev.gid.raw, ctx->dev.active_mtu, what));
  HC_INFO(HC_NET,
          "ib: rank %d: flush queue pair %u on %s:%d: each receive into GPU memory ends with a 1-byte RDMA "
          "read of it",
          ctx->rank, f->qp->qp_num, ctx->dev.name, ctx->dev.port);
  return HC_OK;
}

hc_result_t hc_ib_flush_post(struct hc_ib_ctx *ctx, const struct hc_ib_reg *reg, const void *addr, uint64_t wr_id,
                             bool *posted) {
  struct hc_ib_flush *f = &ctx->flush;
  *posted = false;
  if (f->qp == NULL) {
    hc_result_t r = flush_open(ctx);
    if (r != HC_OK) { /* a half-made one is no flush queue pair: made again at the next try */
      hc_ib_flush_fini(ctx);
      return r;
    }
  }
  if (f->inflight >= HC_IB_FLUSH_DEPTH) return HC_OK;
  struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)f->scratch, .length = 1, .lkey = f->scratch_mr->lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = HC_IBV_WR_RDMA_READ;
  wr.send_flags = HC_IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = (uint64_t)(uintptr_t)addr;
  wr.wr.rdma.rkey = reg->mr->rkey;
  int rc = hc_ib_post_send(f->qp, &wr, &bad);
  if (rc != 0)
    return HC_FAIL(HC_ERR_SYSTEM, "ib: rank %d: posting the flush read of GPU memory at %p failed: %s", ctx->rank, addr,
                   strerror(rc));
  f->inflight++;
  *posted = true;
  return HC_OK;
}

int hc_ib_flush_poll(struct hc_ib_ctx *ctx, struct ibv_wc *wc, int n) {
  struct hc_ib_flush *f = &ctx->flush;
  if (f->inflight == 0) return 0;
  int k = hc_ib_poll_cq(f->cq, n, wc);
  if (k > 0) f->inflight -= (uint32_t)k;
  return k;
}

void hc_ib_flush_fini(struct hc_ib_ctx *ctx) {
  struct hc_ib_flush *f = &ctx->flush;
  const struct hc_ib_verbs *v = ctx->v;
  if (f->qp) v->ibv_destroy_qp(f->qp);
  if (f->cq) v->ibv_destroy_cq(f->cq);
  if (f->scratch_mr) v->ibv_dereg_mr(f->scratch_mr);
  free(f->scratch);
  bool enabled = f->enabled;
  *f = (struct hc_ib_flush){.enabled = enabled};
}
