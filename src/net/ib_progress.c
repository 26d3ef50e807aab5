/*
 * net/ib: the data protocol (terms in ib_priv.h). Owns the request FIFOs
 * of a connection, the eager ring, the cts records and credits, and the
 * polling of the connection's completion queue. Never sleeps.
 *
 * A send completes when the peer's adapter acknowledged its last write, so
 * a rank that returns from its last call and closes its queue pairs never
 * drops bytes still in flight. A receive completes when its bytes are in
 * the caller's buffer: copied out of the eager ring, or when every chunk's
 * immediate has arrived (the write of a chunk lands before its immediate)
 * and, for GPU memory, its flush read has come back ("flush" in
 * ib_priv.h).
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>

#include "../device/device.h"
#include "ib_priv.h"

#define HC_IB_POLL_BATCH 32
#define HC_IB_REQ_TAG 1u
#define HC_IB_CONTROL_NS 1000000ull

static hc_result_t post_fail(struct hc_ib_conn *c, int qp, int rc) {
  return HC_FAIL(rc == ENOMEM ? HC_ERR_INTERNAL : HC_ERR_REMOTE,
                 "ib: rank %d: posting a write to rank %d on queue pair %d failed: %s", c->ctx->rank, c->peer, qp,
                 strerror(rc));
}

/* Testing only (HETCCL_IB_FAULT_AFTER): the queue pair breaks as a cable
 * pull or a remote access error would break it. */
static void maybe_inject_fault(struct hc_ib_conn *c) {
  if (c->ctx->fault_after == 0 || c->writes_posted != c->ctx->fault_after) return;
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = HC_IBV_QPS_ERR;
  HC_WARN(HC_NET, "ib: rank %d: forcing queue pair 0 to rank %d into the error state (HETCCL_IB_FAULT_AFTER=%llu)",
          c->ctx->rank, c->peer, (unsigned long long)c->ctx->fault_after);
  c->ctx->v->ibv_modify_qp(c->qps[0], &a, HC_IBV_QP_STATE);
}

static bool sq_has_room(const struct hc_ib_conn *c, int qp) { return c->sq_used[qp] < HC_IB_SQ_DEPTH; }

/* One signaled RDMA WRITE WITH IMMEDIATE gathering sg[0..nsge) (each
 * registered with its lkey). Copied inline when small enough, unless
 * may_inline is false: an inline write is read by the CPU at post time,
 * which must never be GPU memory. */
static hc_result_t post_write_sg(struct hc_ib_conn *c, int qp, uint64_t wr_id, struct ibv_sge *sg, int nsge,
                                 bool may_inline, uint64_t remote, uint32_t rkey, uint32_t imm) {
  size_t len = 0;
  for (int i = 0; i < nsge; i++) len += sg[i].length;
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = wr_id;
  wr.sg_list = len > 0 ? sg : NULL;
  wr.num_sge = len > 0 ? nsge : 0;
  wr.opcode = HC_IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = HC_IBV_SEND_SIGNALED | (may_inline && len > 0 && len <= c->max_inline ? HC_IBV_SEND_INLINE : 0);
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  int rc = hc_ib_post_send(c->qps[qp], &wr, &bad);
  if (rc != 0) return post_fail(c, qp, rc);
  c->sq_used[qp]++;
  c->writes_posted++;
  maybe_inject_fault(c);
  return HC_OK;
}

/* One write of len bytes of host memory at local (registered with lkey). */
static hc_result_t post_write(struct hc_ib_conn *c, int qp, uint64_t wr_id, const void *local, uint32_t lkey,
                              size_t len, uint64_t remote, uint32_t rkey, uint32_t imm) {
  struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)local, .length = (uint32_t)len, .lkey = lkey};
  return post_write_sg(c, qp, wr_id, &sge, 1, true, remote, rkey, imm);
}

hc_result_t hc_ib_post_recvs(struct hc_ib_conn *c, int qp, uint32_t n) {
  /* Writes with immediate consume a receive and place nothing through it:
   * no scatter list. */
  for (uint32_t i = 0; i < n; i++) {
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)qp, .next = NULL, .sg_list = NULL, .num_sge = 0}, *bad = NULL;
    int rc = hc_ib_post_recv(c->qps[qp], &wr, &bad);
    if (rc != 0)
      return HC_FAIL(HC_ERR_REMOTE, "ib: rank %d: posting a receive for rank %d on queue pair %d failed: %s",
                     c->ctx->rank, c->peer, qp, strerror(rc));
  }
  return HC_OK;
}

static void req_complete(struct hc_ib_conn *c, struct hc_ib_req *q) {
  q->complete = true;
  c->n_complete++;
  if (q->reg) {
    hc_ib_reg_put(c->ctx, q->reg);
    q->reg = NULL;
  }
}

/* Whether a receive that has landed must be flushed before it completes:
 * its bytes went into GPU memory. */
static bool needs_flush(const struct hc_ib_conn *c, const struct hc_ib_req *q) {
  return c->ctx->flush.enabled && q->n > 0 && q->reg != NULL && q->reg->device;
}

/* The flush read of q, posted now or, where the flush queue pair is full,
 * left due for flush_progress. */
static hc_result_t flush_post(struct hc_ib_conn *c, struct hc_ib_req *q) {
  bool posted = false;
  HC_TRY(hc_ib_flush_post(c->ctx, q->reg, q->buf, (uint64_t)(uintptr_t)q, &posted));
  if (posted == q->flush_due) { /* due and now posted, or newly due */
    if (posted) c->flushes_due--;
    else c->flushes_due++;
  }
  q->flush_due = !posted;
  q->flushing = posted;
  return HC_OK;
}

/* Every chunk of q has arrived: it completes, after its flush where its
 * bytes are in GPU memory. */
static hc_result_t recv_landed(struct hc_ib_conn *c, struct hc_ib_req *q) {
  if (!needs_flush(c, q)) {
    req_complete(c, q);
    return HC_OK;
  }
  return flush_post(c, q);
}

static void put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* A message of sent bytes met a receive of posted bytes: the side that saw
 * it fails, and its bye record (sent when the conn fails, ib.c) makes the
 * peer fail with the same numbers. */
static hc_result_t mismatch(struct hc_ib_conn *c, uint64_t sent, uint64_t posted, bool we_send) {
  uint8_t *b = c->bye_out;
  memset(b, 0, HC_IB_BYE_BYTES);
  put_le64(b, HC_IB_BYE_MISMATCH);
  put_le64(b + 8, sent);
  put_le64(b + 16, posted);
  return HC_FAIL(HC_ERR_USAGE,
                 "ib: mismatched counts: a message of %llu bytes from rank %d met a receive of %llu "
                 "bytes on rank %d",
                 (unsigned long long)sent, we_send ? c->ctx->rank : c->peer, (unsigned long long)posted,
                 we_send ? c->peer : c->ctx->rank);
}

/* A transfer of the call sig met one of the call got: the side that saw it
 * fails, and its bye record makes the peer fail naming both calls. */
void hc_ib_bye_sig(struct hc_ib_conn *c, const struct hc_net_sig *mine, const struct hc_net_sig *got) {
  uint8_t *b = c->bye_out;
  put_le64(b, HC_IB_BYE_SIG);
  for (int i = 0; i < 2; i++) {
    put_le64(b + 8 + 8 * i, mine->w[i]);
    put_le64(b + 24 + 8 * i, got->w[i]);
  }
}

static hc_result_t sig_mismatch(struct hc_ib_conn *c, const struct hc_net_sig *mine, const struct hc_net_sig *got,
                                bool we_send) {
  hc_ib_bye_sig(c, mine, got);
  return hc_net_sig_fail(c->ctx->sig_explain, c->ctx->rank, mine, c->peer, got, we_send);
}

static struct hc_net_sig sig_get(const uint8_t *p) { return (struct hc_net_sig){{get_le64(p), get_le64(p + 8)}}; }
static void sig_put(uint8_t *p, const struct hc_net_sig *s) {
  put_le64(p, s->w[0]);
  put_le64(p + 8, s->w[1]);
}

/* The receive of seq (matched on its low bits: far fewer receives are ever
 * outstanding) that is not complete yet. */
static struct hc_ib_req *recv_find(struct hc_ib_conn *c, uint32_t seq_bits, uint32_t mask) {
  for (struct hc_ib_req *q = c->recvq.head; q; q = q->next)
    if (!q->complete && ((uint32_t)q->seq & mask) == seq_bits) return q;
  return NULL;
}

static hc_result_t on_recv_completion(struct hc_ib_conn *c, const struct ibv_wc *wc, int qp) {
  HC_TRY(hc_ib_post_recvs(c, qp, 1));
  if (!(wc->wc_flags & HC_IBV_WC_WITH_IMM))
    return HC_FAIL(HC_ERR_REMOTE, "ib: rank %d sent a message without an immediate (opcode %d)", c->peer, wc->opcode);
  uint32_t imm = ntohl(wc->imm_data), v = imm & HC_IB_SEQ30;
  switch ((enum hc_ib_imm_type)(imm >> 30)) {
  case HC_IB_IMM_EAGER:
    if (c->eager_arrived - c->eager_taken >= c->ctx->eager_slots)
      return HC_FAIL(HC_ERR_REMOTE, "ib: rank %d overran the eager ring of rank %d", c->peer, c->ctx->rank);
    c->eager_meta[c->eager_arrived % c->ctx->eager_slots] = imm;
    c->eager_arrived++;
    return HC_OK;
  case HC_IB_IMM_CTS: c->cts_have[v % HC_IB_CTS_SLOTS] = v + 1; return HC_OK;
  case HC_IB_IMM_DATA: {
    struct hc_ib_req *q = recv_find(c, v, HC_IB_SEQ30);
    if (q == NULL)
      return HC_FAIL(HC_ERR_INTERNAL, "ib: rank %d wrote message %u to rank %d, which has no such receive", c->peer, v,
                     c->ctx->rank);
    if (++q->chunks_done == q->chunks) HC_TRY(recv_landed(c, q));
    return HC_OK;
  }
  case HC_IB_IMM_CREDIT: {
    /* The full count from its low 30 bits: never more than eager_sent, and
     * never 2^30 behind. */
    uint64_t freed = c->eager_sent - ((uint32_t)(c->eager_sent - v) & HC_IB_SEQ30);
    if (freed > c->eager_freed_remote) c->eager_freed_remote = freed;
    return HC_OK;
  }
  }
  return HC_OK;
}

static int qp_index(const struct hc_ib_conn *c, uint32_t qp_num) {
  for (int i = 0; i < c->nqps; i++)
    if (c->qps[i]->qp_num == qp_num) return i;
  return -1;
}

static hc_result_t poll_cq(struct hc_ib_conn *c, bool *moved) {
  struct ibv_wc wc[HC_IB_POLL_BATCH];
  for (;;) {
    int n = hc_ib_poll_cq(c->cq, HC_IB_POLL_BATCH, wc);
    if (n < 0) return HC_FAIL(HC_ERR_SYSTEM, "ib: polling the completion queue of rank %d failed", c->peer);
    for (int i = 0; i < n; i++) {
      int qp = qp_index(c, wc[i].qp_num);
      if (wc[i].status != HC_IBV_WC_SUCCESS)
        return HC_FAIL(HC_ERR_REMOTE,
                       "ib: rank %d: queue pair %d to rank %d failed: %s (status %d, vendor error 0x%x); the peer "
                       "died, the link broke or the queue pair was put into error",
                       c->ctx->rank, qp, c->peer, c->ctx->v->ibv_wc_status_str(wc[i].status), wc[i].status,
                       wc[i].vendor_err);
      if (qp < 0) return HC_FAIL(HC_ERR_INTERNAL, "ib: a completion of unknown queue pair %u", wc[i].qp_num);
      *moved = true;
      if (wc[i].opcode == HC_IBV_WC_RECV_RDMA_WITH_IMM) {
        HC_TRY(on_recv_completion(c, &wc[i], qp));
        continue;
      }
      c->sq_used[qp]--;
      if (wc[i].wr_id & HC_IB_REQ_TAG) {
        struct hc_ib_req *q = (struct hc_ib_req *)(uintptr_t)(wc[i].wr_id & ~(uint64_t)HC_IB_REQ_TAG);
        if (++q->chunks_done == q->chunks) req_complete(c, q);
      }
    }
    if (n < HC_IB_POLL_BATCH) return HC_OK;
  }
}

/* Completed flush reads complete their receives, which may be another
 * connection's (the flush queue pair is the ctx's): *moved either way, so
 * that a blocking wait returns to its caller, which tests them all. Then
 * the flushes that waited for room are posted. */
static hc_result_t flush_progress(struct hc_ib_conn *c, bool *moved) {
  struct ibv_wc wc[HC_IB_POLL_BATCH];
  hc_result_t mine = HC_OK;
  int n;
  do {
    n = hc_ib_flush_poll(c->ctx, wc, HC_IB_POLL_BATCH);
    if (n < 0) return HC_FAIL(HC_ERR_SYSTEM, "ib: rank %d: polling the GPU flush completions failed", c->ctx->rank);
    for (int i = 0; i < n; i++) {
      struct hc_ib_req *q = (struct hc_ib_req *)(uintptr_t)wc[i].wr_id;
      struct hc_ib_conn *owner = q->conn;
      q->flushing = false;
      if (wc[i].status != HC_IBV_WC_SUCCESS) {
        hc_result_t r = HC_FAIL(HC_ERR_REMOTE,
                                "ib: rank %d: the flush read of a receive of %zu bytes from rank %d into GPU memory "
                                "failed: %s (status %d, vendor error 0x%x)",
                                c->ctx->rank, q->n, owner->peer, c->ctx->v->ibv_wc_status_str(wc[i].status),
                                wc[i].status, wc[i].vendor_err);
        /* The rest of the batch is polled already: each completion in it
         * still reaches its receive, or that receive would wait forever. */
        hc_ib_conn_fail(owner, r); /* keeps the text: another's test reports it, c's below */
        if (owner == c) mine = r;
        *moved = true;
        continue;
      }
      req_complete(owner, q);
      *moved = true;
    }
  } while (n == HC_IB_POLL_BATCH && mine == HC_OK);
  if (mine != HC_OK) return hc_ib_conn_check(c);
  for (struct hc_ib_req *q = c->recvq.head; q && c->flushes_due > 0; q = q->next)
    if (q->flush_due) {
      HC_TRY(flush_post(c, q));
      if (q->flush_due) return HC_OK; /* still no room */
    }
  return HC_OK;
}

/* ---- receiving direction ---- */

static hc_result_t take_eager(struct hc_ib_conn *c, bool *moved) {
  const struct hc_ib_ctx *ctx = c->ctx;
  while (c->eager_taken < c->eager_arrived) {
    uint32_t slot = (uint32_t)(c->eager_taken % ctx->eager_slots), imm = c->eager_meta[slot];
    uint32_t seq_bits = (imm >> 16) & HC_IB_SEQ14, size = imm & 0xffffu;
    struct hc_ib_req *q = recv_find(c, seq_bits, HC_IB_SEQ14);
    if (q == NULL) return HC_OK; /* its receive is not posted yet */
    const uint8_t *in = c->eager_in + (size_t)slot * hc_ib_eager_stride(ctx->eager_bytes);
    struct hc_net_sig sig = sig_get(in);
    if (!hc_net_sig_equal(&sig, &q->sig)) return sig_mismatch(c, &q->sig, &sig, false);
    if (q->n != size) return mismatch(c, size, q->n, false);
    if (q->device) /* its cts gave the address: the sender had to write there */
      return HC_FAIL(HC_ERR_REMOTE, "ib: rank %d sent message %u to rank %d's GPU memory through the eager ring",
                     c->peer, seq_bits, c->ctx->rank);
    if (size > 0) memcpy(q->buf, in + HC_IB_SIG_BYTES, size);
    c->eager_taken++;
    req_complete(c, q);
    *moved = true;
  }
  return HC_OK;
}

/* Tells the sender about freed slots: at once when the ring is drained
 * (the sender may be waiting for exactly these), else every half ring. */
static hc_result_t report_credit(struct hc_ib_conn *c) {
  uint64_t unreported = c->eager_taken - c->credit_reported;
  if (unreported == 0) return HC_OK;
  if (c->eager_taken != c->eager_arrived && unreported < HC_MAX(c->ctx->eager_slots / 2, 1u)) return HC_OK;
  if (!sq_has_room(c, 0)) return HC_OK;
  HC_TRY(post_write(c, 0, 0, NULL, 0, 0, c->remote.cts_addr, c->remote.cts_rkey,
                    hc_ib_imm(HC_IB_IMM_CREDIT, (uint32_t)c->eager_taken)));
  c->credit_reported = c->eager_taken;
  return HC_OK;
}

/* A cts for every posted receive, in order, at most cts_slots ahead of the
 * oldest receive not complete (the sender may still read that one's). */
static hc_result_t send_cts(struct hc_ib_conn *c, bool *moved) {
  struct hc_ib_ctx *ctx = c->ctx;
  uint64_t oldest = c->recv_posted;
  for (struct hc_ib_req *q = c->recvq.head; q; q = q->next)
    if (!q->complete) {
      oldest = q->seq;
      break;
    }
  /* Requests already freed by test() left gaps in the seqs: cts_sent
   * jumps over them. */
  for (struct hc_ib_req *q = c->recvq.head; q; q = q->next) {
    if (q->seq < c->cts_sent) continue;
    if (q->seq >= oldest + HC_IB_CTS_SLOTS) break;
    if (q->complete) { /* an eager message got there first */
      c->cts_sent = q->seq + 1;
      continue;
    }
    if (!sq_has_room(c, 0)) return HC_OK;
    uint64_t addr = 0;
    uint32_t rkey = 0;
    /* A small receive into GPU memory is written straight into it too:
     * the CPU cannot copy it out of the eager ring (a device receiver's
     * senders wait for this record). */
    if (q->n > ctx->eager_bytes || q->device) {
      if (q->reg == NULL) HC_TRY(hc_ib_reg_get(ctx, q->buf, q->n, true, &q->reg));
      addr = (uint64_t)(uintptr_t)q->buf;
      rkey = q->reg->mr->rkey;
    }
    uint32_t slot = (uint32_t)(q->seq % HC_IB_CTS_SLOTS);
    uint8_t *rec = c->cts_out + (size_t)slot * HC_IB_CTS_BYTES;
    put_le64(rec, addr);
    put_le64(rec + 8, (uint64_t)q->n);
    put_le64(rec + 16, (uint64_t)rkey);
    put_le64(rec + 24, q->seq);
    sig_put(rec + 32, &q->sig);
    HC_TRY(post_write(c, 0, 0, rec, c->block_mr->lkey, HC_IB_CTS_BYTES,
                      c->remote.cts_addr + (uint64_t)slot * HC_IB_CTS_BYTES, c->remote.cts_rkey,
                      hc_ib_imm(HC_IB_IMM_CTS, (uint32_t)q->seq)));
    c->cts_sent = q->seq + 1;
    *moved = true;
  }
  return HC_OK;
}

/* ---- sending direction ---- */

static hc_result_t send_eager(struct hc_ib_conn *c, struct hc_ib_req *q, bool *posted) {
  const struct hc_ib_ctx *ctx = c->ctx;
  *posted = false;
  if (c->eager_sent - c->eager_freed_remote >= ctx->eager_slots || !sq_has_room(c, 0)) return HC_OK;
  uint32_t slot = (uint32_t)(c->eager_sent % ctx->eager_slots);
  const size_t stride = hc_ib_eager_stride(ctx->eager_bytes);
  /* Signature and payload are one write, from the staging slot (inline
   * when they fit: the adapter copies at post time). */
  uint8_t *out = c->eager_out + (size_t)slot * stride;
  sig_put(out, &q->sig);
  struct ibv_sge sg[2] = {{.addr = (uint64_t)(uintptr_t)out, .length = HC_IB_SIG_BYTES, .lkey = c->block_mr->lkey}};
  if (q->device) { /* the payload from its registration: no CPU touches GPU memory */
    if (q->reg == NULL) HC_TRY(hc_ib_reg_get(c->ctx, q->buf, q->n, false, &q->reg));
    sg[1] = (struct ibv_sge){.addr = (uint64_t)(uintptr_t)q->buf, .length = (uint32_t)q->n, .lkey = q->reg->mr->lkey};
  } else if (q->n > 0) {
    memcpy(out + HC_IB_SIG_BYTES, q->buf, q->n);
    sg[0].length += (uint32_t)q->n;
  }
  q->chunks = 1;
  HC_TRY(post_write_sg(c, 0, (uint64_t)(uintptr_t)q | HC_IB_REQ_TAG, sg, q->device ? 2 : 1, !q->device,
                       c->remote.eager_addr + (uint64_t)slot * stride, c->remote.eager_rkey,
                       hc_ib_imm_eager(q->seq, q->n)));
  q->chunks_posted = 1;
  c->eager_sent++;
  *posted = true;
  return HC_OK;
}

/* The receiver's cts for q, checked against it: *have once it is there,
 * with its buffer in q->remote_addr and q->rkey (address 0: a small
 * receive into host memory, which takes the eager ring). */
static hc_result_t cts_take(struct hc_ib_conn *c, struct hc_ib_req *q, bool *have) {
  uint32_t slot = (uint32_t)(q->seq % HC_IB_CTS_SLOTS);
  *have = false;
  if (c->cts_have[slot] != ((uint32_t)q->seq & HC_IB_SEQ30) + 1) return HC_OK;
  const uint8_t *rec = c->cts_in + (size_t)slot * HC_IB_CTS_BYTES;
  uint64_t addr = get_le64(rec), size = get_le64(rec + 8), rkey = get_le64(rec + 16), seq = get_le64(rec + 24);
  if (seq != q->seq)
    return HC_FAIL(HC_ERR_INTERNAL, "ib: cts slot %u from rank %d names message %llu, expected %llu", slot, c->peer,
                   (unsigned long long)seq, (unsigned long long)q->seq);
  struct hc_net_sig want = sig_get(rec + 32);
  if (!hc_net_sig_equal(&want, &q->sig)) return sig_mismatch(c, &q->sig, &want, true);
  if (size != q->n) return mismatch(c, q->n, size, true);
  q->remote_addr = addr;
  q->rkey = (uint32_t)rkey;
  *have = true;
  return HC_OK;
}

/* Posts what it can of a message that goes into the receiver's own buffer
 * (a large one, or a small one to a device receiver that gave its
 * address); *all_posted once every chunk is. */
static hc_result_t send_chunks(struct hc_ib_conn *c, struct hc_ib_req *q, bool *all_posted) {
  struct hc_ib_ctx *ctx = c->ctx;
  *all_posted = false;
  if (q->chunks == 0) { /* first visit: the buffer registered for reading */
    if (!q->cts_seen) HC_TRY(cts_take(c, q, &q->cts_seen));
    if (!q->cts_seen) return HC_OK;
    if (q->reg == NULL) HC_TRY(hc_ib_reg_get(ctx, q->buf, q->n, false, &q->reg));
    q->chunks = HC_MAX(HC_DIV_UP(q->n, ctx->chunk), (size_t)1);
  }
  while (q->chunks_posted < q->chunks) {
    int qp = (int)(q->chunks_posted % (size_t)c->nqps);
    if (!sq_has_room(c, qp)) return HC_OK;
    size_t off = q->chunks_posted * ctx->chunk, len = HC_MIN(ctx->chunk, q->n - off);
    HC_TRY(post_write(c, qp, (uint64_t)(uintptr_t)q | HC_IB_REQ_TAG, q->buf + off, q->reg->mr->lkey, len,
                      q->remote_addr + off, q->rkey, hc_ib_imm(HC_IB_IMM_DATA, (uint32_t)q->seq)));
    q->chunks_posted++;
  }
  *all_posted = true;
  return HC_OK;
}

/* Posts what it can of q by its protocol: eager for a small message
 * (after the cts where the peer is a device receiver: a cts with an
 * address takes it as one chunk), chunks after the cts for a large one. */
static hc_result_t send_one(struct hc_ib_conn *c, struct hc_ib_req *q, bool *done) {
  if (q->n > c->ctx->eager_bytes) return send_chunks(c, q, done);
  if ((c->remote.flags & HC_IB_SETUP_DEVICE_RECV) && q->chunks == 0 && !q->cts_seen) {
    *done = false;
    HC_TRY(cts_take(c, q, &q->cts_seen));
    if (!q->cts_seen) return HC_OK;
  }
  if (q->cts_seen && q->remote_addr != 0) return send_chunks(c, q, done);
  return send_eager(c, q, done);
}

static hc_result_t send_progress(struct hc_ib_conn *c, bool *moved) {
  while (c->send_cur != NULL) {
    struct hc_ib_req *q = c->send_cur;
    bool done = false;
    size_t before = q->chunks_posted;
    HC_TRY(send_one(c, q, &done));
    if (q->chunks_posted != before) *moved = true;
    if (!done) return HC_OK;
    c->send_cur = q->next;
  }
  return HC_OK;
}

/* The control connection: a record from the peer is its reason for giving
 * up; an error is the peer gone. */
static hc_result_t control_check(struct hc_ib_conn *c) {
  int done = 0;
  if (c->bye_recv == NULL) return HC_OK;
  hc_result_t r = hc_net_socket.test(c->bye_recv, &done);
  if (r != HC_OK) {
    char why[256];
    snprintf(why, sizeof(why), "%s", hc_last_error()); /* HC_FAIL rewrites the buffer it points into */
    c->bye_recv = NULL;                                /* the socket conn failed; its requests die with it */
    return HC_FAIL(HC_ERR_REMOTE,
                   "ib: rank %d closed its control connection to rank %d (it died, or failed "
                   "and closed its connections): %s",
                   c->peer, c->ctx->rank, why);
  }
  if (!done) return HC_OK;
  c->bye_recv = NULL;
  if (get_le64(c->bye_in) == HC_IB_BYE_SIG) {
    struct hc_net_sig theirs = sig_get(c->bye_in + 8), mine = sig_get(c->bye_in + 24);
    return hc_net_sig_fail(c->ctx->sig_explain, c->ctx->rank, &mine, c->peer, &theirs, false);
  }
  if (get_le64(c->bye_in) == HC_IB_BYE_MISMATCH)
    return HC_FAIL(HC_ERR_USAGE,
                   "ib: mismatched counts: rank %d found that a message of %llu bytes met a receive "
                   "of %llu bytes between it and rank %d",
                   c->peer, (unsigned long long)get_le64(c->bye_in + 8), (unsigned long long)get_le64(c->bye_in + 16),
                   c->ctx->rank);
  return HC_FAIL(HC_ERR_REMOTE, "ib: rank %d gave up on the connection with rank %d", c->peer, c->ctx->rank);
}

hc_result_t hc_ib_conn_progress(struct hc_ib_conn *c, bool *moved) {
  bool here = false;
  HC_TRY(hc_ib_conn_check(c));
  HC_TRY(poll_cq(c, &here));
  HC_TRY(flush_progress(c, &here));
  HC_TRY(take_eager(c, &here));
  HC_TRY(report_credit(c));
  HC_TRY(send_cts(c, &here));
  HC_TRY(send_progress(c, &here));
  *moved = *moved || here;
  /* The control connection costs a syscall: looked at only when nothing
   * moved, at most every HC_IB_CONTROL_NS (a dead peer is still noticed
   * within a millisecond of the engine going idle). */
  uint64_t now = here ? 0 : hc_now_ns();
  if (here || now - c->control_checked_ns < HC_IB_CONTROL_NS) return HC_OK;
  c->control_checked_ns = now;
  return control_check(c);
}

/* ---- ops ---- */

static hc_result_t post(struct hc_ib_conn *c, void *buf, size_t n, const struct hc_net_sig *sig, bool is_send,
                        void **out) {
  const char *what = is_send ? "isend" : "irecv";
  *out = NULL;
  if (c == NULL) return HC_FAIL(HC_ERR_ARG, "ib: %s on a NULL connection", what);
  HC_TRY(hc_ib_conn_check(c));
  if (buf == NULL && n > 0)
    return HC_FAIL(HC_ERR_ARG, "ib: %s of %zu bytes %s rank %d with a NULL buffer", what, n, is_send ? "to" : "from",
                   c->peer);
  struct hc_ib_req *q;
  HC_TRY(hc_calloc(&q, 1, sizeof(*q), "an ib request"));
  q->conn = c;
  q->buf = buf;
  q->n = n;
  if (sig != NULL) q->sig = *sig;
  q->is_send = is_send;
  /* A small message of GPU memory never passes through the CPU (the
   * "device receiver" and "device eager" of ib_priv.h). */
  if (c->ctx->device_recv && n > 0 && n <= c->ctx->eager_bytes) {
    struct hc_ptr_info info = {.kind = HC_MEM_HOST};
    hc_result_t r = hc_dev_ptr_query(buf, &info);
    if (r != HC_OK) {
      free(q);
      return r;
    }
    q->device = info.kind != HC_MEM_HOST;
  }
  struct hc_ib_queue *fifo = is_send ? &c->sendq : &c->recvq;
  if (is_send) {
    q->seq = c->send_posted++;
    if (c->send_cur == NULL) c->send_cur = q;
  } else {
    q->seq = c->recv_posted++;
    q->chunks = HC_MAX(HC_DIV_UP(n, c->ctx->chunk), (size_t)1); /* if it comes in chunks */
  }
  q->prev = fifo->tail;
  if (fifo->tail) fifo->tail->next = q;
  else fifo->head = q;
  fifo->tail = q;
  *out = q;
  /* Start at once: the cts of a receive, the first writes of a send. */
  bool moved = false;
  hc_result_t r = hc_ib_conn_progress(c, &moved);
  if (r != HC_OK) return hc_ib_conn_fail(c, r);
  return HC_OK;
}

hc_result_t hc_ib_isend(void *conn, const void *buf, size_t n, const struct hc_net_sig *sig, void **req) {
  /* The cast drops const only to share post(); a send never writes buf. */
  return post(conn, (void *)buf, n, sig, true, req);
}

hc_result_t hc_ib_irecv(void *conn, void *buf, size_t n, const struct hc_net_sig *sig, void **req) {
  return post(conn, buf, n, sig, false, req);
}

static void req_unlink(struct hc_ib_conn *c, struct hc_ib_req *q) {
  struct hc_ib_queue *fifo = q->is_send ? &c->sendq : &c->recvq;
  if (q->prev) q->prev->next = q->next;
  else fifo->head = q->next;
  if (q->next) q->next->prev = q->prev;
  else fifo->tail = q->prev;
}

hc_result_t hc_ib_test(void *req, int *done) {
  struct hc_ib_req *q = req;
  *done = 0;
  if (q == NULL) return HC_FAIL(HC_ERR_ARG, "ib: test of a NULL request");
  struct hc_ib_conn *c = q->conn;
  if (!q->complete) {
    HC_TRY(hc_ib_conn_check(c));
    bool moved = false;
    hc_result_t r = hc_ib_conn_progress(c, &moved);
    if (r != HC_OK) return hc_ib_conn_fail(c, r);
    if (!q->complete) return HC_OK;
  }
  req_unlink(c, q);
  c->n_complete--;
  free(q);
  *done = 1;
  return HC_OK;
}

void hc_ib_conn_free_reqs(struct hc_ib_conn *c) {
  struct hc_ib_queue *fifos[2] = {&c->sendq, &c->recvq};
  for (int i = 0; i < 2; i++) {
    struct hc_ib_req *q = fifos[i]->head;
    while (q) {
      struct hc_ib_req *next = q->next;
      if (q->reg) hc_ib_reg_put(c->ctx, q->reg);
      free(q);
      q = next;
    }
    fifos[i]->head = fifos[i]->tail = NULL;
  }
  c->send_cur = NULL;
  c->n_complete = 0;
}
