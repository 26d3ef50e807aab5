/*
 * Latency algorithms (recursive doubling, binomial trees) and pipelined
 * chains for rooted collectives.
 *
 * Virtual rank: v = (rank - root) mod n, so the root is 0. Binomial tree:
 * v's parent is v minus its lowest set bit; its children are v + m for the
 * powers of two m below that bit.
 * Chain: v receives each chunk from v-1 and forwards it to v+1 (broadcast),
 * or receives from v+1, adds its own and forwards to v-1 (reduce).
 */
#include <stdlib.h>

#include "plan_priv.h"

/* The rank of virtual rank v: a member of x (plan.h, hc_plan_ctx.members)
 * whose index is (v + root) mod n. */
static int real_rank(const struct hc_plan_ctx *x, int v, int root) { return hc_member(x, (v + root) % x->nranks); }

/* Recursive doubling with the usual fold for non powers of two: of the
 * first 2*rem ranks, each even one hands its data to the odd one above it
 * and gets the result back at the end. Partners order their operands by
 * rank, so both compute the same bits. The first exchange sends the input
 * and the first sum reads it, as the tree's reduce does: no copy of it
 * into the output first. */
hc_result_t hc_rd_allreduce(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                            struct hc_alg_io io) {
  const int n = x->nranks, r = x->rank;
  const size_t es = hc_dtype_size(a->dtype), bytes = a->count * es;
  const enum hc_redop op = hc_step_op(a->op);
  const void *sum = io.in; /* this rank's partial result so far */
  hc_ref_t cur = io.in_dep;
  if (n == 1) cur = hc_push_copy(p, io.out, io.in, bytes, cur, 0);
  if (n > 1) {
    int pof2 = 1;
    while (pof2 * 2 <= n) pof2 *= 2;
    const int rem = n - pof2;
    void *tmp = hc_plan_scratch(p, bytes);
    if (tmp == NULL) return HC_OK; /* the plan reports out of memory */
    int newrank;
    hc_ref_t tmp_free = 0; /* the last step that read tmp */
    if (r < 2 * rem) {
      if (r % 2 == 0) {
        cur = hc_push_send(p, r + 1, sum, bytes, cur, 0);
        newrank = -1;
      } else {
        hc_ref_t got = hc_push_recv(p, r - 1, tmp, bytes, 0, 0);
        cur = tmp_free = hc_push_reduce(p, io.out, tmp, sum, a->count, a->dtype, op, got, cur, 0);
        sum = io.out;
        newrank = r / 2;
      }
    } else {
      newrank = r - rem;
    }
    if (newrank >= 0) {
      for (int mask = 1; mask < pof2; mask <<= 1) {
        int newpeer = newrank ^ mask;
        int peer = newpeer < rem ? newpeer * 2 + 1 : newpeer + rem;
        hc_ref_t sent = hc_push_send(p, peer, sum, bytes, cur, 0);
        hc_ref_t got = hc_push_recv(p, peer, tmp, bytes, tmp_free, 0);
        const void *lo = peer < r ? tmp : sum, *hi = peer < r ? sum : tmp;
        cur = tmp_free = hc_push_reduce(p, io.out, lo, hi, a->count, a->dtype, op, sent, got, cur);
        sum = io.out;
      }
    }
    if (r < 2 * rem) {
      if (r % 2 == 1) cur = hc_push_send(p, r - 1, io.out, bytes, cur, 0);
      else cur = hc_push_recv(p, r + 1, io.out, bytes, cur, 0);
    }
  }
  hc_push_avg(p, a, io.out, a->count, n, cur);
  return HC_OK;
}

/* All-gather by recursive doubling, for a power of two of ranks: in
 * round k each rank swaps the 2^k blocks it holds (aligned, so one run of
 * out) with rank ^ 2^k. log2(n) exchanges in sequence instead of one
 * step's n-1 messages into and out of every rank. A round's send reads
 * what the round before received, and what it received itself it reads
 * only after its own send of the round before (which waited for the rest). */
hc_result_t hc_rd_allgather(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                            struct hc_alg_io io) {
  const int n = x->nranks, r = x->rank;
  const size_t es = hc_dtype_size(a->dtype), block = a->count * es;
  hc_ref_t held = hc_push_copy(p, HC_PTR(io.out, (size_t)r * a->count, es), io.in, block, io.in_dep, 0);
  hc_ref_t got = 0;
  for (int mask = 1; mask < n; mask <<= 1) {
    const int peer = r ^ mask, mine = r & ~(mask - 1), theirs = peer & ~(mask - 1);
    const size_t bytes = (size_t)mask * block;
    held = hc_push_send(p, hc_member(x, peer), HC_PTR(io.out, (size_t)mine * a->count, es), bytes, held, got);
    got = hc_push_recv(p, hc_member(x, peer), HC_PTR(io.out, (size_t)theirs * a->count, es), bytes, 0, 0);
  }
  return HC_OK;
}

/* Reduce-scatter by recursive halving, for a power of two of ranks: in the
 * round of mask (n/2, n/4 ... 1) a rank holds partial sums of the 2*mask
 * aligned blocks around its own; it sends the half that holds rank ^
 * mask's block to that rank and adds the peer's half that holds its own.
 * log2(n) exchanges in sequence, each half the size of the one before,
 * instead of the direct algorithm's n-1 messages into and out of every
 * rank at once: all-gather's recursive doubling run backwards. The first
 * round reads the input, the last writes the output; between them the
 * partial sums live in work (n/2 blocks, from the first round's half on). */
hc_result_t hc_rh_reducescatter(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                struct hc_alg_io io) {
  const int n = x->nranks, r = x->rank;
  const size_t es = hc_dtype_size(a->dtype), block = a->count * es;
  const enum hc_redop op = hc_step_op(a->op);
  if (n == 1) {
    hc_push_avg(p, a, io.out, a->count, n, hc_push_copy(p, io.out, io.in, block, io.in_dep, 0));
    return HC_OK;
  }
  uint8_t *tmp = hc_plan_scratch(p, (size_t)(n / 2) * block);
  uint8_t *work = n > 2 ? hc_plan_scratch(p, (size_t)(n / 2) * block) : NULL;
  if (tmp == NULL || (n > 2 && work == NULL)) return HC_OK; /* the plan reports out of memory */
  const int work_first = r & ~(n / 2 - 1);                  /* the first block of the first round's half */
  const uint8_t *held = io.in;                              /* where block held_first + i lies, at i * block */
  int held_first = 0;
  hc_ref_t cur = io.in_dep, tmp_free = 0;
  for (int mask = n / 2; mask >= 1; mask >>= 1) {
    const int peer = r ^ mask, mine = r & ~(mask - 1), theirs = peer & ~(mask - 1);
    const size_t bytes = (size_t)mask * block;
    const uint8_t *own = held + (size_t)(mine - held_first) * block;
    void *dst = mask == 1 ? io.out : work + (size_t)(mine - work_first) * block;
    hc_push_send(p, hc_member(x, peer), held + (size_t)(theirs - held_first) * block, bytes, cur, 0);
    hc_ref_t got = hc_push_recv(p, hc_member(x, peer), tmp, bytes, tmp_free, 0);
    const void *lo = peer < r ? tmp : own, *hi = peer < r ? own : tmp;
    cur = tmp_free = hc_push_reduce(p, dst, lo, hi, (size_t)mask * a->count, a->dtype, op, got, cur, 0);
    held = work;
    held_first = work_first;
  }
  hc_push_avg(p, a, io.out, a->count, n, cur);
  return HC_OK;
}

hc_result_t hc_tree_broadcast(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                              struct hc_alg_io io) {
  const int n = x->nranks, root = a->root, v = (x->rank - root + n) % n;
  const size_t bytes = a->count * hc_dtype_size(a->dtype);
  const void *src = io.in;
  hc_ref_t ready = io.in_dep;
  int mask = 1;
  if (v == 0) {
    while (mask < n) mask <<= 1;
  } else {
    while (mask < n && !(v & mask)) mask <<= 1;
    ready = hc_push_recv(p, real_rank(x, v - mask, root), io.out, bytes, 0, 0);
    src = io.out;
    if (io.out_ready) *io.out_ready = ready;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < n) hc_push_send(p, real_rank(x, v + mask, root), src, bytes, ready, 0);
  /* The root's own copy after its sends: a GPU stream takes the steps in
   * this order, and ahead of them the copy kept every child waiting. A host
   * pass still runs it first, as a ready local step (behind the sends, as
   * the chain has it, an 8-byte broadcast of 2 ranks took 0.20 us against
   * 0.11, one pass more). */
  if (v == 0) {
    hc_ref_t copied = hc_push_copy(p, io.out, io.in, bytes, io.in_dep, 0);
    if (io.out_ready) *io.out_ready = copied;
  }
  return HC_OK;
}

hc_result_t hc_chain_broadcast(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                               struct hc_alg_io io) {
  const int n = x->nranks, root = a->root, v = (x->rank - root + n) % n;
  const size_t es = hc_dtype_size(a->dtype);
  const size_t nch = hc_nchunks(a->count, es, x->chunk_bytes);
  for (size_t c = 0; c < nch; c++) {
    size_t off, len;
    hc_chunk(a->count, nch, c, &off, &len);
    if (len == 0) continue;
    hc_ref_t ready = io.in_dep;
    const void *src = HC_PTR(io.in, off, es);
    if (v > 0) {
      ready = hc_push_recv(p, real_rank(x, v - 1, root), HC_PTR(io.out, off, es), len * es, 0, 0);
      src = HC_PTR(io.out, off, es);
    }
    hc_ref_t sent = v < n - 1 ? hc_push_send(p, real_rank(x, v + 1, root), src, len * es, ready, 0) : ready;
    /* The root's own copy, chunk by chunk behind the sends: a pass runs
     * ready local steps before it posts transfers, so one copy of the
     * whole buffer first kept the next rank waiting for it (a third of
     * an 8 MiB broadcast of 2 ranks), and the chunk is still in cache. */
    if (v == 0) hc_push_copy(p, HC_PTR(io.out, off, es), src, len * es, sent, 0);
  }
  return HC_OK;
}

/* Binomial reduce: each rank adds what its children send (one receive
 * buffer per child, so all of them can arrive at once) and sends the sum to
 * its parent. Only the root's result is visible, so the order of operands
 * needs no agreement between ranks. The first sum reads the input itself,
 * and a leaf sends its input as it is: no copy of it first (on a GPU one
 * more operation on the stream, and between processes sharing the GPU a
 * switch of contexts more: 2-rank reduces up to 32 KiB took 265-306 us
 * against 138-213 for the chain, which copied nothing). */
hc_result_t hc_tree_reduce(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                           struct hc_alg_io io) {
  const int n = x->nranks, root = a->root, v = (x->rank - root + n) % n;
  const size_t es = hc_dtype_size(a->dtype), bytes = a->count * es;
  const enum hc_redop op = hc_step_op(a->op);
  int nchildren = 0;
  for (int mask = 1; mask < n && !(v & mask); mask <<= 1)
    if (v + mask < n) nchildren++;
  void *acc = v == 0 ? io.out : nchildren ? hc_plan_scratch(p, bytes) : NULL;
  char *tmp = nchildren ? hc_plan_scratch(p, bytes * (size_t)nchildren) : NULL;
  if (nchildren && (acc == NULL || tmp == NULL)) return HC_OK; /* the plan reports it */
  const void *sum = io.in; /* this rank's input plus what its children sent so far */
  hc_ref_t cur = io.in_dep;
  int child = 0;
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v & mask) {
      hc_push_send(p, real_rank(x, v - mask, root), sum, bytes, cur, 0);
      break;
    }
    if (v + mask < n) {
      void *in_child = tmp + (size_t)child++ * bytes;
      hc_ref_t got = hc_push_recv(p, real_rank(x, v + mask, root), in_child, bytes, 0, 0);
      cur = hc_push_reduce(p, acc, sum, in_child, a->count, a->dtype, op, got, cur, 0);
      sum = acc;
    }
  }
  if (v == 0) {
    if (sum == io.in) cur = hc_push_copy(p, io.out, io.in, bytes, cur, 0); /* no children: one rank */
    cur = hc_push_avg(p, a, io.out, a->count, n, cur);
    if (io.out_ready) *io.out_ready = cur;
  }
  return HC_OK;
}

hc_result_t hc_chain_reduce(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                            struct hc_alg_io io) {
  const int n = x->nranks, root = a->root, v = (x->rank - root + n) % n;
  const size_t es = hc_dtype_size(a->dtype);
  const enum hc_redop op = hc_step_op(a->op);
  if (n == 1) {
    hc_ref_t d = hc_push_copy(p, io.out, io.in, a->count * es, io.in_dep, 0);
    hc_push_avg(p, a, io.out, a->count, n, d);
    return HC_OK;
  }
  const size_t nch = hc_nchunks(a->count, es, x->chunk_bytes);
  struct hc_slots sl = {0}; /* the chain's last rank only sends */
  if (v != n - 1) HC_TRY(hc_slots_create(p, x, HC_DIV_UP(a->count, nch) * es, nch, &sl));
  for (size_t c = 0; c < nch; c++) {
    size_t off, len;
    hc_chunk(a->count, nch, c, &off, &len);
    if (len == 0) continue;
    const void *mine = HC_PTR(io.in, off, es);
    if (v == n - 1) {
      hc_push_send(p, real_rank(x, v - 1, root), mine, len * es, io.in_dep, 0);
      continue;
    }
    hc_ref_t *slot_user;
    void *slot = hc_slot_take(&sl, &slot_user);
    hc_ref_t got = hc_push_recv(p, real_rank(x, v + 1, root), slot, len * es, *slot_user, 0);
    void *dst = v == 0 ? HC_PTR(io.out, off, es) : slot;
    hc_ref_t red = hc_push_reduce(p, dst, mine, slot, len, a->dtype, op, got, io.in_dep, 0);
    if (v == 0) *slot_user = hc_push_avg(p, a, dst, len, n, red);
    else *slot_user = hc_push_send(p, real_rank(x, v - 1, root), slot, len * es, red, 0);
  }
  hc_slots_destroy(&sl);
  return HC_OK;
}
