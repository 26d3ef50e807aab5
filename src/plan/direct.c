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

/* One direct reduction being planned: the layout, this rank's block, the
 * slot sets, and the step records the rounds share. */
struct direct_run {
  struct hc_plan *p;
  const struct hc_plan_ctx *x;
  const struct hc_coll_args *a;
  struct hc_alg_io io;
  struct direct_layout l;
  size_t my_off, my_len;
  char *out_block; /* where this rank's reduced block goes */
  char *slots;     /* depth slot sets of n slots of slot_bytes */
  size_t slot_bytes, set_bytes;
  int depth;
  /* Per (peer, piece): the round-1 send (in place, round 2's receive into
   * the same bytes waits for it); per piece: the step after which it is
   * final in the output; per slot set: its last reader; per peer: the
   * receive of the current piece from it. One allocation, sent first. */
  hc_ref_t *sent, *final, *set_free, *got_from;
};

/* Round 1's sends, to peers r+1, r+2, ... so that no rank is everyone's
 * first. They read only the input. */
static void round1_sends(struct direct_run *d) {
  const struct direct_layout *l = &d->l;
  size_t off, len, coff, clen;
  for (int k = 1; k < l->n; k++) {
    const int v = (l->r + k) % l->n;
    direct_block(l, v, &off, &len);
    for (size_t c = 0; c < l->nch; c++) {
      hc_chunk(len, l->nch, c, &coff, &clen);
      if (clen)
        d->sent[(size_t)v * l->nch + c] =
            hc_push_send(d->p, hc_member(d->x, v), HC_PTR(d->io.in, off + coff, l->es), clen * l->es, d->io.in_dep, 0);
    }
  }
}

/* Round 1 for piece c of this rank's block: the receives from every peer
 * into its slot set, then the reductions in rank order. */
static void round1_reduce_piece(struct direct_run *d, size_t c) {
  const struct direct_layout *l = &d->l;
  const int n = l->n, r = l->r;
  size_t coff, clen;
  hc_chunk(d->my_len, l->nch, c, &coff, &clen);
  if (clen == 0) return;
  const int si = (int)(c % (size_t)d->depth);
  char *set = d->slots + (size_t)si * d->set_bytes;
  for (int k = 1; k < n; k++) {
    const int v = (r - k + n) % n;
    d->got_from[v] =
        hc_push_recv(d->p, hc_member(d->x, v), set + (size_t)v * d->slot_bytes, clen * l->es, d->set_free[si], 0);
  }
  d->got_from[r] = d->io.in_dep;
  const void *mine = HC_PTR(d->io.in, d->my_off + coff, l->es);
  char *acc = set + (size_t)r * d->slot_bytes, *dst_final = d->out_block + coff * l->es;
  hc_ref_t chain = 0;
  for (int v = 1; v < n; v++) {
    const void *lo = v == 1 ? (r == 0 ? mine : set) : acc;
    const void *hi = v == r ? mine : set + (size_t)v * d->slot_bytes;
    void *dst = v == n - 1 ? dst_final : acc;
    /* The first reduction writes the accumulator: it waits for the set's
     * previous reader too. */
    chain = hc_plan_push(d->p, (struct hc_step){.kind = HC_STEP_REDUCE,
                                                .redop = (uint8_t)hc_step_op(d->a->op),
                                                .dtype = (uint8_t)d->a->dtype,
                                                .dst = dst,
                                                .src0 = lo,
                                                .src1 = hi,
                                                .count = clen,
                                                HC_DEPS(chain, d->got_from[v], v == 1 ? d->got_from[0] : 0,
                                                        v == 1 ? d->set_free[si] : 0)});
  }
  d->set_free[si] = chain;
  d->final[c] = hc_push_avg(d->p, d->a, dst_final, clen, n, chain);
}

/* All-reduce's round 2: every finished piece of this rank's block to every
 * peer, and every peer's block straight into the output. */
static void round2(struct direct_run *d) {
  const struct direct_layout *l = &d->l;
  const int n = l->n, r = l->r;
  size_t off, len, coff, clen;
  for (int k = 1; k < n; k++) {
    const int v = (r + k) % n;
    for (size_t c = 0; c < l->nch; c++) {
      hc_chunk(d->my_len, l->nch, c, &coff, &clen);
      if (clen) hc_push_send(d->p, hc_member(d->x, v), d->out_block + coff * l->es, clen * l->es, d->final[c], 0);
    }
  }
  const bool in_place = d->io.in == d->io.out;
  for (int k = 1; k < n; k++) {
    const int v = (r - k + n) % n;
    direct_block(l, v, &off, &len);
    for (size_t c = 0; c < l->nch; c++) {
      hc_chunk(len, l->nch, c, &coff, &clen);
      if (clen)
        hc_push_recv(d->p, hc_member(d->x, v), HC_PTR(d->io.out, off + coff, l->es), clen * l->es,
                     in_place ? d->sent[(size_t)v * l->nch + c] : 0, d->io.in_dep);
    }
  }
}

static hc_result_t direct_reduce(struct hc_plan *p, const struct hc_plan_ctx *x, const struct hc_coll_args *a,
                                 struct hc_alg_io io, bool allreduce) {
  const int n = x->nranks;
  const size_t es = hc_dtype_size(a->dtype);
  struct direct_run d = {.p = p, .x = x, .a = a, .io = io};
  d.l = (struct direct_layout){.n = n, .r = x->rank, .es = es, .allreduce = allreduce, .count = a->count};
  const size_t maxlen = allreduce ? HC_DIV_UP(a->count, (size_t)n) : a->count;
  d.l.nch = hc_nchunks(maxlen, es, x->direct_chunk_bytes ? x->direct_chunk_bytes : x->chunk_bytes);
  d.l.piece_elems = HC_DIV_UP(maxlen, d.l.nch);
  direct_block(&d.l, x->rank, &d.my_off, &d.my_len);
  d.out_block = allreduce ? HC_PTR(io.out, d.my_off, es) : (char *)io.out;
  if (n == 1) {
    hc_ref_t copied = hc_push_copy(p, d.out_block, HC_PTR(io.in, d.my_off, es), d.my_len * es, io.in_dep, 0);
    hc_push_avg(p, a, d.out_block, d.my_len, n, copied);
    return HC_OK;
  }
  d.depth = (int)HC_MIN((size_t)HC_MIN(x->scratch_slots, DIRECT_DEPTH), d.l.nch);
  d.slot_bytes = d.l.piece_elems * es;
  d.set_bytes = (size_t)n * d.slot_bytes;
  d.slots = hc_plan_scratch(p, (size_t)d.depth * d.set_bytes);
  d.sent = calloc((size_t)n * d.l.nch + d.l.nch + (size_t)d.depth + (size_t)n, sizeof(hc_ref_t));
  if (d.slots == NULL || d.sent == NULL) {
    free(d.sent);
    return d.slots == NULL ? HC_OK /* the plan reports out of memory */
                           : HC_FAIL(HC_ERR_SYSTEM, "plan: out of host memory for %d x %zu step records", n, d.l.nch);
  }
  d.final = d.sent + (size_t)n * d.l.nch;
  d.set_free = d.final + d.l.nch;
  d.got_from = d.set_free + d.depth;
  round1_sends(&d);
  for (size_t c = 0; c < d.l.nch; c++) round1_reduce_piece(&d, c);
  if (allreduce) round2(&d);
  free(d.sent);
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
