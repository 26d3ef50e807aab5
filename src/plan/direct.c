/*
 * Direct algorithms: every rank exchanges with every other rank at once,
 * each block going straight from the rank that has it to the rank that
 * needs it. Two rounds of dependencies (all-reduce) or one (reduce-scatter,
 * all-gather) instead of the ring's 2(n-1) or n-1 steps in sequence, for
 * the same bytes per rank. On shm the receiver pulls each piece straight out
 * of the sender's buffer (CMA or a registered buffer: one copy), and
 * reduces it while it is still in its cache.
 *
 * Terms: block b is the part of the vector that rank b reduces (all-reduce:
 * hc_block of the whole count; reduce-scatter: rank b's output, `count`
 * elements at b * count of every input). A block is cut into pieces of at
 * most HETCCL_DIRECT_CHUNK_BYTES, every block into the same number
 * (computed from the longest block), so sender and receiver cut alike. A
 * slot set holds one piece from every peer; its own entry (index rank) is
 * the accumulator of the piece's reduction. Slot set c % depth serves piece
 * c and is reused once piece c's last reduction has read it.
 *
 * Reduce-scatter (round 1): rank r sends piece c of block v of its input to
 * every peer v, and receives piece c of block r from every peer into the
 * slot set; it reduces the n contributions in rank order
 * (((in_0 op in_1) op in_2) ...), the last reduction writing the output.
 * Every element is reduced once, on its owner, so all-reduce results are
 * the same bits on every rank.
 * All-reduce (round 2): rank r sends each finished piece of its block to
 * every peer, and receives the pieces of block v from rank v straight into
 * its output. In place, that receive overwrites the input piece sent to v
 * in round 1, so it waits for that send; and it waits for the input to be
 * ready (a PreMulSum's scaled copy reads the caller's buffer, which in
 * place is the output).
 * All-gather needs no reduction: the one-step all-gather (onestep.c) is the
 * direct one.
 *
 * Matching: per pair and direction, every round-1 transfer comes before
 * every round-2 one, pieces in order, on both ends.
 */
#include <stdlib.h>

#include "plan_priv.h"

/* Slot sets of the pieces in flight: two, so that the pulls of piece c+1
 * run while piece c is reduced; one when HETCCL_SCRATCH_SLOTS says so. */
#define DIRECT_DEPTH 2

struct direct_layout {
  int n, r;
  size_t es, nch, piece_elems;
  bool allreduce;
  size_t count; /* all-reduce: the whole vector; reduce-scatter: per rank */
};

/* Block b: first element in the input, length. */
static void direct_block(const struct direct_layout *l, int b, size_t *off, size_t *len) {
  if (l->allreduce) {
    hc_block(l->count, l->n, b, off, len);
  } else {
    *off = (size_t)b * l->count;
    *len = l->count;
  }
}

static hc_result_t direct_reduce(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                 struct hc_alg_io io, bool allreduce) {
  const int n = x->nranks, r = x->rank;
  const size_t es = hc_dtype_size(a->dtype);
  const enum hc_redop op = hc_step_op(a->op);
  struct direct_layout l = {.n = n, .r = r, .es = es, .allreduce = allreduce, .count = a->count};
  const size_t maxlen = allreduce ? HC_DIV_UP(a->count, (size_t)n) : a->count;
  l.nch = hc_nchunks(maxlen, es, x->direct_chunk_bytes ? x->direct_chunk_bytes : x->chunk_bytes);
  l.piece_elems = HC_DIV_UP(maxlen, l.nch);
  size_t my_off, my_len, off, len, coff, clen;
  direct_block(&l, r, &my_off, &my_len);
  char *const out_block = allreduce ? HC_PTR(io.out, my_off, es) : (char *)io.out;
  if (n == 1) {
    hc_ref_t d = hc_push_copy(p, out_block, HC_PTR(io.in, my_off, es), my_len * es, io.in_dep, 0);
    hc_push_avg(p, a, out_block, my_len, n, d);
    return HC_OK;
  }
  const int depth = (int)HC_MIN((size_t)HC_MIN(x->scratch_slots, DIRECT_DEPTH), l.nch);
  const size_t slot_bytes = l.piece_elems * es, set_bytes = (size_t)n * slot_bytes;
  char *slots = hc_plan_scratch(p, (size_t)depth * set_bytes);
  /* Per (peer, piece): the round-1 send (in place, round 2's receive into
   * the same bytes waits for it); per piece: the step after which it is
   * final in the output; per slot set: its last reader. */
  hc_ref_t *sent = calloc((size_t)n * l.nch + l.nch + (size_t)depth + (size_t)n, sizeof(hc_ref_t));
  if (slots == NULL || sent == NULL) {
    free(sent);
    return slots == NULL ? HC_OK /* the plan reports out of memory */
                         : HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory for %d x %zu step records", n, l.nch);
  }
  /* got_from[v]: the receive of the current piece from v. */
  hc_ref_t *final = sent + (size_t)n * l.nch, *set_free = final + l.nch, *got_from = set_free + depth;

  /* Round 1: sends, to peers r+1, r+2, ... so that no rank is everyone's
   * first. They read only the input. */
  for (int k = 1; k < n; k++) {
    const int v = (r + k) % n;
    direct_block(&l, v, &off, &len);
    for (size_t c = 0; c < l.nch; c++) {
      hc_chunk(len, l.nch, c, &coff, &clen);
      if (clen) sent[(size_t)v * l.nch + c] = hc_push_send(p, hc_member(x, v), HC_PTR(io.in, off + coff, es), clen * es,
                                                          io.in_dep, 0);
    }
  }
  /* Round 1: receives and reductions, piece by piece. */
  for (size_t c = 0; c < l.nch; c++) {
    hc_chunk(my_len, l.nch, c, &coff, &clen);
    if (clen == 0) continue;
    const int si = (int)(c % (size_t)depth);
    char *set = slots + (size_t)si * set_bytes;
    for (int k = 1; k < n; k++) {
      const int v = (r - k + n) % n;
      got_from[v] = hc_push_recv(p, hc_member(x, v), set + (size_t)v * slot_bytes, clen * es, set_free[si], 0);
    }
    got_from[r] = io.in_dep;
    const void *mine = HC_PTR(io.in, my_off + coff, es);
    char *acc = set + (size_t)r * slot_bytes, *dst_final = out_block + coff * es;
    hc_ref_t chain = 0;
    for (int v = 1; v < n; v++) {
      const void *lo = v == 1 ? (r == 0 ? mine : set) : acc;
      const void *hi = v == r ? mine : set + (size_t)v * slot_bytes;
      void *dst = v == n - 1 ? dst_final : acc;
      /* The first reduction writes the accumulator: it waits for the set's
       * previous reader too. */
      chain = hc_plan_push(p, (struct hc_step){.kind = HC_STEP_REDUCE, .redop = (uint8_t)op,
                                               .dtype = (uint8_t)a->dtype, .dst = dst, .src0 = lo, .src1 = hi,
                                               .count = clen,
                                               HC_DEPS(chain, got_from[v], v == 1 ? got_from[0] : 0,
                                                       v == 1 ? set_free[si] : 0)});
    }
    set_free[si] = chain;
    final[c] = hc_push_avg(p, a, dst_final, clen, n, chain);
  }
  if (allreduce) {
    /* Round 2: every finished piece of this rank's block to every peer. */
    for (int k = 1; k < n; k++) {
      const int v = (r + k) % n;
      for (size_t c = 0; c < l.nch; c++) {
        hc_chunk(my_len, l.nch, c, &coff, &clen);
        if (clen) hc_push_send(p, hc_member(x, v), out_block + coff * es, clen * es, final[c], 0);
      }
    }
    const bool in_place = io.in == io.out;
    for (int k = 1; k < n; k++) {
      const int v = (r - k + n) % n;
      direct_block(&l, v, &off, &len);
      for (size_t c = 0; c < l.nch; c++) {
        hc_chunk(len, l.nch, c, &coff, &clen);
        if (clen)
          hc_push_recv(p, hc_member(x, v), HC_PTR(io.out, off + coff, es), clen * es,
                       in_place ? sent[(size_t)v * l.nch + c] : 0, io.in_dep);
      }
    }
  }
  free(sent);
  return HC_OK;
}

hc_result_t hc_direct_allreduce(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                struct hc_alg_io io) {
  return direct_reduce(p, x, a, io, true);
}

hc_result_t hc_direct_reducescatter(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                    struct hc_alg_io io) {
  return direct_reduce(p, x, a, io, false);
}
