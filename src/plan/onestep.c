/*
 * One-step algorithms for small messages: every rank sends its whole
 * contribution to every other rank at once, and each rank finishes alone.
 * One exchange instead of log2(n) (recursive doubling) or n-1 (ring)
 * rounds in sequence, at the price of n-1 copies of the data per rank: the
 * right trade while a message fits a transport's small-message path (the
 * shm descriptor's inline payload), where a round costs one cache-line
 * round trip whatever the bytes.
 *
 * All-reduce: rank r sends its input to every peer and receives peer p's
 * input into scratch part p; it then reduces the n inputs in rank order,
 * ((in_0 op in_1) op in_2) ..., so that every rank computes the same bits.
 * With two ranks the exchange goes in pieces of the comm's chunk (a GPU
 * comm's window slot), each received into one of a few scratch slots and
 * reduced as soon as it lands: scratch stays a few pieces at any size.
 * Not the ring's cut into halves of a slot: on the H100, two GPU ranks as
 * processes (each piece one more switch between their contexts) took 1500
 * us at 16 MiB in 4 MiB pieces against 1052 in 8 MiB ones. algos.c chooses
 * one step for two GPU ranks up to one piece.
 * All-gather: rank r sends its block to every peer, which receives it
 * straight into block r of its output.
 * Broadcast: the root sends its message to every peer, which receives it
 * straight into its output: one hop for every rank, where the binomial
 * tree takes log2(n) hops in sequence; only where forced (algos.c), since
 * the root's n-1 posts per call made calls back to back slower than the
 * tree's.
 * Sends go in the order r+1, r+2, ... (mod n) and receives in the order
 * r-1, r-2, ..., so that the first message every rank waits for is the
 * first one its sender posts.
 */
#include <stdlib.h>

#include "plan_priv.h"

static hc_result_t pair_allreduce(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                  struct hc_alg_io io) {
  const int r = x->rank, peer = hc_member(x, 1 - r);
  const size_t es = hc_dtype_size(a->dtype), nch = hc_nchunks(a->count, es, x->chunk_bytes);
  struct hc_slots sl;
  HC_TRY(hc_slots_create(p, x, HC_DIV_UP(a->count, nch) * es, nch, &sl));
  const enum hc_redop op = hc_step_op(a->op);
  for (size_t c = 0; c < nch; c++) {
    size_t off, len;
    hc_chunk(a->count, nch, c, &off, &len);
    if (len == 0) continue;
    hc_ref_t *slot_user; /* the slot's last reduction */
    void *slot = hc_slot_take(&sl, &slot_user);
    const void *mine = HC_PTR(io.in, off, es);
    void *out = HC_PTR(io.out, off, es);
    const hc_ref_t sent = hc_push_send(p, peer, mine, len * es, io.in_dep, 0);
    const hc_ref_t got = hc_push_recv(p, peer, slot, len * es, *slot_user, 0);
    /* After its send: out may be the input. Rank 0's piece first on both
     * ranks, so that both compute the same bits. */
    *slot_user =
        hc_push_reduce(p, out, r == 0 ? mine : slot, r == 0 ? slot : mine, len, a->dtype, op, sent, got, io.in_dep);
    hc_reduce_reads_landing(p, *slot_user, slot);
    hc_push_avg(p, a, out, len, 2, *slot_user);
  }
  hc_slots_destroy(&sl);
  return HC_OK;
}

hc_result_t hc_onestep_allreduce(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                 struct hc_alg_io io) {
  const int n = x->nranks, r = x->rank;
  const size_t es = hc_dtype_size(a->dtype), bytes = a->count * es;
  const enum hc_redop op = hc_step_op(a->op);
  if (n == 1) {
    hc_push_avg(p, a, io.out, a->count, n, hc_push_copy(p, io.out, io.in, bytes, io.in_dep, 0));
    return HC_OK;
  }
  if (n == 2) return pair_allreduce(p, x, a, io);
  char *parts = hc_plan_scratch(p, (size_t)n * bytes); /* part v: rank v's input */
  hc_ref_t *refs = calloc((size_t)n * 2, sizeof(hc_ref_t));
  if (parts == NULL || refs == NULL) {
    free(refs);
    return parts == NULL ? HC_OK /* the plan reports out of memory */
                         : HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory for %d step records", 2 * n);
  }
  hc_ref_t *got = refs, *sent = refs + n; /* per rank index */
  for (int k = 1; k < n; k++) {
    const int to = (r + k) % n, from = (r - k + n) % n;
    sent[k - 1] = hc_push_send(p, hc_member(x, to), io.in, bytes, io.in_dep, 0);
    got[from] = hc_push_recv(p, hc_member(x, from), parts + (size_t)from * bytes, bytes, 0, 0);
  }
  /* In place, a rank past the first two would read its input after the
   * first reduction overwrote it: it reduces a copy in its own part. */
  const void *mine = io.in;
  got[r] = io.in_dep;
  int nbefore = n - 1;
  const char *in = io.in, *out = io.out;
  if (r >= 2 && in < out + bytes && out < in + bytes) {
    mine = parts + (size_t)r * bytes;
    got[r] = sent[nbefore++] = hc_push_copy(p, parts + (size_t)r * bytes, io.in, bytes, io.in_dep, 0);
  }
  /* The first write of out waits for every send: out may be the input. */
  hc_ref_t acc = hc_plan_join(p, sent, nbefore);
  const void *first = r == 0 ? mine : parts;
  const void *second = r == 1 ? mine : parts + bytes;
  acc = hc_push_reduce(p, io.out, first, second, a->count, a->dtype, op, acc, got[0], got[1]);
  for (int v = 2; v < n; v++) {
    const void *in_v = v == r ? mine : parts + (size_t)v * bytes;
    acc = hc_push_reduce(p, io.out, io.out, in_v, a->count, a->dtype, op, acc, got[v], 0);
  }
  free(refs);
  hc_push_avg(p, a, io.out, a->count, n, acc);
  return HC_OK;
}

hc_result_t hc_onestep_allgather(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                 struct hc_alg_io io) {
  const int n = x->nranks, r = x->rank;
  const size_t es = hc_dtype_size(a->dtype), bytes = a->count * es;
  hc_push_copy(p, HC_PTR(io.out, (size_t)r * a->count, es), io.in, bytes, io.in_dep, 0);
  for (int k = 1; k < n; k++) {
    const int to = (r + k) % n, from = (r - k + n) % n;
    hc_push_send(p, hc_member(x, to), io.in, bytes, io.in_dep, 0);
    hc_push_recv(p, hc_member(x, from), HC_PTR(io.out, (size_t)from * a->count, es), bytes, 0, 0);
  }
  return HC_OK;
}

hc_result_t hc_onestep_broadcast(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                 struct hc_alg_io io) {
  const int n = x->nranks, root = a->root;
  const size_t bytes = a->count * hc_dtype_size(a->dtype);
  if (x->rank != root) {
    hc_ref_t got = hc_push_recv(p, hc_member(x, root), io.out, bytes, 0, 0);
    if (io.out_ready) *io.out_ready = got;
    return HC_OK;
  }
  hc_ref_t first_sent = io.in_dep;
  for (int k = 1; k < n; k++) {
    hc_ref_t sent = hc_push_send(p, hc_member(x, (root + k) % n), io.in, bytes, io.in_dep, 0);
    if (k == 1) first_sent = sent;
  }
  /* After a send: a pass runs ready local steps before it posts
   * transfers, and the peers need not wait for the root's own copy. */
  const hc_ref_t copied = io.out == io.in ? io.in_dep : hc_push_copy(p, io.out, io.in, bytes, first_sent, 0);
  if (io.out_ready) *io.out_ready = copied;
  return HC_OK;
}
